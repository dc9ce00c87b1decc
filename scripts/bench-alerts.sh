#!/usr/bin/env bash
# Safeguarding alerts, for BENCHMARKS.md ("Safeguarding alerts").
#   scripts/bench-alerts.sh
#
# From the blocked packet on a lab machine to the SMTP server's receipt of
# the danger alert, with the fleet simulator posting records at the same
# time. A release hallpass-server on SQLite in a server network namespace,
# sending its alerts through Debian's msmtp to an SMTP server on that
# namespace's loopback (scripts/lib/smtp-sink.py, Debian's aiosmtpd, which
# writes the time each message arrives); nginx for the sites; LABS real lab
# machines (default 3), each in a network namespace of its own with its own
# filter-control and filter-data, enrolled and taking the published policy,
# which blocks the category dangerous_material (a danger rule of the
# shipped safeguarding rules). Meanwhile MACHINES simulated machines
# (default 300, scripts/lib/fleet-sim.py) post records at RATE records a
# second for the whole fleet (default 5000, the server's ingest target) for
# FLEET_DURATION seconds (default 150). ROUNDS times (default 30), one after
# the other, a pupil of their own (a uid known only to the lab machines'
# user database) opens a dangerous site on a lab machine (one machine after
# another); the time is taken just before curl starts and again when the
# email naming that pupil reaches the SMTP server. A new pupil each round:
# the repeat limit (one alert per person and rule in 10 minutes) would
# otherwise hold the second back.
# Prints and keeps (bench-out/alerts/result.json): p50, p99 and max over the
# rounds, the rounds the fleet was posting during, and the fleet's result.
# Everything runs on this machine's cores. Run as root; removes everything
# it made (namespaces, processes by pid, the work folder), also on failure.
# HALLPASS_BIN (from the environment): a folder with the programs to use
# instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-alerts.sh: needs root (network namespaces, NFQUEUE)" >&2; exit 77; }
labs=${LABS:-3}
rounds=${ROUNDS:-30}
machines=${MACHINES:-300}
rate=${RATE:-5000}
fleet_duration=${FLEET_DURATION:-150}

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
out=$PWD/bench-out/alerts
rm -rf "$out" && mkdir -p "$out"
work=$(mktemp -d /tmp/hallpass-bench-alerts.XXXXXX)
# filter-data (nobody, once locked down) reads each machine's rules and runtime folders.
chmod 755 "$work"
server=hpa$$s
address=10.93.0.1
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
    echo "bench-alerts.sh: timed out waiting for $what" >&2
    return 1
}

echo "== the network: the server namespace ($address: hallpass-server, nginx, the SMTP server) and $labs lab machines"
ip netns add "$server"
ip -n "$server" link set lo up
ip -n "$server" addr add "$address/32" dev lo
for i in $(seq "$labs"); do
    ns=hpa$$l$i
    namespaces+=("$ns")
    ip netns add "$ns"
    ip link add "a$$a$i" type veth peer name "a$$b$i"
    ip link set "a$$a$i" netns "$ns"
    ip link set "a$$b$i" netns "$server"
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "10.94.$i.1/24" dev "a$$a$i"
    ip -n "$server" addr add "10.94.$i.2/24" dev "a$$b$i"
    ip -n "$ns" link set "a$$a$i" up
    ip -n "$server" link set "a$$b$i" up
    ip -n "$ns" route add "$address/32" via "10.94.$i.2"
done

cat >"$work/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
user root;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
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

echo "== the SMTP server and msmtp"
ip netns exec "$server" /usr/bin/python3 scripts/lib/smtp-sink.py --port 2525 --out "$out/received.jsonl" >"$work/smtp.log" 2>&1 &
pids+=($!)
wait_for "the SMTP server" grep -q "smtp ready" "$work/smtp.log"
cat >"$work/msmtprc" <<EOF
defaults
auth off
tls off
timeout 10
account school
host 127.0.0.1
port 2525
from hallpass@school.example
account default : school
EOF
chmod 600 "$work/msmtprc"

echo "== the school's server (release, SQLite), its policy blocking dangerous_material, published"
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
# the simulated fleet enrols from one address within a minute
machines:
  enrolRate: 100000
console:
  url: https://hallpass.school.example:8443
alerts:
  from: "bench-alerts <hallpass@school.example>"
  sendmail: [/usr/bin/msmtp, -C, $work/msmtprc, -t]
  email: [danger]
EOF
hs() { "$bin/hallpass-server" "$@" --config "$work/server.yaml"; }
hs init >"$work/init.log" 2>&1
for r in $(seq 0 $((rounds - 1))); do echo "danger-$r.test"; done >"$work/dangerous_material.txt"
cat >"$work/policy.yaml" <<EOF
policy:
  block: [ dangerous_material ]
  unknown: allow
EOF
hs policy set --policy "$work/policy.yaml" --list "dangerous_material=$work/dangerous_material.txt" --reason "bench-alerts" >"$work/policy.log" 2>&1
hs publish --reason "bench-alerts" >>"$work/policy.log" 2>&1
printf '%s\n' 'a long bench password' | hs user add dsl --role safeguarding --email dsl@school.example --password-stdin >"$work/user.log" 2>&1
lab_token=$(hs token create --room lab1 --uses "$labs" 2>/dev/null | grep '^hp1\.')
sim_token=$(hs token create --room sims --uses "$machines" 2>/dev/null | grep '^hp1\.')
ip netns exec "$server" "$bin/hallpass-server" serve --config "$work/server.yaml" >"$out/server.log" 2>&1 &
server_pid=$!
pids+=("$server_pid")
wait_for "hallpass-server" ip netns exec "$server" curl -sk -o /dev/null -m 1 "$url/metrics"

echo "== $labs lab machines enrol in lab1 and start filter-control; $rounds pupils known to them"
# The pupils: uids no account of this machine has, in copies of /etc/passwd
# and /etc/group that only the lab machines' filter-control sees (mounted
# over the originals in a mount namespace of its own).
base=62000
while getent passwd "$base" >/dev/null || getent group "$base" >/dev/null; do base=$((base + 1000)); done
cp /etc/passwd "$work/passwd"
cp /etc/group "$work/group"
for r in $(seq 0 $((rounds - 1))); do
    uid=$((base + r))
    echo "bench-pupil-$r:x:$uid:$uid:pupil:/nonexistent:/usr/sbin/nologin" >>"$work/passwd"
    echo "bench-pupil-$r:x:$uid:" >>"$work/group"
done
chmod 644 "$work/passwd" "$work/group"
for i in $(seq "$labs"); do
    ns=hpa$$l$i
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
log:
  file: $folder/audit.jsonl
  journald: false
admin:
  socket: $folder/control.sock
EOF
    ip netns exec "$ns" "$bin/filterctl" enroll "$url" "$lab_token" --config "$folder/hallpass.yaml" >"$folder/enrol.log" 2>&1
    ip netns exec "$ns" unshare --mount --propagation private sh -c \
        'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@"' sh "$work/passwd" "$work/group" \
        "$bin/filter-control" --config "$folder/hallpass.yaml" --runtime-dir "$folder/run" >"$folder/filter-control.log" 2>&1 &
    pids+=($!)
done
for i in $(seq "$labs"); do
    folder=$work/lab$i
    wait_for "lab machine $i's first rules" sh -c "'$bin/filterctl' status --socket '$folder/control.sock' | grep -q 'version 1,'" \
        || { tail -30 "$folder/filter-control.log" >&2; exit 1; }
done

echo "== $machines simulated machines post $rate records a second for $fleet_duration s"
ip netns exec "$server" "$venv/bin/python" scripts/lib/fleet-sim.py --server "$url" --token "$sim_token" --machines "$machines" \
    --records-per-second "$rate" --duration "$fleet_duration" --live-wait 0 >"$out/fleet.json" 2>"$work/fleet.log" &
fleet_pid=$!
pids+=("$fleet_pid")
# The fleet enrols first; the rounds start once it posts.
wait_for "the fleet's first records" sh -c "[ \"\$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT COUNT(*) FROM records\").fetchone()[0])' '$work/server.db')\" -gt 1000 ]" \
    || { tail -20 "$work/fleet.log" >&2; exit 1; }
sleep 5

echo "== $rounds rounds: a pupil opens a dangerous site on a lab machine; the time to the email"
touch "$out/received.jsonl"
: >"$out/rounds.jsonl"
for r in $(seq 0 $((rounds - 1))); do
    i=$((r % labs + 1))
    uid=$((base + r))
    fleet=$(kill -0 "$fleet_pid" 2>/dev/null && echo true || echo false)
    start=$(date +%s.%N)
    ip netns exec "hpa$$l$i" setpriv --reuid="$uid" --regid="$uid" --clear-groups \
        curl -s -o /dev/null -m 5 --resolve "danger-$r.test:80:$address" "http://danger-$r.test/" || true
    for _ in $(seq 1200); do
        grep -q "bench-pupil-$r " "$out/received.jsonl" && break
        sleep 0.1
    done
    received=$(python3 -c 'import json,sys; print(next((json.loads(l)["time"] for l in open(sys.argv[1]) if sys.argv[2] in json.loads(l)["subject"]), ""))' \
        "$out/received.jsonl" "bench-pupil-$r ")
    if [ -z "$received" ]; then
        echo "bench-alerts.sh: round $r: no email for bench-pupil-$r within 120 s" >&2
        tail -20 "$out/server.log" >&2
        exit 1
    fi
    python3 -c 'import json,sys; print(json.dumps({"round": int(sys.argv[1]), "machine": int(sys.argv[2]), "fleetPosting": sys.argv[3] == "true", "seconds": round(float(sys.argv[5]) - float(sys.argv[4]), 3)}))' \
        "$r" "$i" "$fleet" "$start" "$received" >>"$out/rounds.jsonl"
    sleep 1
done
wait "$fleet_pid" || true

python3 - "$out" <<'EOF' | tee "$out/result.json"
import json, sys
out = sys.argv[1]
rounds = [json.loads(line) for line in open(out + "/rounds.jsonl")]
seconds = sorted(r["seconds"] for r in rounds)
def percentile(values, p):
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]
try:
    fleet = json.load(open(out + "/fleet.json"))
except Exception as error:
    fleet = {"error": str(error)}
received = [json.loads(line) for line in open(out + "/received.jsonl")]
print(json.dumps({
    "rounds": len(rounds),
    "roundsWithTheFleetPosting": sum(1 for r in rounds if r["fleetPosting"]),
    "p50Seconds": percentile(seconds, 0.50),
    "p99Seconds": percentile(seconds, 0.99),
    "maxSeconds": seconds[-1],
    "emailsReceived": len(received),
    "fleet": fleet,
}, indent=2))
EOF
echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
