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
[ "$(id -u)" = 0 ] || { echo "bench-live.sh: needs root (network namespaces, NFQUEUE)" >&2; exit 77; }
labs=${LABS:-30}
sims=${SIMS:-2970}
rounds=${ROUNDS:-10}
request_rounds=${REQUEST_ROUNDS:-10}

scripts/install-deps.sh >/dev/null
venv=.build/bench-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import aiohttp, cryptography" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "aiohttp>=3.9,<4" "cryptography>=42"
fi
if [ -n "${HALLPASS_BIN:-}" ]; then
    bin=$HALLPASS_BIN
else
    swift build -c release --static-swift-stdlib 2>&1 | tail -1
    bin=$(swift build -c release --static-swift-stdlib --show-bin-path)
fi
out=$PWD/bench-out/live
rm -rf "$out" && mkdir -p "$out"
work=$(mktemp -d /tmp/hallpass-bench-live.XXXXXX)
# filter-data (nobody, once locked down) reads each machine's rules and runtime folders.
chmod 755 "$work"
server=hpl$$s
address=10.90.0.1
url=https://$address:8443
pids=()
namespaces=("$server")

cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() {  # what, command...: up to 60 s
    local what=$1
    shift
    for _ in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "bench-live.sh: timed out waiting for $what" >&2
    return 1
}

echo "== the network: the server namespace ($address: hallpass-server, nginx) and $labs lab machines"
ip netns add "$server"
ip -n "$server" link set lo up
ip -n "$server" addr add "$address/32" dev lo
for i in $(seq "$labs"); do
    ns=hpl$$l$i
    namespaces+=("$ns")
    ip netns add "$ns"
    ip link add "l$$a$i" type veth peer name "l$$b$i"
    ip link set "l$$a$i" netns "$ns"
    ip link set "l$$b$i" netns "$server"
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "10.91.$i.1/24" dev "l$$a$i"
    ip -n "$server" addr add "10.91.$i.2/24" dev "l$$b$i"
    ip -n "$ns" link set "l$$a$i" up
    ip -n "$server" link set "l$$b$i" up
    ip -n "$ns" route add "$address/32" via "10.91.$i.2"
done

cat >"$work/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
user root;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server {
    listen $address:80;
    server_name _;
    location / { return 200 "ok \$host\\n"; }
  }
}
EOF
ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" >"$work/nginx.log" 2>&1 &
pids+=($!)

echo "== the school's server (release, SQLite), its policy with live: naming its live key, published"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/server.key" -out "$work/server.crt" \
    -subj /CN=school -addext "subjectAltName=IP:$address" -days 2 2>/dev/null
cat >"$work/server.yaml" <<EOF
listen:
  address: $address
  port: 8443
tls:
  certificate: $work/server.crt
  key: $work/server.key
database: $work/server.db
# thousands of simulated machines enrol from one address within a minute
machines:
  enrolRate: 100000
EOF
hs() { "$bin/hallpass-server" "$@" --config "$work/server.yaml"; }
hs init >"$work/init.log" 2>&1
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
ip netns exec "$server" "$bin/hallpass-server" serve --config "$work/server.yaml" >"$out/server.log" 2>&1 &
server_pid=$!
pids+=("$server_pid")
wait_for "hallpass-server" ip netns exec "$server" curl -sk -o /dev/null -m 1 "$url/metrics"

echo "== $labs lab machines enrol in lab1 and start filter-control"
for i in $(seq "$labs"); do
    ns=hpl$$l$i
    folder=$work/lab$i
    mkdir -p "$folder/lib" "$folder/run"
    chmod 755 "$folder" "$folder/lib" "$folder/run"
    cat >"$folder/hallpass.yaml" <<EOF
queue:
  user: nobody
  number: 3
rules:
  directory: $folder/lib
policy:
  unknown: allow
blockPage:
  organization: "bench-live school"
  requestAccess:
    text: "Ask your teacher"
    url: builtin
log:
  file: $folder/audit.jsonl
  journald: false
admin:
  socket: $folder/control.sock
EOF
    ip netns exec "$ns" "$bin/filterctl" enroll "$url" "$lab_token" --config "$folder/hallpass.yaml" >"$folder/enrol.log" 2>&1
    ip netns exec "$ns" "$bin/filter-control" --config "$folder/hallpass.yaml" --runtime-dir "$folder/run" >"$folder/filter-control.log" 2>&1 &
    pids+=($!)
done
for i in $(seq "$labs"); do
    folder=$work/lab$i
    wait_for "lab machine $i's first rules" sh -c "'$bin/filterctl' status --socket '$folder/control.sock' | grep -q 'version 1,'" \
        || { tail -30 "$folder/filter-control.log" >&2; exit 1; }
done

echo "== $sims simulated machines hold their live request; $rounds rounds of a room rule and its end"
lab_list=$(for i in $(seq "$labs"); do printf 'hpl%sl%s,' "$$" "$i"; done)
ip netns exec "$server" "$venv/bin/python" scripts/lib/live-bench.py --server "$url" --server-pid "$server_pid" \
    --api-token "$api_token" --sim-token "$sim_token" --sims "$sims" --labs "$lab_list" --room lab1 --nginx "$address" \
    --rounds "$rounds" --request-rounds "$request_rounds" | tee "$out/result.json"
echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
