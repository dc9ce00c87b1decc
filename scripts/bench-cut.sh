#!/usr/bin/env bash
# How fast open connections are cut when the policy turns against them, for
# BENCHMARKS.md (release build, root).
#   scripts/bench-cut.sh [CONNECTIONS] [ROUNDS]     (default 100 connections, 3 rounds)
#
# Two network namespaces (10.81.0.1 client, .2 server; nothing leaves the
# machine), nginx in the server, hallpass in the client with a policy that
# allows everything. Each round opens CONNECTIONS keep-alive HTTP
# connections to c<i>.lesson-<round>.test (each named by its Host, allowed,
# then idle: their packets no longer reach filter-data), then runs
# `filterctl block lesson-<round>.test`, the path every change of policy
# takes (an exam starting, a schedule boundary, an override). For each
# connection: the time from just before the command to the moment the
# program holding it learned it was gone (the socket destroyed: ECONNABORTED).
# Prints p50 and max per round and over all, and how many were not cut
# within 10 s.
set -euo pipefail
cd "$(dirname "$0")/.."
connections=${1:-100}
rounds=${2:-3}
bench_name=bench-cut
bench_net=81
bench_queue=8
bench_build_flags=${BENCH_BUILD_FLAGS:-}
source scripts/lib/bench-network.sh
bench_setup
bench_nginx

echo "other.test" >"$work/demo.txt"
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$work/demo.txt"
cat >"$work/hallpass.yaml" <<YAML
queue:
  number: $bench_queue
  user: nobody        # the build folder's filter-data runs as nobody (no _hallpass user here)
  failMode: open
rules:
  directory: $work/lib
log:
  file: $work/audit.jsonl
  journald: false
policy:
  block: [ demo ]
  unknown: allow
admin:
  socket: $work/control.sock
YAML
bench_hallpass

echo "# machine: $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg); $connections idle keep-alive HTTP connections per round"
printf "%-6s %-10s %-10s %-10s %s\n" round cut "p50 ms" "max ms" "not cut"
all=()
for round in $(seq 1 "$rounds"); do
    domain=lesson-$round.test
    ip netns exec "$client" python3 scripts/lib/cut-holders.py "$server_ip" "$domain" "$connections" 15 >"$work/holders-$round.log" 2>&1 &
    holder=$!
    bench_pids+=("$holder")
    for _ in $(seq 1 300); do
        grep -q '^ready' "$work/holders-$round.log" && break
        kill -0 "$holder" 2>/dev/null || break
        sleep 0.1
    done
    grep -q '^ready' "$work/holders-$round.log" || { echo "$bench_name: the connections of round $round did not open:" >&2; cat "$work/holders-$round.log" >&2; exit 1; }
    # filter-control records each connection from filter-data's report; a moment for the last reports.
    sleep 0.5
    start=$EPOCHREALTIME
    "$bin/filterctl" block "$domain" --socket "$work/control.sock" >"$work/block-$round.log" 2>&1 ||
        { echo "$bench_name: filterctl block failed:" >&2; cat "$work/block-$round.log" >&2; exit 1; }
    wait "$holder" || true
    mapfile -t times < <(awk -v start="$start" '$1 == "cut" { printf "%.3f\n", ($3 - start) * 1000 }' "$work/holders-$round.log" | sort -n)
    cut=${#times[@]}
    if [ "$cut" -eq 0 ]; then
        printf "%-6s %-10s %-10s %-10s %s\n" "$round" 0 - - "$connections"
        echo "# nothing was cut; filter-control said:" && tail -5 "$work/filter-control.log" | sed 's/^/#   /'
        continue
    fi
    p50=${times[$(((cut - 1) / 2))]}
    max=${times[$((cut - 1))]}
    printf "%-6s %-10s %-10s %-10s %s\n" "$round" "$cut" "$p50" "$max" "$((connections - cut))"
    all+=("${times[@]}")
done
sorted=()
[ "${#all[@]}" -gt 0 ] && mapfile -t sorted < <(printf '%s\n' "${all[@]}" | sort -n)
total=${#sorted[@]}
if [ "$total" -gt 0 ]; then
    printf "%-6s %-10s %-10s %-10s %s\n" all "$total" "${sorted[$(((total - 1) / 2))]}" "${sorted[$((total - 1))]}" "$((connections * rounds - total))"
fi
awk '$1 == "cut" { print $4 }' "$work"/holders-*.log | sort | uniq -c | sed 's/^/# ended by: /'
