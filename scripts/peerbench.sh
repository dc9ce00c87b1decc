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
swift build -c release 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)
work=$root/bench-out/peerbench
rm -rf "$work" && mkdir -p "$work"

# The harness's rules file (blocked.test and its subdomains) as one category.
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$peerbench/rules.txt"
cat >"$work/hallpass.yaml" <<YAML
queue:
  number: 0            # the harness's PB_QUEUE
  failMode: open
policy:
  block: [ demo ]
  unknown: allow
YAML

export FILTER_NAME=hallpass
export FILTER_RULES=none
export FILTER_READY=queue
export FILTER_CMD="$bin/filter-control --config $work/hallpass.yaml --store $work/rules.hpstore --runtime-dir $work/run"
cd "$peerbench"
./run.sh "$@"
