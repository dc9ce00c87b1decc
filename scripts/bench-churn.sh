#!/usr/bin/env bash
# Connection churn through hallpass, in peerbench's namespaces, with the CPU
# of filter-data and filter-control per connection each (peerbench reports
# only their sum), for A/B runs of the data path that take seconds, not
# minutes. See BENCHMARKS.md ("Per connection, process by process").
#
#   scripts/bench-churn.sh [http|tls] [SECONDS] [ROUNDS]     (default http 6 2)
#   HALLPASS_BIN=DIR        the programs in DIR instead of building
#   HALLPASS_BIN_B=DIR      a second build, run in turn with the first (A B A B ...)
#
# connbench (peerbench's client) opens connections to 64 allowed names at
# concurrency 8 for SECONDS after a 2 s warm-up; each line says, for one run:
# connections and their rate, CPU (user + system) of filter-data and of
# filter-control per connection, filter-data's user CPU alone, packets
# queued per connection, and filter-data's context switches per connection.
# Audit output is off (`log: { file: none, journald: false }`); a build
# too old for the `log:` key is started without it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
peerbench=${HALLPASS_PEERBENCH:-$root/../shared/peerbench}
kind=${1:-http}
seconds=${2:-6}
rounds=${3:-2}
case "$kind" in http | tls) ;; *) echo "bench-churn.sh: http or tls, got '$kind'" >&2; exit 64 ;; esac
[ "$(id -u)" = 0 ] || { echo "bench-churn.sh: needs root" >&2; exit 77; }
[ -x "$peerbench/run.sh" ] || { echo "bench-churn.sh: no harness at $peerbench (set HALLPASS_PEERBENCH)" >&2; exit 66; }

scripts/install-deps.sh >/dev/null
source scripts/lib/bench-network.sh
bench_name=bench-churn.sh
bench_build_flags="-c release --static-swift-stdlib"
bench_programs
builds=("$bin")
[ -n "${HALLPASS_BIN_B:-}" ] && builds+=("$HALLPASS_BIN_B")
work=$root/bench-out/churn
rm -rf "$work" && mkdir -p "$work"
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$peerbench/rules.txt" >/dev/null

control_pid=""
cleanup() {
    if [ -n "$control_pid" ]; then kill -TERM "$control_pid" 2>/dev/null || true; wait "$control_pid" 2>/dev/null || true; fi
    (cd "$peerbench" && ./topo.sh down >/dev/null 2>&1) || true
}
trap cleanup EXIT
(cd "$peerbench" && ./setup.sh >/dev/null && ./topo.sh up >/dev/null && ./topo.sh servers-start >/dev/null)
in_client() { ip netns exec pb-cli sh -c "mount --bind $peerbench/run/resolv.conf /etc/resolv.conf && exec $*"; }
queue_sequence() { ip netns exec pb-cli awk '$1 == 0 { print $8 }' /proc/net/netfilter/nfnetlink_queue; }
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk -v field="$2" '{ print field == "user" ? $12 : $12 + $13 }'; }
switches() { awk '/ctxt_switches/ { n += $2 } END { print n }' "/proc/$1/status"; }

# Starts filter-control from $1 with or without the log: key; sets control_pid. Fails if the queue does not come up.
start_hallpass() {
    local programs=$1 with_log=$2
    for table in mangle filter nat raw; do ip netns exec pb-cli iptables -w -t "$table" -F; ip netns exec pb-cli iptables -w -t "$table" -X; done
    {
        printf 'queue:\n  number: 0\n  user: nobody\n  failMode: open\nrules:\n  directory: %s/lib\npolicy:\n  block: [ demo ]\n  unknown: allow\n' "$work"
        [ "$with_log" = 1 ] && printf 'log:\n  file: none\n  journald: false\n'
    } >"$work/hallpass.yaml"
    nsenter --net=/run/netns/pb-cli unshare --mount --propagation private \
        "$programs/filter-control" --config "$work/hallpass.yaml" --store "$work/rules.hpstore" --runtime-dir "$work/run" \
        >>"$work/filter-control.log" 2>&1 &
    control_pid=$!
    for _ in $(seq 100); do
        kill -0 "$control_pid" 2>/dev/null || { wait "$control_pid" || true; control_pid=""; return 1; }
        [ -n "$(queue_sequence)" ] && return 0
        sleep 0.1
    done
    return 1
}

extra=(-T -p 80)
[ "$kind" = tls ] && extra=()
hz=$(getconf CLK_TCK)
for round in $(seq "$rounds"); do
    for programs in "${builds[@]}"; do
        start_hallpass "$programs" 1 || start_hallpass "$programs" 0 ||
            { echo "bench-churn.sh: hallpass from $programs did not start; see $work/filter-control.log" >&2; exit 1; }
        sleep 1
        data_pid=$(pgrep -P "$control_pid" -x filter-data | head -1)
        in_client "$peerbench/bin/connbench" -n h%d.allowed.test -k 64 -c 8 -d 2 -t 2000 "${extra[@]}" >/dev/null
        c0=$(cpu_ticks "$control_pid" all) d0=$(cpu_ticks "$data_pid" all) u0=$(cpu_ticks "$data_pid" user)
        s0=$(switches "$data_pid") q0=$(queue_sequence)
        result=$(in_client "$peerbench/bin/connbench" -n h%d.allowed.test -k 64 -c 8 -d "$seconds" -t 2000 "${extra[@]}" | tail -1)
        c1=$(cpu_ticks "$control_pid" all) d1=$(cpu_ticks "$data_pid" all) u1=$(cpu_ticks "$data_pid" user)
        s1=$(switches "$data_pid") q1=$(queue_sequence)
        kill -TERM "$control_pid" && wait "$control_pid" || true
        control_pid=""
        python3 -c '
import json, sys
r = json.loads(sys.argv[1]); ok, secs, failed = r["ok"], r["secs"], r["fail"]; n = max(1, ok); hz = float(sys.argv[2])
c, d, u, s, q = (float(b) - float(a) for a, b in zip(sys.argv[3:13:2], sys.argv[4:13:2]))
print(f"round {sys.argv[13]} {sys.argv[14]} {sys.argv[15]}: {ok} connections, {ok / secs:,.0f}/s, {failed} failed;"
      f" us per connection: filter-data {d / hz / n * 1e6:.1f} (user {u / hz / n * 1e6:.1f}), filter-control {c / hz / n * 1e6:.1f},"
      f" both {(c + d) / hz / n * 1e6:.1f}; queued {q / n:.2f}, filter-data context switches {s / n:.3f} per connection")
' "$result" "$hz" "$c0" "$c1" "$d0" "$d1" "$u0" "$u1" "$s0" "$s1" "$q0" "$q1" "$round" "$kind" "$programs"
    done
done
