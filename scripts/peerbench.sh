#!/usr/bin/env bash
# hallpass side by side with the peers of ../shared/peerbench (a C accept-all
# NFQUEUE loop, a Python SNI filter, OpenSnitch, e2guardian, and the
# no-filter baseline), same workloads, same run; for BENCHMARKS.md.
#   scripts/peerbench.sh [run.sh options]      e.g. --quick, --rounds 2
#   HALLPASS_LOG=on scripts/peerbench.sh ...   the same with the collector on too
#   HALLPASS_BIN=DIR scripts/peerbench.sh ...  the programs in DIR instead of building
#
# hallpass installs its own kernel rules (FILTER_RULES=none): its chain in
# the filter table's OUTPUT, inserted once at start, below the harness's
# bypass rules when those come later. Ready when queue 0 is bound.
#
# HALLPASS_LOG=file (the default) writes the audit records to log.file only,
# as a lab machine does by default (journald aside); HALLPASS_LOG=off runs
# hallpass with no audit output at all (`log: { file: none, journald:
# false }`). HALLPASS_LOG=on writes the records as a lab machine of
# docs/fleet.md with a collector does: log.file in
# bench-out/peerbench, and log.syslog over TCP to rsyslog
# (docs/examples/rsyslog-collector.conf) in the harness's server namespace,
# at 10.99.0.2:514. The peer's command starts that rsyslog the first time
# (as a daemon, outside the peer's process tree, so its CPU is not counted
# as hallpass's); this script stops it at the end and prints how many
# records the file and the collector hold.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
peerbench=${HALLPASS_PEERBENCH:-$root/../shared/peerbench}
log_mode=${HALLPASS_LOG:-file}
[ "$(id -u)" = 0 ] || { echo "peerbench.sh: needs root" >&2; exit 77; }
[ -x "$peerbench/run.sh" ] || { echo "peerbench.sh: no harness at $peerbench (set HALLPASS_PEERBENCH)" >&2; exit 66; }
case "$log_mode" in
    on | file | off) ;;
    *) echo "peerbench.sh: HALLPASS_LOG is on, file or off, got '$log_mode'" >&2; exit 64 ;;
esac

scripts/install-deps.sh
# The programs: HALLPASS_BIN's (another commit, for an A/B in one session), or
# built as `make` builds them for a lab machine (the Swift runtime linked in).
source scripts/lib/bench-network.sh
bench_name=peerbench.sh
bench_build_flags="-c release --static-swift-stdlib"
bench_programs
work=$root/bench-out/peerbench
rm -rf "$work" && mkdir -p "$work"

# The harness's rules file (blocked.test and its subdomains) as one category.
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$peerbench/rules.txt"
if [ "$log_mode" = on ]; then
    log="  file: $work/audit.jsonl
  journald: false
  syslog: tcp://10.99.0.2:514   # the harness's server namespace
  machine: peerbench"
elif [ "$log_mode" = file ]; then
    log="  file: $work/audit.jsonl
  journald: false"
else
    log="  file: none
  journald: false"
fi
cat >"$work/hallpass.yaml" <<YAML
queue:
  number: 0            # the harness's PB_QUEUE
  user: nobody         # no _hallpass user on a bench machine: filter-data runs as nobody
  failMode: open
rules:
  directory: $work/lib
policy:
  block: [ demo ]
  unknown: allow
log:
$log
YAML

export FILTER_NAME=hallpass
export FILTER_RULES=none
export FILTER_READY=queue
export FILTER_CMD="$bin/filter-control --config $work/hallpass.yaml --store $work/rules.hpstore --runtime-dir $work/run"
if [ "$log_mode" = on ]; then
    mkdir -p "$work/collector" "$work/rsyslog-work"
    {
        printf 'global(workDirectory="%s")\n' "$work/rsyslog-work"
        sed "s|/var/log/hallpass-collector|$work/collector|" docs/examples/rsyslog-collector.conf
    } >"$work/rsyslog.conf"
    # pb-srv exists only once run.sh brought the topology up: the peer's command starts the collector.
    cat >"$work/start-collector.sh" <<SCRIPT
#!/bin/sh
[ -s "$work/rsyslog.pid" ] && kill -0 "\$(cat "$work/rsyslog.pid")" 2>/dev/null && exit 0
exec ip netns exec pb-srv rsyslogd -f "$work/rsyslog.conf" -i "$work/rsyslog.pid"
SCRIPT
    chmod +x "$work/start-collector.sh"
    FILTER_CMD="$work/start-collector.sh; exec $FILTER_CMD"
fi
stop_collector() {
    [ -s "$work/rsyslog.pid" ] && kill "$(cat "$work/rsyslog.pid")" 2>/dev/null
    return 0
}

# The harness reports the peak resident memory and the CPU of the whole
# process tree; filter-data's and filter-control's own are sampled here,
# every 0.2 s, for every process started on this run's store (the harness
# starts one hallpass per session): the highest VmHWM, and the last CPU
# time (utime + stime) seen of each process, summed at the end.
peak_of() {  # peak_of NAME: the highest VmHWM in kB seen for NAME processes of this run
    local name=$1 file=$work/peak-$1 pid hwm
    mkdir -p "$work/cpu-$name"
    for pid in $(pgrep -x "$name" 2>/dev/null); do
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$work" || continue
        # Fields 14 and 15 of stat, counted after the command's closing parenthesis.
        sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13}' >"$work/cpu-$name/$pid.tmp" &&
            mv "$work/cpu-$name/$pid.tmp" "$work/cpu-$name/$pid"
        hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
        if [ -n "$hwm" ] && [ "$hwm" -gt "$(cat "$file" 2>/dev/null || echo 0)" ]; then echo "$hwm" >"$file"; fi
    done
    return 0
}
( while sleep 0.2; do peak_of filter-data; peak_of filter-control; done ) &
sampler=$!
trap 'kill $sampler 2>/dev/null || true; stop_collector' EXIT

cd "$peerbench"
./run.sh "$@"
kill $sampler 2>/dev/null || true
if [ "$log_mode" = on ]; then
    sleep 1  # what the collector still writes
    echo "peerbench.sh: audit records: $(wc -l <"$work/audit.jsonl" 2>/dev/null || echo 0) in log.file," \
        "$(cat "$work/collector/peerbench.log" 2>/dev/null | wc -l) at the collector"
fi
ticks=$(getconf CLK_TCK)
for name in filter-data filter-control; do
    [ -s "$work/peak-$name" ] || continue
    awk -v name="$name" -v kb="$(cat "$work/peak-$name")" \
        'BEGIN { printf "peerbench.sh: %s peak resident memory (VmHWM): %.1f MB\n", name, kb / 1000 }'
    cat "$work/cpu-$name"/* 2>/dev/null | awk -v name="$name" -v hz="$ticks" \
        '{ t += $1; n += 1 } END { printf "peerbench.sh: %s CPU (user + system, all its sessions): %.2f s in %d processes\n", name, t / hz, n }'
done
