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
labs=${LABS:-3}
rounds=${ROUNDS:-30}
machines=${MACHINES:-300}
rate=${RATE:-5000}
fleet_duration=${FLEET_DURATION:-150}
lab_name=bench-alerts
lab_tag=hpa
lab_net=93
# shellcheck source=lib/lab-network.sh
. scripts/lib/lab-network.sh
out=$PWD/bench-out/alerts
rm -rf "$out" && mkdir -p "$out"

echo "== the network: the server namespace (10.$lab_net.0.1: hallpass-server, nginx, the SMTP server) and $labs lab machines"
lab_setup
lab_nginx

echo "== the SMTP server and msmtp"
ip netns exec "$server" /usr/bin/python3 scripts/lib/smtp-sink.py --port 2525 --out "$out/received.jsonl" >"$work/smtp.log" 2>&1 &
pids+=($!)
lab_wait_for "the SMTP server" grep -q "smtp ready" "$work/smtp.log"
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
lab_server_config <<EOF
console:
  url: https://hallpass.school.example:8443
alerts:
  from: "bench-alerts <hallpass@school.example>"
  sendmail: [/usr/bin/msmtp, -C, $work/msmtprc, -t]
  email: [danger]
EOF
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
lab_server_start "$out/server.log"

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
lab_machines "$lab_token" unshare --mount --propagation private sh -c \
    'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@"' sh "$work/passwd" "$work/group" </dev/null

echo "== $machines simulated machines post $rate records a second for $fleet_duration s"
ip netns exec "$server" "$venv/bin/python" scripts/lib/fleet-sim.py --server "$url" --token "$sim_token" --machines "$machines" \
    --records-per-second "$rate" --duration "$fleet_duration" --live-wait 0 >"$out/fleet.json" 2>"$work/fleet.log" &
fleet_pid=$!
pids+=("$fleet_pid")
# The fleet enrols first; the rounds start once it posts.
lab_wait_for "the fleet's first records" sh -c "[ \"\$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT COUNT(*) FROM records\").fetchone()[0])' '$work/server.db')\" -gt 1000 ]" \
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
    ip netns exec "$(lab_namespace "$i")" setpriv --reuid="$uid" --regid="$uid" --clear-groups \
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
