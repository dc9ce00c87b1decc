#!/usr/bin/env bash
# The cost of the audit path, for BENCHMARKS.md (release build, root):
# blocked flows through hallpass with the audit log off and on, and whether
# every blocked flow became a record.
#   scripts/bench-audit.sh [SECONDS [CONCURRENCY...]]   (default: 10 s per step; 1 2 4 8 16 32)
#
# Two network namespaces joined by a veth pair (10.82.0.1 client, .2
# server; nothing leaves the machine): nginx and an rsyslog collector
# (docs/examples/rsyslog-collector.conf) in the server, hallpass in the
# client blocking *.blocked.test. The flows come from peerbench's connbench
# (../shared/peerbench/bin/connbench, or $HALLPASS_PEERBENCH/bin): plain
# HTTP to 64 names under blocked.test, resolved from a hosts file, each
# connection refused with a reset when its request is judged, the next one
# opened at once; CONCURRENCY connections at a time for SECONDS, so the
# rate is what the machine can do at that concurrency.
#
# Each concurrency runs twice, first with the audit log off (`log: { file:
# none, journald: false }`), then on (`log.file` plus `log.syslog:
# tcp://10.82.0.2:514`, users: name), on one filter-control per mode. After
# each step the script waits until the records stop coming (1 s without a
# new one) and then reads: filter-control's and filter-data's CPU time
# (/proc, utime + stime) per blocked flow, the records in the file and at
# the collector against the blocked flows, hallpass_audit_dropped_total
# from the metrics endpoint and filter-data's dropped reports from
# `filterctl status`. `uptime` before and after says how busy the machine was.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
[ $# -gt 0 ] && shift
levels=("$@")
[ ${#levels[@]} -gt 0 ] || levels=(1 2 4 8 16 32)
[[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] || { echo "bench-audit: SECONDS must be a whole number above 0, got '$seconds'" >&2; exit 64; }
for level in "${levels[@]}"; do
    [[ "$level" =~ ^[0-9]+$ ]] && [ "$level" -gt 0 ] || { echo "bench-audit: CONCURRENCY must be a whole number above 0, got '$level'" >&2; exit 64; }
done
peerbench=${HALLPASS_PEERBENCH:-$(pwd)/../shared/peerbench}
connbench=$peerbench/bin/connbench
[ -x "$connbench" ] || { echo "bench-audit: no connbench at $connbench (make in the peerbench folder, or set HALLPASS_PEERBENCH)" >&2; exit 66; }
command -v rsyslogd >/dev/null || { echo "bench-audit: rsyslogd is missing (scripts/install-deps.sh installs Debian's rsyslog)" >&2; exit 69; }

bench_name=bench-audit
bench_net=82
bench_queue=9
# A refused connection is reset on the client's side only (the REJECT answers the
# local socket): nginx keeps its end until its header timeout. A new connection
# from a port of such a connection meets a challenge ACK and waits for the SYN to
# be sent again (10-15 ms). With nginx's default 60 s these stale ends piled up
# over the steps and slowed the later ones (the concurrency-1 "on" step ran at a
# third of the "off" one for this alone), so nginx drops them after 1 s and each
# step starts once none is left.
bench_nginx_extra="client_header_timeout 1s;"
source scripts/lib/bench-network.sh
bench_setup
bench_nginx
bench_collector
names=()
for i in $(seq 0 63); do names+=("h$i.blocked.test"); done
bench_hosts "${names[@]}"
echo "blocked.test" >"$work/demo.txt"
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$work/demo.txt" >/dev/null
metrics_port=9734

configure() {  # configure off|on: $work/hallpass.yaml for that mode
    local log
    if [ "$1" = on ]; then
        log="  file: $work/audit.jsonl
  journald: false
  syslog: tcp://$server_ip:514
  machine: bench-audit
  users: name"
    else
        log="  file: none
  journald: false"
    fi
    cat >"$work/hallpass.yaml" <<YAML
queue:
  number: $bench_queue
  user: nobody        # the build folder's filter-data runs as nobody (no _hallpass user here)
rules:
  directory: $work/lib   # not the host's /var/lib/hallpass
policy:
  block: [ demo ]
log:
$log
admin:
  socket: $work/control.sock
metrics:
  address: 127.0.0.1
  port: $metrics_port
YAML
}

cpu_ticks() {  # utime + stime of PID, in clock ticks
    awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

lines() {  # the number of lines of FILE, 0 when there is none
    if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi
}

audit_lines() {  # the records in the audit file and the files it was rotated into (audit.jsonl.1, ...)
    cat "$work"/audit.jsonl "$work"/audit.jsonl.* 2>/dev/null | wc -l
}

settle() {  # waits until the file and the collector have had no new record for 1 s (at most 30 s)
    local last="" now quiet=0
    for _ in $(seq 1 150); do
        now="$(audit_lines) $(lines "$work/collector/bench-audit.log")"
        if [ "$now" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0; fi
        [ "$quiet" -ge 5 ] && return 0
        last=$now
        sleep 0.2
    done
}

metric() {  # metric NAME: its value at the metrics endpoint (0 when not there yet)
    ip netns exec "$client" curl -s "http://127.0.0.1:$metrics_port/metrics" |
        awk -v name="$1" '$1 == name { value = $2 } END { print value + 0 }'
}

blocked_decisions() {  # the blocked decisions filter-data reported (hallpass_decisions_total, action "block", summed)
    ip netns exec "$client" curl -s "http://127.0.0.1:$metrics_port/metrics" |
        awk '$1 ~ /^hallpass_decisions_total\{/ && $1 ~ /action="block"/ { sum += $2 } END { print sum + 0 }'
}

counter() {  # counter NAME: a counter of `filterctl status --json`
    "$bin/filterctl" status --json --socket "$work/control.sock" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["counters"].get(sys.argv[1], 0))' "$1"
}

hz=$(getconf CLK_TCK)
echo "# machine: $(nproc) cores ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(uname -r), $(free -g | awk '/Mem:/ { print $2 }') GiB"
echo "# uptime before: $(uptime)"
echo "# $seconds s per step; connbench -T (plain HTTP) to 64 names under blocked.test; CPU per blocked flow in µs"
printf '%-4s %5s %9s %8s %8s %5s %6s %12s %12s %8s %10s %8s %8s %8s\n' \
    log conc flows/s blocked decided ok tmout "control µs" "data µs" records collector "audit-d" "report-d" qdrop
for mode in off on; do
    configure "$mode"
    bench_hallpass
    data_pid=$(bench_data_pid)
    for level in "${levels[@]}"; do
        for _ in $(seq 1 50); do
            [ "$(ip netns exec "$server" ss -Htn state established '( sport = :80 )' | wc -l)" = 0 ] && break
            sleep 0.2
        done
        file0=$(audit_lines)
        collector0=$(lines "$work/collector/bench-audit.log")
        decided0=$(blocked_decisions)
        control0=$(cpu_ticks "$control_pid")
        data0=$(cpu_ticks "$data_pid")
        result=$(ip netns exec "$client" "$connbench" -T -p 80 -n 'h%d.blocked.test' -k 64 -c "$level" -d "$seconds" -t 2000 | tail -1)
        settle
        control1=$(cpu_ticks "$control_pid")
        data1=$(cpu_ticks "$data_pid")
        decided=$(($(blocked_decisions) - decided0))
        records=$(($(audit_lines) - file0))
        collected=$(($(lines "$work/collector/bench-audit.log") - collector0))
        read -r ok fail timeouts secs < <(python3 -c 'import json, sys; r = json.loads(sys.argv[1]); print(r["ok"], r["fail"], r["timeouts"], r["secs"])' "$result")
        flows=$((ok + fail + timeouts))
        awk -v mode="$mode" -v level="$level" -v flows="$flows" -v secs="$secs" -v fail="$fail" -v decided="$decided" -v ok="$ok" -v timeouts="$timeouts" \
            -v control=$((control1 - control0)) -v data=$((data1 - data0)) -v hz="$hz" \
            -v records="$([ "$mode" = on ] && echo "$records" || echo -)" -v collected="$([ "$mode" = on ] && echo "$collected" || echo -)" \
            -v dropped="$(metric hallpass_audit_dropped_total)" -v reports="$(counter reportsDropped)" \
            -v qdrop="$(($(counter queueDropped) + $(counter queueUserDropped)))" \
            'BEGIN { printf "%-4s %5d %9.0f %8d %8d %5d %6d %12.1f %12.1f %8s %10s %8d %8d %8d\n",
                     mode, level, flows / secs, fail, decided, ok, timeouts, control * 1e6 / hz / (fail > 0 ? fail : 1),
                     data * 1e6 / hz / (fail > 0 ? fail : 1), records, collected, dropped, reports, qdrop }'
    done
    kill "$control_pid"
    wait "$control_pid" 2>/dev/null || true
    control_pid=""
done
echo "# uptime after: $(uptime)"
echo "# columns: blocked = connections refused (each one a blocked flow, one record expected); decided = blocked"
echo "# decisions filter-data reported in the step (hallpass_decisions_total); ok = answered by nginx"
echo "# (a blocked flow let through); tmout = connections that timed out; records / collector = records written to"
echo "# log.file / received by rsyslog in the step; audit-d = hallpass_audit_dropped_total, report-d = reports"
echo "# filter-data dropped, qdrop = kernel queue drops (all three cumulative since filter-control started)"
