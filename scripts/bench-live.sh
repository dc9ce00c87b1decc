#!/usr/bin/env bash
# The live channel, for BENCHMARKS.md ("The live channel").
#   scripts/bench-live.sh
#
# A release hallpass-server on SQLite in a server network namespace, with
# nginx for the sites; LABS real lab machines (default 30: the room of the
# targets), each in a network namespace of its own with its own
# filter-control and filter-data, enrolled in room lab1 and taking their
# rules from the server; and SIMS simulated machines (default 2970, so that
# 3,000 machines hold their live request; scripts/lib/live-bench.py) in
# another room. ROUNDS times (default 10) a teacher of lab1 (an API token)
# blocks a name of its own in the room and then ends the block; on every
# real machine a probe as a person (a uid of the lab's, 61000) notes when the
# name was first refused and first served again (scripts/lib/live-probe.py).
# Then REQUEST_ROUNDS times (default 10) that person asks for a blocked
# name on a machine's block page (a machine each round), the teacher
# approves it for the room through the API once GET /api/v1/requests lists
# it, and the probe notes when the site is served; the student's waiting
# page reloads itself every 2 s, so when it would load the site follows.
# Prints and keeps (bench-out/live/result.json): the rule's and the end's
# p50, p99 and max over every machine and round, from just before the API
# request to the moment the machine's person met the change; the simulated
# machines' held polls; the server's resident memory with every poll held.
# Everything runs on this machine's cores: the 30 filter-controls, the probes
# and the simulator are part of the load. Run as root; removes everything it
# made (namespaces, processes by pid, the work folder), also on failure.
# HALLPASS_BIN (from the environment): a folder with the four programs to use
# instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
labs=${LABS:-30}
sims=${SIMS:-2970}
rounds=${ROUNDS:-10}
request_rounds=${REQUEST_ROUNDS:-10}
lab_name=bench-live
lab_tag=hpl
lab_net=90
# shellcheck source=lib/lab-network.sh
. scripts/lib/lab-network.sh
out=$PWD/bench-out/live
rm -rf "$out" && mkdir -p "$out"

echo "== the network: the server namespace (10.$lab_net.0.1: hallpass-server, nginx) and $labs lab machines"
lab_setup
lab_nginx

echo "== the school's server (release, SQLite), its policy with live: naming its live key, published"
lab_server_config </dev/null
key=$(hs live-key 2>/dev/null | grep '^ed25519:')
# blocked.test, and a name of its own for each access request the benchmark makes
{ echo "blocked.test"; for i in $(seq 0 99); do echo "req-$i.test"; done; } >"$work/demo.txt"
cat >"$work/policy.yaml" <<EOF
live:
  keys: [ "$key" ]
  actions: [ allow, block, focus, pause ]
  longest: 2h
policy:
  block: [ demo ]
  unknown: allow
EOF
hs policy set --policy "$work/policy.yaml" --list "demo=$work/demo.txt" --reason "bench-live" >"$work/policy.log" 2>&1
hs publish --reason "bench-live" >>"$work/policy.log" 2>&1
lab_token=$(hs token create --room lab1 --uses "$labs" 2>/dev/null | grep '^hp1\.')
sim_token=$(hs token create --room sims --uses "$sims" 2>/dev/null | grep '^hp1\.')
api_token=$(hs api-token create --role teacher --room lab1 2>/dev/null | tail -n 1)
lab_server_start "$out/server.log"

echo "== $labs lab machines enrol in lab1 and start filter-control"
lab_machines "$lab_token" <<EOF
blockPage:
  organization: "bench-live school"
  requestAccess:
    text: "Ask your teacher"
    url: builtin
EOF

echo "== $sims simulated machines hold their live request; $rounds rounds of a room rule and its end"
lab_list=$(for i in $(seq "$labs"); do printf '%s,' "$(lab_namespace "$i")"; done)
ip netns exec "$server" "$venv/bin/python" scripts/lib/live-bench.py --server "$url" --server-pid "$server_pid" \
    --api-token "$api_token" --sim-token "$sim_token" --sims "$sims" --labs "$lab_list" --room lab1 --nginx "$address" \
    --rounds "$rounds" --request-rounds "$request_rounds" | tee "$out/result.json"
echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
