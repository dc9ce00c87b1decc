#!/usr/bin/env bash
# How long filter-control takes to stop (SIGTERM to its exit: filter-data
# stopped, its last reports taken, the kernel rules removed) at the moments
# issue 27 names, for BENCHMARKS.md (release build, root).
#   scripts/bench-stop.sh [RUNS]      (default 5 of each)
#
# One network namespace (10.81.0.1; nothing leaves the machine; no traffic
# is needed), filter-control in it on queue 8 in closed mode with --store,
# started again for every run. The moments:
#   steady       1 s after filter-control said it is ready
#   after-start  0.25 s after it started filter-data (the moment of the
#                2.1 s stop measured under systemd before the supervisor
#                became a state machine)
#   reload       as soon as a SIGHUP's reload began (a store of 400,000
#                names, so that the reload, which checks the whole store
#                and has filter-data map it, is still running)
#   backoff      in the restart delay after filter-data was killed five
#                times in a row (the fifth delay is 0.8 s)
# systemctl stop adds the unit's ExecStopPost (filter-control --remove-rules)
# to these; scripts/test-systemd.sh measures that whole under systemd.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
bench_name=bench-stop
bench_net=81
bench_queue=8
source scripts/lib/bench-network.sh
bench_setup

# The reload's store: a list large enough that checking and mapping it takes a while.
awk 'BEGIN { for (i = 0; i < 400000; i++) printf "site%d.example.test\n", i; print "blocked.test" }' >"$work/demo.txt"
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$work/demo.txt"
cat >"$work/hallpass.yaml" <<YAML
queue:
  number: $bench_queue
  user: nobody        # the build folder's filter-data runs as nobody (no _hallpass user here)
  failMode: closed
rules:
  directory: $work/lib
policy:
  block: [ demo ]
  unknown: allow
log:
  file: $work/audit.jsonl
  journald: false
admin:
  socket: $work/control.sock
YAML

log=$work/filter-control.log
touch "$log"
mark=0
# The log since the current run began.
run_log() { tail -n "+$((mark + 1))" "$log"; }
# Waits until COUNT lines (default 1) of this run's log contain TEXT, at most 30 s.
wait_for_line() {
    local text=$1 count=${2:-1}
    for _ in $(seq 1 6000); do
        [ "$(run_log | grep -cF -- "$text")" -ge "$count" ] && return 0
        sleep 0.005
    done
    echo "$bench_name: no '$text' in filter-control's log" >&2
    run_log >&2
    exit 1
}
rules_left() { ip netns exec "$client" iptables-save | grep -c HALLPASS || true; }

# Starts filter-control, brings it to MOMENT, stops it with SIGTERM; sets `took`, the milliseconds to its exit.
stop_at() {
    local moment=$1 data start
    mark=$(wc -l <"$log")
    bench_hallpass
    case "$moment" in
        steady)
            wait_for_line "ready: filter-data filters"
            sleep 1
            ;;
        after-start)
            wait_for_line "filter-data started"
            sleep 0.25
            ;;
        reload)
            wait_for_line "ready: filter-data filters"
            kill -HUP "$control_pid"
            wait_for_line "SIGHUP: reloading"
            ;;
        backoff)
            wait_for_line "ready: filter-data filters"
            for kill in 1 2 3 4 5; do
                data=$(bench_data_pid)
                kill -KILL "$data"
                wait_for_line "restarting" "$kill"
                [ "$kill" = 5 ] && break
                until [ -n "$(bench_data_pid)" ] && [ "$(bench_data_pid)" != "$data" ]; do sleep 0.002; done
            done
            ;;
    esac
    start=$(date +%s%N)
    kill -TERM "$control_pid"
    wait "$control_pid" || true
    took=$((($(date +%s%N) - start) / 1000000))
    control_pid=""
    [ "$(rules_left)" = 0 ] || { echo "$bench_name: kernel rules left after the stop ($moment)" >&2; exit 1; }
    if [ "$moment" = reload ] && run_log | grep -q "now in force"; then echo "$bench_name: (the reload had ended before the stop)" >&2; fi
    if [ "$moment" = backoff ] && [ "$(run_log | grep -c "filter-data started")" != 5 ]; then
        echo "$bench_name: a filter-data was started during the stop" >&2
        exit 1
    fi
}

echo "# machine: $(nproc) cores, $(uname -r); closed mode; SIGTERM to filter-control's exit, in ms; $runs runs each"
printf "%-12s %s\n" moment "runs (ms)"
for moment in steady after-start reload backoff; do
    times=()
    for _ in $(seq 1 "$runs"); do
        stop_at "$moment"
        times+=("$took")
    done
    sorted=$(printf '%s\n' "${times[@]}" | sort -n)
    printf "%-12s %s   median %s, max %s\n" "$moment" "${times[*]}" "$(sed -n "$(((runs + 1) / 2))p" <<<"$sorted")" "$(tail -1 <<<"$sorted")"
done
