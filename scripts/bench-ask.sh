#!/usr/bin/env bash
# The needRules round trip on this machine, for BENCHMARKS.md (release
# build, root): the time from filter-data holding a flow's first packet and
# asking filter-control to the answer deciding the flow, as filter-data
# measures it (p50/p99 over its latest 1024 questions, read with
# `filterctl status --json`).
#   scripts/bench-ask.sh [NAMES]      (default 500)
#
# Two network namespaces joined by a veth pair (10.79.0.1 client, .2
# server; nothing leaves the machine), nginx in the server, hallpass in the
# client with `policy.unknown: ask` and a lookup folder (file://) that lists
# every name. First pass: NAMES sequential HTTP requests, each to a new
# name, so each asks once and filter-control reads its lookup file. Then
# filter-data is killed (its overlay of answers goes with it) and the same
# names are asked again: filter-control answers every one from its cache.
set -euo pipefail
cd "$(dirname "$0")/.."
names=${1:-500}
bench_name=bench-ask
bench_net=79
bench_queue=6
source scripts/lib/bench-network.sh
bench_setup
bench_nginx

echo "blocked.test" >"$work/demo.txt"
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$work/demo.txt" >/dev/null
mkdir -p "$work/source/lookup"
for i in $(seq 1 "$names"); do echo "education" >"$work/source/lookup/h$i.ask.test"; done
cat >"$work/hallpass.yaml" <<YAML
queue:
  number: 6
  user: nobody        # the build folder's filter-data runs as nobody (no _hallpass user here)
rules:
  directory: $work/lib
  source: file://$work/source/
policy:
  block: [ demo ]
  unknown: ask
  askDefault: block
log:
  file: $work/audit.jsonl
  journald: false
admin:
  socket: $work/control.sock
YAML
bench_hallpass

requests() {  # prints the HTTP codes, counted: every one must be 200 (allowed by the lookup's answer)
    ip netns exec "$client" sh -c "for i in \$(seq 1 $names); do curl -s -o /dev/null -w '%{http_code}\n' -m 5 --resolve h\$i.ask.test:80:$server_ip http://h\$i.ask.test/; done" |
        sort | uniq -c
}

counters() {  # after the next health check, the round-trip counters from filterctl status
    sleep 2.5
    "$bin/filterctl" status --json --socket "$work/control.sock" | python3 -c '
import json, sys
counters = json.load(sys.stdin)["counters"]
print("  " + " ".join(f"{name}={counters.get(name)}" for name in
      ("questions", "answers", "askTimeouts", "roundTrips", "roundTripP50Micros", "roundTripP99Micros")))'
}

echo "# machine: $(nproc) cores, $(uname -r); $names names, one HTTP request each, sequential"
echo "first pass (filter-control reads each name's lookup file):"
requests
counters
data_pid=$(bench_data_pid)
kill -KILL "$data_pid"
sleep 0.5
bench_wait_for_queue
sleep 1
echo "second pass, a new filter-data (every answer from filter-control's cache):"
requests
counters
