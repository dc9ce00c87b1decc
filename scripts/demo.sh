#!/usr/bin/env bash
# The main job on the embedded default rules: build hallpass, compile rules/
# into a store, publish it as a signed bundle with a fresh key, verify the
# bundle as a lab machine would, show the verdicts for a few URLs under a
# demo policy, then run the whole system on that bundle in a demo network
# namespace (a "lab machine" with a demo web server and DNS server next
# to it): an allowed and a blocked request, the block page, status, and
# every line filter-control logs from its start to its stop (indented, "|").
# Everything it starts and makes is removed at the end, also on failure.
# Run as root on Debian 12 (it installs what it needs).
#   scripts/demo.sh           runs, shows, cleans up
#   scripts/demo.sh --wait    keeps the demo running until Enter (to look with a browser)
# HALLPASS_BIN (from the environment): a folder with filterctl, filter-control
# and filter-data to use instead of building (scripts/test-demo.sh gives it
# the build scripts/test.sh made).
set -euo pipefail
cd "$(dirname "$0")/.."
wait_for_enter=0
case "${1:-}" in
    --wait) wait_for_enter=1 ;;
    "") ;;
    *) echo "demo.sh: unknown option '$1' (use --wait, or nothing)" >&2; exit 64 ;;
esac

scripts/install-deps.sh
# The demo's own files: the signing key, the bundle, the servers' files,
# the block page's CA, the admin socket and the audit log, where only root
# can look (mktemp makes the folder 0700).
work=$(mktemp -d /tmp/hallpass-demo.XXXXXX)
# What filter-data reads once it has dropped to its unprivileged user (a
# new rules version, a new policy): rules.directory and filter-control's
# runtime folder, in a folder of their own that others may enter, as
# /var/lib/hallpass and /run/hallpass are. Nothing secret goes there.
shared=$(mktemp -d /tmp/hallpass-demo-data.XXXXXX)
chmod 755 "$shared"
mkdir -m 755 "$shared/lib" "$shared/run"
client=hpdemo$$c
server=hpdemo$$s
pids=()
control_pid=""
cleanup() {
    for pid in $control_pid "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
    ip netns del "$client" 2>/dev/null || true
    ip netns del "$server" 2>/dev/null || true
    rm -rf "/etc/netns/$client" "$work" "$shared"
}
trap cleanup EXIT

if [ -n "${HALLPASS_BIN:-}" ]; then
    bin=$HALLPASS_BIN
else
    echo "== building hallpass (debug)"
    swift build --product filterctl
    swift build --product filter-control
    swift build --product filter-data
    bin=$(swift build --show-bin-path)
fi
filterctl="$bin/filterctl"

echo "== compiling rules/ into a store"
"$filterctl" compile --out "$work/rules.hpstore" --quiet rules/ut1 rules/bypass rules/demo

echo "== publishing a signed bundle (a school's server does this)"
key=$("$filterctl" bundle keygen --out "$work/signing-key.pem")
echo "public key for rules.trustedKeys: $key"
"$filterctl" bundle build --key "$work/signing-key.pem" --version 1 --expires 30d --out "$work/bundle" rules/ut1 rules/bypass rules/demo 2>/dev/null

echo "== verifying the bundle as a lab machine would"
"$filterctl" bundle verify "$work/bundle" --trusted-key "$key"

cat > "$work/hallpass.yaml" <<YAML
policy:
  block: [ gambling, games, dating, doh, vpn, warez, hacking, stalkerware, cryptojacking, demo ]
  allow: [ "lichess.org" ]      # the chess club may play, though 'games' is blocked
  deny: [ "distracting.example" ]
  unknown: allow
YAML

echo "== verdicts under the demo policy (ACTION, TARGET, REASON)"
"$filterctl" check --bundle "$work/bundle" --trusted-key "$key" --config "$work/hallpass.yaml" \
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
echo "== the whole system on this bundle, in a demo namespace (lab machine 10.82.0.1, web and DNS server 10.82.0.2)"
ip netns add "$client"
ip netns add "$server"
ip link add "d$$c" type veth peer name "d$$s"
ip link set "d$$c" netns "$client"
ip link set "d$$s" netns "$server"
ip -n "$client" link set lo up
ip -n "$server" link set lo up
ip -n "$client" addr add 10.82.0.1/24 dev "d$$c"
ip -n "$server" addr add 10.82.0.2/24 dev "d$$s"
ip -n "$client" link set "d$$c" up
ip -n "$server" link set "d$$s" up
# The lab machine asks the demo DNS server, which sends every name to the demo web server.
mkdir -p "/etc/netns/$client"
echo "nameserver 10.82.0.2" >"/etc/netns/$client/resolv.conf"
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

cat >>"$work/hallpass.yaml" <<YAML
queue:
  number: 9
  user: nobody                # the package makes filter-data a user of its own; the build folder has none
rules:
  directory: $shared/lib
  source: file://$work/bundle/
  trustedKeys: [ "$key" ]
blockPage:
  organization: "Demo School"
  ca: $work/ca
  requestAccess:
    text: "Ask your teacher"
    url: builtin
log:
  file: $work/audit.jsonl
  journald: false
admin:
  socket: $work/control.sock
YAML
ip netns exec "$client" "$bin/filter-control" --config "$work/hallpass.yaml" --runtime-dir "$shared/run" 2>"$work/filter-control.log" &
control_pid=$!
# filter-control's log, indented: the lines it has written since the last
# call (whole lines only), so that what it says later in the demo, during
# the requests, the status and the stop, is seen too.
log_shown=0
show_log() {
    local lines
    lines=$(wc -l <"$work/filter-control.log")
    if [ "$lines" -gt "$log_shown" ]; then
        sed -n "$((log_shown + 1)),${lines}p" "$work/filter-control.log" | sed 's/^/   | /'
        log_shown=$lines
    fi
}
for _ in $(seq 1 100); do
    ip netns exec "$client" awk '$1 == 9 { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue 2>/dev/null && break
    sleep 0.1
done
show_log

echo "== an allowed site (curl http://www.wikipedia.org/ on the lab machine)"
ip netns exec "$client" curl -sS -m 5 http://www.wikipedia.org/ | sed 's/^/   /'
echo "== a blocked site: its name resolves to the block page (dig www.pokerstars.com)"
ip netns exec "$client" dig +short +time=2 +tries=1 www.pokerstars.com A | sed 's/^/   /'
echo "== ... which answers the browser (curl http://www.pokerstars.com/tables):"
ip netns exec "$client" curl -sS -m 5 -o "$work/page.html" -w '   HTTP %{http_code}\n' http://www.pokerstars.com/tables
python3 - "$work/page.html" <<'PY'
import html, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
for name in ("organization", "blocked-host", "blocked-url", "blocked-category", "blocked-rule"):
    match = re.search(r'id="%s"[^>]*>(.*?)<' % name, page, re.S)
    if match:
        print("   %-17s %s" % (name, html.unescape(match.group(1)).strip()))
print("   request form:     %s" % ("yes" if 'id="request-access-form"' in page else "no"))
PY
echo "== filterctl status"
"$filterctl" status --socket "$work/control.sock" | sed 's/^/   /'
show_log
echo
if [ "$wait_for_enter" = 1 ]; then
    echo "The demo keeps running. Look at the block page in a browser on the demo lab machine:"
    echo "   ip netns exec $client chromium --no-sandbox http://www.pokerstars.com/"
    echo "or ask for it directly: ip netns exec $client curl 'http://127.0.0.1/?url=http://www.pokerstars.com/'"
    echo "(HTTPS too after 'filterctl ca init --config $work/hallpass.yaml' and trusting its certificate: docs/block-page.md)."
    read -r -p "Press Enter to stop the demo. " _
else
    echo "To look at the block page in a browser, run 'scripts/demo.sh --wait'."
fi
echo "== stopping the demo: filter-control removes its kernel rules; the namespaces go"
kill "$control_pid" 2>/dev/null || true  # a filter-control that is gone already: its status says how it ended
control_status=0
wait "$control_pid" || control_status=$?
control_pid=""
show_log
if [ "$control_status" != 0 ]; then
    echo "demo.sh: filter-control exited with status $control_status when stopped" >&2
    exit 1
fi
