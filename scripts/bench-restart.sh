#!/usr/bin/env bash
# How fast filtering comes back after filter-data dies under load, for
# BENCHMARKS.md (release build, root).
#   scripts/bench-restart.sh [KILLS]      (default 5)
#
# Two network namespaces (10.80.0.1 client, .2 server; nothing leaves the
# machine), nginx in the server, hallpass in the client on queue 7 in
# closed mode with rules that block blocked.test. Two loops of HTTP
# requests to allowed names keep it busy and a third tries blocked.test
# without pause. Each round kills filter-data with SIGKILL and measures,
# from the kill: when a new filter-data has bound the queue, and when the
# first new connection to an allowed name succeeds again. Rounds are 32 s
# apart, so each restart is a first failure (filter-control's backoff
# starts again after 30 s of stable running). At the end: how many
# attempts on the blocked name succeeded during the whole run (must be 0).
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-5}
bench_name=bench-restart
bench_net=80
bench_queue=7
source scripts/lib/bench-network.sh
bench_setup
bench_nginx

echo "blocked.test" >"$work/demo.txt"
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
bench_hallpass

# Load: two loops of new connections to allowed names, one to the blocked name.
load_pids=()
for loop in 1 2; do
    ip netns exec "$client" sh -c "i=0; while :; do i=\$((i+1)); curl -s -o /dev/null -m 2 --resolve l$loop-\$i.allowed.test:80:$server_ip http://l$loop-\$i.allowed.test/; done" &
    load_pids+=($!)
done
ip netns exec "$client" sh -c "while :; do curl -s -o /dev/null -m 1 --resolve blocked.test:80:$server_ip http://blocked.test/ && echo success || echo refused; done" \
    >"$work/blocked.log" &
load_pids+=($!)
stop_load() { for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait "${load_pids[@]}" 2>/dev/null || true; }
trap 'stop_load; bench_cleanup' EXIT

now() { date +%s%N; }
echo "# machine: $(nproc) cores, $(uname -r); closed mode; 2 loops of new HTTP connections plus attempts on a blocked name"
printf "%-6s %-14s %-22s\n" round "queue bound" "first allowed request"
bound_all=()
served_all=()
for round in $(seq 1 "$kills"); do
    sleep 32
    old=$(bench_data_pid)
    start=$(now)
    kill -KILL "$old"
    # The old binding goes with the process; wait for a new filter-data on the queue.
    # (By its pid, not its path: filter-control starts it by the resolved path.) Dead once gone or a zombie.
    while [ -e "/proc/$old" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$old/status" 2>/dev/null; do sleep 0.001; done
    until bench_queue_bound; do sleep 0.002; done
    bound=$(( ($(now) - start) / 1000000 ))
    n=0
    until ip netns exec "$client" curl -s -o /dev/null -m 1 --resolve "r$round-$n.allowed.test:80:$server_ip" "http://r$round-$n.allowed.test/"; do
        n=$((n + 1))
    done
    served=$(( ($(now) - start) / 1000000 ))
    bound_all+=("$bound")
    served_all+=("$served")
    printf "%-6s %-14s %-22s\n" "$round" "${bound} ms" "${served} ms"
done
stop_load
successes=$(grep -c '^success$' "$work/blocked.log" || true)
attempts=$(wc -l <"$work/blocked.log")
max() { printf '%s\n' "$@" | sort -n | tail -1; }
echo "max: queue bound $(max "${bound_all[@]}") ms, first allowed request $(max "${served_all[@]}") ms"
echo "attempts on blocked.test during the run: $attempts, succeeded: $successes"
echo "filter-control restarts: $(grep -c 'restarting' "$work/filter-control.log" || true)"
