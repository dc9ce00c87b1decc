#!/usr/bin/env bash
# The main job, the school end to end on the embedded default rules:
# builds hallpass and hallpass-server, starts the school's server on SQLite
# in a demo network namespace, sets the school's policy and lists on it and
# publishes them as a signed bundle, verifies the published copy as a lab
# machine would and shows the verdicts for a few URLs; then two lab
# machines, each in a namespace of its own with its own filter-control,
# filter-data, configuration and folders, enrol with one token and take
# their rules from the server. Two people (uids in the lab machines' own
# user database, run with setpriv) browse: allowed pages, blocked ones, the
# block page, and their records arriving at the server (GET
# /api/v1/records with an API token). Then the school changes its policy,
# publishes it, both machines take it from the server, and the change is
# in force on both, with the bytes that update cost each machine (from the
# server's log of bundle downloads). filterctl status and every line each
# filter-control logs from its start to its stop are shown (indented, "|").
# Last, the console: an admin account and a teacher of the demo's room are
# made with `hallpass-server user add`, and curl signs in as each on the
# console (https://10.82.0.2:8443/console/, which the host reaches through a
# link of its own into the demo network): the admin gets the dashboard, the
# teacher is refused the policy page (403). The teacher then focuses the
# room on one site with the room page's form: both machines take the live
# state within a second (the demo says how long each took) and refuse the
# other sites, until the teacher ends it. Last, the student asks for a
# blocked site on the block page; the teacher finds the request on the room
# page and approves it for her, and the site loads on her machine. Then the
# annual review: the admin runs the filtering test in the console, both
# machines judge the test names for each group and answer, and the review
# is written as a PDF to test-artifacts/review.pdf (the path is printed).
# Everything it starts and makes is removed at the end, also on failure.
# Run as root on Debian 12 (it installs what it needs).
#   scripts/demo.sh           runs, shows, cleans up
#   scripts/demo.sh --wait    keeps the demo running until Enter (to look with a browser,
#                             at the block page on a lab machine or at the console from this host)
# HALLPASS_BIN (from the environment): a folder with filterctl, filter-control,
# filter-data and hallpass-server to use instead of building
# (scripts/test-demo.sh gives it the build scripts/test.sh made).
set -euo pipefail
cd "$(dirname "$0")/.."
wait_for_enter=0
case "${1:-}" in
    --wait) wait_for_enter=1 ;;
    "") ;;
    *) echo "demo.sh: unknown option '$1' (use --wait, or nothing)" >&2; exit 64 ;;
esac

scripts/install-deps.sh
# The demo's own files: the server's key, certificate, database and log,
# the policy files, the published copy of the bundle, each machine's
# configuration, identity, block page CA, admin socket and audit log, where
# only root can look (mktemp makes the folder 0700).
work=$(mktemp -d /tmp/hallpass-demo.XXXXXX)
# What filter-data reads once it has dropped to its unprivileged user (a
# new rules version, a new policy): each machine's rules.directory and
# runtime folder, in a folder of their own that others may enter, as
# /var/lib/hallpass and /run/hallpass are. Nothing secret goes there
# (the machines' identity keys are 0600).
shared=$(mktemp -d /tmp/hallpass-demo-data.XXXXXX)
chmod 755 "$shared"
server=hpdemo$$s
labs=(lab1 lab2)
declare -A netns=([lab1]=hpdemo$$a [lab2]=hpdemo$$b)
declare -A address=([lab1]=10.82.0.11 [lab2]=10.82.0.12)
declare -A person=([lab1]=ada [lab2]=ben)
declare -A uid=([ada]=61101 [ben]=61201)
declare -A control_pid=()
pids=()
# The host's own end of a link into the demo network (10.82.0.1), so that a
# browser on this host reaches the console at https://10.82.0.2:8443/console/.
host_link=h$$
cleanup() {
    for pid in "${control_pid[@]}" "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
    for lab in "${labs[@]}"; do
        ip netns del "${netns[$lab]}" 2>/dev/null || true
        rm -rf "/etc/netns/${netns[$lab]}"
    done
    ip link del "$host_link" 2>/dev/null || true
    ip netns del "$server" 2>/dev/null || true
    rm -rf "$work" "$shared"
}
trap cleanup EXIT

if [ -n "${HALLPASS_BIN:-}" ]; then
    bin=$HALLPASS_BIN
else
    echo "== building hallpass and hallpass-server (debug)"
    for product in filterctl filter-control filter-data hallpass-server; do swift build --product "$product"; done
    bin=$(swift build --show-bin-path)
fi
filterctl="$bin/filterctl"
in_server() { ip netns exec "$server" "$@"; }

echo "== the demo network: the school's server 10.82.0.2 (hallpass-server, a web server and a DNS server);"
echo "   lab machines lab1 ${address[lab1]} and lab2 ${address[lab2]}, each in a namespace of its own;"
echo "   this host joins it as 10.82.0.1, to reach the console"
ip netns add "$server"
ip -n "$server" link set lo up
ip -n "$server" link add hpbr type bridge
ip -n "$server" addr add 10.82.0.2/24 dev hpbr
ip -n "$server" link set hpbr up
ip link add "$host_link" type veth peer name "r$$"
ip link set "r$$" netns "$server"
ip -n "$server" link set "r$$" master hpbr up
ip addr add 10.82.0.1/24 dev "$host_link"
ip link set "$host_link" up
for lab in "${labs[@]}"; do
    ns=${netns[$lab]}
    ip netns add "$ns"
    ip link add "d$$${lab: -1}" type veth peer name "s$$${lab: -1}"
    ip link set "d$$${lab: -1}" netns "$ns"
    ip link set "s$$${lab: -1}" netns "$server"
    ip -n "$server" link set "s$$${lab: -1}" master hpbr up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "${address[$lab]}/24" dev "d$$${lab: -1}"
    ip -n "$ns" link set "d$$${lab: -1}" up
    # The machine's own files in /etc (ip netns exec mounts them over the host's, for
    # this namespace only): the demo DNS server, and two people the host does not have:
    # ada, a student, and ben, a teacher, each in the unix group the school's policy names.
    mkdir -p "/etc/netns/$ns"
    echo "nameserver 10.82.0.2" >"/etc/netns/$ns/resolv.conf"
    { cat /etc/passwd
      echo "ada:x:${uid[ada]}:61100:Ada (student):/nonexistent:/usr/sbin/nologin"
      echo "ben:x:${uid[ben]}:61200:Ben (teacher):/nonexistent:/usr/sbin/nologin"; } >"/etc/netns/$ns/passwd"
    { cat /etc/group; echo "students:x:61100:ada"; echo "staff:x:61200:ben"; } >"/etc/netns/$ns/group"
    chmod 644 "/etc/netns/$ns/passwd" "/etc/netns/$ns/group"
done
# Every name resolves to the demo web server, which answers every name.
ip netns exec "$server" dnsmasq --no-daemon --no-resolv --no-hosts --bind-interfaces --listen-address=10.82.0.2 \
    --address=/#/10.82.0.2 --local-ttl=60 --user=root --pid-file="$work/dnsmasq.pid" 2>"$work/dnsmasq.log" &
pids+=($!)
cat >"$work/nginx.conf" <<NGINX
daemon off; master_process off; worker_processes 1; user root; pid $work/nginx.pid; error_log $work/nginx-error.log;
events { worker_connections 64; }
http { access_log off; client_body_temp_path $work/b; proxy_temp_path $work/p; fastcgi_temp_path $work/f;
  uwsgi_temp_path $work/u; scgi_temp_path $work/s;
  server { listen 10.82.0.2:80; location / { return 200 "demo web server: \$host\n"; } } }
NGINX
ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)

echo
echo "== the school's server: hallpass-server on SQLite, https://10.82.0.2:8443/"
mkdir -m 700 "$work/server"
# The school's certificate (a P-256 key): machines pin its key's SHA-256, which the token carries.
# Without tls: in server.yaml, 'hallpass-server init' makes such a pair in tls/ beside the database.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=demo-school \
    -addext subjectAltName=IP:10.82.0.2 -keyout "$work/server/key.pem" -out "$work/server/certificate.pem" 2>/dev/null
cat >"$work/server/server.yaml" <<YAML
listen:
  address: 10.82.0.2
  port: 8443
tls:
  certificate: $work/server/certificate.pem
  key: $work/server/key.pem
database: $work/server/server.db
publishing:
  signingKey: $work/server/bundle-signing.key
  copyTo: $work/published
YAML
# A hallpass-server command on the server's storage (as 'token create' and the rest act):
# its log lines go to a file, shown only when the command fails.
hpserver() {
    "$bin/hallpass-server" "$@" --config "$work/server/server.yaml" 2>"$work/server/command.log" && return 0
    local status=$?
    cat "$work/server/command.log" >&2
    return "$status"
}
hpserver init | sed 's/^/   /'
ip netns exec "$server" "$bin/hallpass-server" serve --config "$work/server/server.yaml" >"$work/server/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
    in_server curl -sS -o /dev/null -m 1 --cacert "$work/server/certificate.pem" https://10.82.0.2:8443/health 2>/dev/null && break
    sleep 0.1
done

echo "== the school's policy and lists, set on the server and published (the server signs with its own key)"
cat >"$work/policy-1.yaml" <<'YAML'
# The demo school: teachers may look at games, students may not (but the chess club may play).
groups:
  staff:    { unixGroups: [staff] }
  students: { unixGroups: [students] }
policy:
  block: [ gambling, games, dating, doh, vpn, warez, hacking, stalkerware, cryptojacking, demo ]
  allow: [ "lichess.org" ]
  unknown: allow
  groups:
    staff:
      block: [ gambling, dating, doh, vpn, warez, hacking, stalkerware, cryptojacking, demo ]
YAML
# Room rules reach the machines signed by the server's live key, which the policy names
# (docs/server.md, "The live channel"); `init` made the key.
printf 'live:\n  keys: [ "%s" ]\n' "$(hpserver live-key)" >>"$work/policy-1.yaml"
echo "\$ hallpass-server policy set --policy policy-1.yaml --list rules/ut1 --list rules/demo --reason ..."
hpserver policy set --policy "$work/policy-1.yaml" --list rules/ut1 --list rules/demo \
    --reason "the demo school's first policy" | sed 's/^/   /'
echo "\$ hallpass-server publish --reason ..."
hpserver publish --reason "rules for the labs" | sed 's/^/   /'

echo "== verifying the published bundle as a lab machine would (the copy publishing.copyTo writes)"
# The server's bundle key (what enrolment hands the machines): the public half of its signing key.
key="ed25519:$(openssl pkey -in "$work/server/bundle-signing.key" -pubout -outform DER | tail -c 32 | base64)"
echo "   the server's bundle key: $key"
"$filterctl" bundle verify "$work/published" --trusted-key "$key" | sed 's/^/   /'

echo "== verdicts under the school's policy, for a person in no group (ACTION, TARGET, REASON)"
"$filterctl" check --bundle "$work/published" --trusted-key "$key" \
    https://www.pokerstars.com/ \
    http://www.blocked.test/some/page \
    https://dns.google/dns-query \
    https://nordvpn.com/ \
    https://www.wikipedia.org/ \
    https://lichess.org/ \
    https://www.chess.com/ \
    http://www.distracting.example/ \
    https://bücher.example/

echo
echo "== two lab machines enrol with one token ('token create --uses 2'), then start hallpass"
token=$(hpserver token create --room lab --uses 2 | awk '/^hp1\./ { print; exit }')
echo "   token: ${token:0:24}... (room lab, 2 uses)"
for lab in "${labs[@]}"; do
    mkdir -m 755 "$shared/$lab" "$shared/$lab/lib" "$shared/$lab/run"
    mkdir -m 700 "$work/$lab"
    cat >"$work/$lab/hallpass.yaml" <<YAML
queue:
  number: 9
  user: nobody                # the package makes filter-data a user of its own; the build folder has none
proxy:
  user: nobody                # and hallpass-proxy one, likewise
rules:
  directory: $shared/$lab/lib
blockPage:
  organization: "Demo School"
  ca: $work/$lab/ca
  requestAccess:
    text: "Ask your teacher"
    url: builtin
log:
  file: $work/$lab/audit.jsonl
  journald: false
admin:
  socket: $work/$lab/control.sock
YAML
    echo "\$ filterctl enroll https://10.82.0.2:8443/ TOKEN   (on $lab)"
    ip netns exec "${netns[$lab]}" "$filterctl" enroll https://10.82.0.2:8443/ "$token" \
        --config "$work/$lab/hallpass.yaml" --hostname "$lab-pc01" | sed 's/^/   /'
done
for lab in "${labs[@]}"; do
    ip netns exec "${netns[$lab]}" "$bin/filter-control" --config "$work/$lab/hallpass.yaml" \
        --runtime-dir "$shared/$lab/run" 2>"$work/$lab/filter-control.log" &
    control_pid[$lab]=$!
done
# Each filter-control's log, indented: the lines it has written since the
# last call (whole lines only), so that what it says later in the demo,
# during the requests, the update and the stop, is seen too.
declare -A log_shown=([lab1]=0 [lab2]=0)
show_log() {
    local lab=$1 lines
    lines=$(wc -l <"$work/$lab/filter-control.log")
    if [ "$lines" -gt "${log_shown[$lab]}" ]; then
        echo "   filter-control on $lab:"
        sed -n "$((${log_shown[$lab]} + 1)),${lines}p" "$work/$lab/filter-control.log" | sed 's/^/   | /'
        log_shown[$lab]=$lines
    fi
}
for lab in "${labs[@]}"; do
    for _ in $(seq 1 150); do
        ip netns exec "${netns[$lab]}" awk '$1 == 9 { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue 2>/dev/null && break
        sleep 0.1
    done
    show_log "$lab"
done

# visit LAB PERSON URL: the page as the person gets it on that machine.
visit() {
    local lab=$1 who=$2 url=$3 body
    body=$(ip netns exec "${netns[$lab]}" setpriv --reuid="${uid[$who]}" --regid="${uid[$who]}" --clear-groups \
        curl -sS -m 5 "$url" 2>&1 || true)
    if [[ "$body" == "demo web server:"* ]]; then
        printf '   %-4s %-3s %-34s allowed: the web server answers\n' "$lab" "$who" "$url"
    elif [[ "$body" == *'id="blocked-host"'* ]]; then
        local category rule
        category=$(sed -n 's/.*id="blocked-category"[^>]*>\([^<]*\)<.*/\1/p' <<<"$body" | head -1)
        rule=$(sed -n 's/.*id="blocked-rule"[^>]*>\([^<]*\)<.*/\1/p' <<<"$body" | head -1)
        local detail="${category:+category $category, }${rule:+rule $rule}"
        # No list rule: a teacher's rule for the room (its reason says whose).
        [ -n "$detail" ] || detail=$(sed -n 's/.*id="blocked-reason"[^>]*>\([^<]*\) until .*/\1/p' <<<"$body" | head -1)
        printf '   %-4s %-3s %-34s blocked: the block page (%s)\n' "$lab" "$who" "$url" "${detail:-?}"
    else
        printf '   %-4s %-3s %-34s no page: %s\n' "$lab" "$who" "$url" "$(head -c 120 <<<"$body")"
    fi
}

echo
echo "== ada (a student) on lab1 and ben (a teacher) on lab2 browse"
visit lab1 ada http://www.wikipedia.org/
visit lab1 ada http://www.chess.com/
visit lab1 ada http://lichess.org/
visit lab2 ben http://www.chess.com/
visit lab2 ben http://www.pokerstars.com/
visit lab1 ada http://www.distracting.example/
visit lab2 ben http://www.distracting.example/
echo "== the block page answers the browser (curl http://www.pokerstars.com/tables as ada on lab1):"
# The page comes out on curl's standard output, into a file only root can read; the status on its standard error.
ip netns exec "${netns[lab1]}" setpriv --reuid="${uid[ada]}" --regid="${uid[ada]}" --clear-groups \
    curl -sS -m 5 -w '%{stderr}   HTTP %{http_code}\n' http://www.pokerstars.com/tables 2>&1 >"$work/page.html"
python3 - "$work/page.html" <<'PY'
import html, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
for name in ("organization", "blocked-host", "blocked-url", "blocked-category", "blocked-rule"):
    match = re.search(r'id="%s"[^>]*>(.*?)<' % name, page, re.S)
    if match:
        print("   %-17s %s" % (name, html.unescape(match.group(1)).strip()))
print("   request form:     %s" % ("yes" if 'id="request-access-form"' in page else "no"))
PY

echo "== their records at the school's server (GET /api/v1/records with an API token of role auditor)"
api_token=$(hpserver api-token create --role auditor | tail -1)
records() {
    in_server curl -sS -m 5 --cacert "$work/server/certificate.pem" -H "Authorization: Bearer $api_token" \
        "https://10.82.0.2:8443/api/v1/records?action=block&limit=100"
}
# Each machine posts its records within about a second of writing them.
for _ in $(seq 1 100); do
    [ "$(records | python3 -c 'import json,sys; print(len({r["hostname"] for r in json.load(sys.stdin)["records"]}))')" = 2 ] && break
    sleep 0.2
done
records | python3 -c '
import json, sys
rows = json.load(sys.stdin)["records"]
for r in sorted(rows, key=lambda r: (r["time"], r["machine"], r["sequence"])):
    print("   %s  %-9s %-4s %-9s %-5s %-5s %-22s %s" % (r["time"][11:19], r["hostname"], r.get("user") or "-", r.get("group") or "-",
        r.get("kind") or "-", r["action"], r.get("host") or "-", r.get("category") or r.get("reason") or "-"))
print("   records at the server: %d blocked, from %s" % (len(rows), " and ".join(sorted({r["hostname"] for r in rows})) or "no machine"))
'
echo "== filterctl status on lab1"
ip netns exec "${netns[lab1]}" "$filterctl" status --socket "$work/lab1/control.sock" | sed 's/^/   /'
for lab in "${labs[@]}"; do show_log "$lab"; done

echo
echo "== the school changes its policy: www.distracting.example is blocked for everyone"
sed 's/^  allow: \[ "lichess.org" \]$/  allow: [ "lichess.org" ]\n  deny: [ "distracting.example" ]/' "$work/policy-1.yaml" >"$work/policy-2.yaml"
echo "\$ hallpass-server policy set --policy policy-2.yaml --reason ...   (the lists are kept)"
hpserver policy set --policy "$work/policy-2.yaml" --reason "distracting.example takes the pupils' attention" | sed 's/^/   /'
echo "\$ hallpass-server policy diff 1 2"
hpserver policy diff 1 2 | sed 's/^/   /'
log_before=$(wc -l <"$work/server/server.log")
echo "\$ hallpass-server publish --reason ..."
hpserver publish --reason "block distracting.example" | sed 's/^/   /'
echo "== both machines take it from the server now ('filterctl reload'; by themselves at their next check-in, within a minute)"
for lab in "${labs[@]}"; do
    ip netns exec "${netns[$lab]}" "$filterctl" reload --socket "$work/$lab/control.sock" | sed "s/^/   $lab: /"
done
echo "== what the update cost each machine (the server's log of GET /bundle/...)"
tail -n +"$((log_before + 1))" "$work/server/server.log" | python3 -c '
import re, sys
labs = {"10.82.0.11": "lab1", "10.82.0.12": "lab2"}
got = {lab: [] for lab in labs.values()}
for line in sys.stdin:
    # BundleRoutes logs each GET: "bundle GET NAME STATUS BYTES bytes to PEER".
    match = re.search(r"bundle GET (\S+) (\d+) (\d+) bytes to (\S+)", line)
    if match and match.group(4) in labs:
        name, status, size = match.group(1), match.group(2), int(match.group(3))
        got[labs[match.group(4)]].append((name, size if status == "200" else 0, status))
for lab, files in sorted(got.items()):
    shown = ", ".join("%s %d" % (name, size) if status == "200" else "%s (%s)" % (name, status) for name, size, status in files)
    print("   %s: %d bytes: %s" % (lab, sum(size for _, size, _ in files), shown or "nothing"))
'
echo "   (for scale: the store, rules.hpstore, is $(stat -c %s "$work/published/rules.hpstore") bytes)"
echo "== the change is in force on both machines"
visit lab1 ada http://www.distracting.example/
visit lab2 ben http://www.distracting.example/
visit lab1 ada http://www.wikipedia.org/
visit lab2 ben http://www.chess.com/
echo "== filterctl status on lab2"
ip netns exec "${netns[lab2]}" "$filterctl" status --socket "$work/lab2/control.sock" | sed 's/^/   /'
for lab in "${labs[@]}"; do show_log "$lab"; done

echo
console=https://10.82.0.2:8443/console/
echo "== the console: $console (served by hallpass-server on the API's listener; this host reaches it)"
# Two people of the school: the IT admin, and ben, who teaches in the demo's
# room (the room the machines enrolled in). Passwords made for this run.
admin_password=$(openssl rand -hex 8)
teacher_password=$(openssl rand -hex 8)
echo "\$ hallpass-server user add admin --role admin --password-stdin"
echo "$admin_password" | hpserver user add admin --role admin --name "Demo admin" --password-stdin | sed 's/^/   /'
echo "\$ hallpass-server user add ben --role teacher --room lab --password-stdin"
echo "$teacher_password" | hpserver user add ben --role teacher --room lab --name "Ben (teacher)" --password-stdin | sed 's/^/   /'
echo "   sign in as admin with the password $admin_password (ben: $teacher_password)"
# console_get LOGIN PASSWORD PATH: signs in as curl would post the sign-in
# form (its session cookie kept in a jar of its own), then asks for PATH;
# prints "SIGN_IN_STATUS LOCATION" and "STATUS" of PATH on two lines and
# leaves the page in $work/console-page.html.
console_get() {
    local jar="$work/console-$1.cookies"
    curl -sS -m 10 --cacert "$work/server/certificate.pem" -c "$jar" -o /dev/null -w '%{http_code} %{redirect_url}\n' \
        --data-urlencode "login=$1" --data-urlencode "password=$2" --data-urlencode "next=/console/" "${console}sign-in"
    curl -sS -m 10 --cacert "$work/server/certificate.pem" -b "$jar" -o "$work/console-page.html" -w '%{http_code}\n' \
        "https://10.82.0.2:8443$3"
}
echo "== curl signs in as admin and asks for the dashboard"
console_get admin "$admin_password" /console/ | python3 -c '
import html, re, sys
signed_in, status = sys.stdin.read().split("\n")[:2]
page = open(sys.argv[1], encoding="utf-8").read()
def rows(table):
    """The (label, count) rows of the dashboard table with this id."""
    match = re.search(r"<table id=\"%s\">(.*?)</table>" % table, page, re.S)
    cells = re.findall(r"<th scope=\"row\"[^>]*>(.*?)</th><td class=\"number\">(\d+)</td>", match.group(1) if match else "", re.S)
    return [(html.unescape(re.sub(r"<[^>]+>", "", label)), int(count)) for label, count in cells]
states = rows("machine-states")
machines = ", ".join("%d %s" % (count, label.lower()) for label, count in states if count)
blocks = ", ".join("%s %d" % pair for pair in rows("blocks-by-category"))
print("   sign-in: %s; GET /console/: HTTP %s, the dashboard: %d machines (%s); blocks in the last hour: %s"
      % (signed_in, status, sum(count for _, count in states), machines or "none", blocks or "none"))
' "$work/console-page.html"
echo "== curl signs in as ben (teacher of room lab) and asks for the policy page"
console_get ben "$teacher_password" /console/policy | python3 -c '
import sys
signed_in, status = sys.stdin.read().split("\n")[:2]
page = open(sys.argv[1], encoding="utf-8").read()
said = "a page that says the role does not allow it" if "Your role does not allow this page" in page else "another page"
print("   sign-in: %s; GET /console/policy: HTTP %s, %s" % (signed_in, status, said))
' "$work/console-page.html"
# console_post USER PATH FIELD=VALUE...: posts a console form as the browser
# does (the session from console_get, the page's CSRF token, the Origin header);
# prints the status and where it leads.
console_post() {
    local jar="$work/console-$1.cookies" path=$2 csrf
    shift 2
    csrf=$(curl -sS -m 10 --cacert "$work/server/certificate.pem" -b "$jar" "https://10.82.0.2:8443/console/rooms/lab" |
        sed -n 's/.*name="csrf" value="\([^"]*\)".*/\1/p' | head -1)
    local fields=(--data-urlencode "csrf=$csrf")
    local field
    for field in "$@"; do fields+=(--data-urlencode "$field"); done
    curl -sS -m 10 --cacert "$work/server/certificate.pem" -b "$jar" -H "Origin: https://10.82.0.2:8443" -o /dev/null \
        -w '%{http_code} %{redirect_url}\n' "${fields[@]}" "https://10.82.0.2:8443$path"
}
echo "== ben (teacher of room lab) focuses the room on www.wikipedia.org in the console, for 30 minutes"
posted=$(date +%s%N)
echo "   POST /console/rooms/lab/rules: $(console_post ben /console/rooms/lab/rules action=focus targets=www.wikipedia.org duration=30 \
    'reason=research lesson: Wikipedia only')"
# The server signs the room's new live state with its live key; each machine holds a request open for it.
# in_force LAB WHO URL allowed|blocked: waits until the visit gives that (10 s at most) and says how long it took.
in_force() {
    local start now
    start=$(date +%s%N)
    for _ in $(seq 200); do
        if [[ "$(visit "$1" "$2" "$3")" == *" $4: "* ]]; then
            now=$(date +%s%N)
            printf '   in force on %s within %d ms of the form\n' "$1" $(( (now - posted) / 1000000 ))
            return 0
        fi
        sleep 0.05
    done
    printf '   not in force on %s after 10 s\n' "$1"
}
in_force lab1 ada http://lichess.org/ blocked
in_force lab2 ben http://www.chess.com/ blocked
visit lab1 ada http://www.wikipedia.org/
visit lab1 ada http://lichess.org/
visit lab2 ben http://www.chess.com/
echo "   the block page's reason on lab1 (who set the focus and until when):"
ip netns exec "${netns[lab1]}" setpriv --reuid="${uid[ada]}" --regid="${uid[ada]}" --clear-groups curl -sS -m 5 http://lichess.org/ |
    python3 -c 'import html, re, sys; match = re.search(r"id=\"blocked-reason\"[^>]*>(.*?)</dd>", sys.stdin.read(), re.S); print("   | " + (html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", match.group(1)))).strip() if match else "(no reason on the page)"))'
echo "== ben ends the room's rules in the console: everything as before, at once"
posted=$(date +%s%N)
echo "   POST /console/rooms/lab/end: $(console_post ben /console/rooms/lab/end rule=)"
in_force lab1 ada http://lichess.org/ allowed
in_force lab2 ben http://www.chess.com/ allowed
visit lab1 ada http://lichess.org/
visit lab2 ben http://www.chess.com/
for lab in "${labs[@]}"; do show_log "$lab"; done
echo "== ada asks for www.chess.com on lab1's block page, with a reason; ben approves it for her in the console"
# The form as the browser posts it: the page's token (for ada, this name, this hour) and a reason.
form_token=$(ip netns exec "${netns[lab1]}" setpriv --reuid="${uid[ada]}" --regid="${uid[ada]}" --clear-groups \
    curl -sS -m 5 http://www.chess.com/ | sed -n 's/.*name="token" value="\([^"]*\)".*/\1/p' | head -1)
asked=$(ip netns exec "${netns[lab1]}" setpriv --reuid="${uid[ada]}" --regid="${uid[ada]}" --clear-groups \
    curl -sS -m 5 -o /dev/null -w '%{http_code}' --data-urlencode host=www.chess.com --data-urlencode url=http://www.chess.com/ \
    --data-urlencode category=games --data-urlencode 'reason=chess club homework' --data-urlencode "token=$form_token" \
    http://www.chess.com/request-access)
echo "   POST http://www.chess.com/request-access as ada: HTTP $asked"
# filter-control sends it to the server; ben's room page lists it (the page asks /console/requests/live every 2 s).
request_id=""
for _ in $(seq 100); do
    request_id=$(curl -sS -m 5 --cacert "$work/server/certificate.pem" -b "$work/console-ben.cookies" \
        "https://10.82.0.2:8443/console/requests/live?room=lab" | python3 -c '
import json, sys
for item in json.load(sys.stdin).get("requests", []):
    if item.get("host") == "www.chess.com":
        print(item["id"]); break' 2>/dev/null || true)
    [ -n "$request_id" ] && break
    sleep 0.1
done
echo "   on ben's room page: ${request_id:-nothing}"
posted=$(date +%s%N)
echo "   POST /console/requests/$request_id/approve (this student, 30 minutes): $(console_post ben "/console/requests/$request_id/approve" \
    scope=user minutes=30 back=/console/rooms/lab 'message=for the chess club')"
in_force lab1 ada http://www.chess.com/ allowed
visit lab1 ada http://www.chess.com/
for lab in "${labs[@]}"; do show_log "$lab"; done
echo "== the annual review: the admin runs the filtering test in the console; each machine judges the test names for each group"
posted=$(console_post admin /console/filtering-tests)
echo "   POST /console/filtering-tests: $posted"
run=$(sed -n 's|.*/console/filtering-tests/\(ft-[a-z2-7]*\).*|\1|p' <<<"$posted")
# Both machines get the run with their live state and answer within seconds (the auditor's token reads the results).
filtering_test() {
    in_server curl -sS -m 5 --cacert "$work/server/certificate.pem" -H "Authorization: Bearer $api_token" \
        "https://10.82.0.2:8443/api/v1/filtering-tests/$run"
}
for _ in $(seq 100); do
    [ -n "$run" ] && [ "$(filtering_test | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["answers"]))' 2>/dev/null)" = 2 ] && break
    sleep 0.1
done
filtering_test | python3 -c '
import json, sys
body = json.load(sys.stdin)
results = body["results"]
print("   run %d on bundle %d: %d machine(s) answered, %d check(s) (%d names for groups %s)"
      % (body["run"]["number"], body["run"]["bundleVersion"], len(body["answers"]), len(results), len(body["run"]["names"]),
         ", ".join(body["run"]["groups"])))
for group in body["run"]["groups"]:
    blocked = sorted({r["name"] for r in results if r["group"] == group and r["actual"] == "block"})
    print("   %-10s blocked %d of the test names on every machine; the policy blocks %s" % (group, len(blocked), ", ".join(body["run"]["blocked"][group]) or "none"))
failed = [r for r in results if r["failed"]]
print("   checks that let through a name the policy blocks: %d" % len(failed))
for r in failed:
    print("   LET THROUGH: %s on %s for %s (bundle %d)" % (r["name"], r["machine"], r["group"], r["bundleVersion"]))
'
for lab in "${labs[@]}"; do show_log "$lab"; done
echo "== the annual review as a PDF (GET /console/review.pdf as the admin), for the review's minutes"
mkdir -p test-artifacts
curl -sS -m 10 --cacert "$work/server/certificate.pem" -b "$work/console-admin.cookies" -o test-artifacts/review.pdf \
    -w '   GET /console/review.pdf: HTTP %{http_code}, %{size_download} bytes\n' "https://10.82.0.2:8443/console/review.pdf"
echo "   written to $(pwd)/test-artifacts/review.pdf"
echo "== the admin's safeguarding digest of this week so far, as its PDF (GET /console/digests/preview.pdf)"
mkdir -p test-artifacts
digest_status=$(curl -sS -m 20 --cacert "$work/server/certificate.pem" -b "$work/console-admin.cookies" -o test-artifacts/digest.pdf \
    -w '%{http_code}' "https://10.82.0.2:8443/console/digests/preview.pdf?kind=weekly")
echo "   HTTP $digest_status: $(stat -c %s test-artifacts/digest.pdf) bytes in $(pwd)/test-artifacts/digest.pdf"
echo
if [ "$wait_for_enter" = 1 ]; then
    echo "The demo keeps running. The console, from a browser on this host: $console"
    echo "   (the demo's own self-signed certificate: the browser warns once), as admin, password $admin_password,"
    echo "   or as ben (a teacher of room lab), password $teacher_password."
    echo "Look at the block page in a browser on a demo lab machine:"
    echo "   ip netns exec ${netns[lab1]} setpriv --reuid=${uid[ada]} --regid=${uid[ada]} --clear-groups chromium --no-sandbox http://www.pokerstars.com/"
    echo "or ask for it directly: ip netns exec ${netns[lab1]} curl 'http://127.0.0.1/?url=http://www.pokerstars.com/'"
    echo "The server's records: ip netns exec $server curl --cacert $work/server/certificate.pem -H 'Authorization: Bearer $api_token' https://10.82.0.2:8443/api/v1/records"
    read -r -p "Press Enter to stop the demo. " _
else
    echo "To look at the block page in a browser, run 'scripts/demo.sh --wait'."
fi
echo "== stopping the demo: each filter-control removes its kernel rules; the server stops; the namespaces go"
failed=0
for lab in "${labs[@]}"; do
    kill "${control_pid[$lab]}" 2>/dev/null || true  # a filter-control that is gone already: its status says how it ended
    control_status=0
    wait "${control_pid[$lab]}" || control_status=$?
    unset "control_pid[$lab]"
    show_log "$lab"
    if [ "$control_status" != 0 ]; then
        echo "demo.sh: filter-control on $lab exited with status $control_status when stopped" >&2
        failed=1
    fi
done
exit "$failed"
