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
[ "$(id -u)" = 0 ] || { echo "bench-ask.sh: needs root (network namespaces, iptables, NFQUEUE)" >&2; exit 77; }

scripts/install-deps.sh
swift build -c release 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/hallpass-bench-ask.XXXXXX)
client=hpbac$$
server=hpbas$$
control_pid=""
nginx_pid=""

cleanup() {
    [ -n "$control_pid" ] && kill "$control_pid" 2>/dev/null && wait "$control_pid" 2>/dev/null || true
    [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null || true
    ip netns del "$client" 2>/dev/null || true
    ip netns del "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$client"
ip netns add "$server"
ip link add "a$$c" type veth peer name "a$$s"
ip link set "a$$c" netns "$client"
ip link set "a$$s" netns "$server"
ip -n "$client" link set lo up
ip -n "$server" link set lo up
ip -n "$client" addr add 10.79.0.1/24 dev "a$$c"
ip -n "$server" addr add 10.79.0.2/24 dev "a$$s"
ip -n "$client" link set "a$$c" up
ip -n "$server" link set "a$$s" up

cat >"$work/nginx.conf" <<NGINX
daemon off;
master_process off;
worker_processes 1;
user root;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server {
    listen 10.79.0.2:80;
    location / { return 200 "ok \$host\n"; }
  }
}
NGINX
ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" &
nginx_pid=$!

echo "blocked.test" >"$work/demo.txt"
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$work/demo.txt" >/dev/null
mkdir -p "$work/source/lookup"
for i in $(seq 1 "$names"); do echo "education" >"$work/source/lookup/h$i.ask.test"; done
cat >"$work/hallpass.yaml" <<YAML
queue:
  number: 6
rules:
  source: file://$work/source/
policy:
  block: [ demo ]
  unknown: ask
  askDefault: block
admin:
  socket: $work/control.sock
YAML
ip netns exec "$client" "$bin/filter-control" --config "$work/hallpass.yaml" --store "$work/rules.hpstore" \
    --runtime-dir "$work/run" 2>"$work/filter-control.log" &
control_pid=$!

wait_for_queue() {
    for _ in $(seq 1 100); do
        ip netns exec "$client" awk '$1 == 6 { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue 2>/dev/null && return 0
        sleep 0.1
    done
    echo "bench-ask.sh: filter-data did not bind queue 6" >&2
    cat "$work/filter-control.log" >&2
    exit 1
}

requests() {  # prints the HTTP codes, counted: every one must be 200 (allowed by the lookup's answer)
    ip netns exec "$client" sh -c "for i in \$(seq 1 $names); do curl -s -o /dev/null -w '%{http_code}\n' -m 5 --resolve h\$i.ask.test:80:10.79.0.2 http://h\$i.ask.test/; done" |
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

wait_for_queue
echo "# machine: $(nproc) cores, $(uname -r); $names names, one HTTP request each, sequential"
echo "first pass (filter-control reads each name's lookup file):"
requests
counters
data_pid=$(pgrep -f "$bin/filter-data --queue 6" | head -1)
kill -KILL "$data_pid"
sleep 0.5
wait_for_queue
sleep 1
echo "second pass, a new filter-data (every answer from filter-control's cache):"
requests
counters
