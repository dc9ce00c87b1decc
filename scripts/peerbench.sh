#!/usr/bin/env bash
# hallpass side by side with the peers of ../shared/peerbench (a C accept-all
# NFQUEUE loop, a Python SNI filter, OpenSnitch, e2guardian, and the
# no-filter baseline), same workloads, same run; for BENCHMARKS.md.
#   scripts/peerbench.sh [run.sh options]      e.g. --quick, --rounds 2
#
# hallpass installs its own kernel rules (FILTER_RULES=none): its chain in
# the filter table's OUTPUT, inserted once at start, below the harness's
# bypass rules when those come later. Ready when queue 0 is bound.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
peerbench=${HALLPASS_PEERBENCH:-$root/../shared/peerbench}
[ "$(id -u)" = 0 ] || { echo "peerbench.sh: needs root" >&2; exit 77; }
[ -x "$peerbench/run.sh" ] || { echo "peerbench.sh: no harness at $peerbench (set HALLPASS_PEERBENCH)" >&2; exit 66; }

scripts/install-deps.sh
# As `make` builds it for a lab machine: the Swift runtime linked in.
swift build -c release --static-swift-stdlib 2>&1 | tail -1
bin=$(swift build -c release --static-swift-stdlib --show-bin-path)
work=$root/bench-out/peerbench
rm -rf "$work" && mkdir -p "$work"

# The harness's rules file (blocked.test and its subdomains) as one category.
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$peerbench/rules.txt"
cat >"$work/hallpass.yaml" <<YAML
queue:
  number: 0            # the harness's PB_QUEUE
  failMode: open
rules:
  directory: $work/lib
policy:
  block: [ demo ]
  unknown: allow
log:
  file: $work/audit.jsonl
  journald: false
YAML

export FILTER_NAME=hallpass
export FILTER_RULES=none
export FILTER_READY=queue
export FILTER_CMD="$bin/filter-control --config $work/hallpass.yaml --store $work/rules.hpstore --runtime-dir $work/run"

# The harness reports the peak resident memory of the whole process tree;
# filter-data's own peak (VmHWM) is sampled here, every 0.2 s, for every
# filter-data started on this run's store (the harness starts one per session).
peak_of() {  # peak_of NAME: the highest VmHWM in kB seen for NAME processes of this run
    local name=$1 file=$work/peak-$1 pid hwm
    for pid in $(pgrep -x "$name" 2>/dev/null); do
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$work" || continue
        hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
        if [ -n "$hwm" ] && [ "$hwm" -gt "$(cat "$file" 2>/dev/null || echo 0)" ]; then echo "$hwm" >"$file"; fi
    done
    return 0
}
( while sleep 0.2; do peak_of filter-data; peak_of filter-control; done ) &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT

cd "$peerbench"
./run.sh "$@"
kill $sampler 2>/dev/null || true
for name in filter-data filter-control; do
    [ -s "$work/peak-$name" ] || continue
    awk -v name="$name" -v kb="$(cat "$work/peak-$name")" \
        'BEGIN { printf "peerbench.sh: %s peak resident memory (VmHWM): %.1f MB\n", name, kb / 1000 }'
done
