#!/usr/bin/env bash
# The bypass matrix (issue 14): each way around the filter, tried with real clients and servers
# in test namespaces, on a lab machine running hallpass, by a user whose policy blocks it and by
# one whose policy allows it. Prints a table (technique, client, user, expected, result) and exits
# 1 when a row differs from what the policy says, 0 when every row matches.
#
# The machine (namespace hpbm<pid>c, 10.83.0.1) runs filter-control and filter-data on a bundle
# built from rules/ut1, rules/bypass and rules/demo with the school policy below (for the last rows,
# "UT1-only", on a bundle built from rules/ut1 alone: hallpass's own DoH and ECH lists come with it);
# the "internet" (namespace hpbm<pid>s) has:
#   10.83.0.53  dnsmasq: every name to 10.83.0.2, dns.google and dns.cert.ee to 10.83.0.4, the SafeSearch
#               enforcement hosts to 10.83.0.3, www.ech.test an HTTPS record carrying ech
#   10.83.0.2   nginx (80, 443; www.google.com too), microsocks (SOCKS5, 1080), tinyproxy (CONNECT,
#               8888; and the school's own proxy on 3128, bypass.proxy), a UDP echo (51820 for WireGuard handshakes, 4443 for QUIC of an unknown version)
#   10.83.0.3   nginx: the SafeSearch enforcement host
#   10.83.0.4   dnsdist: DNS over HTTPS (443, /dns-query) and over TLS (853); DNS over QUIC (853/udp, aioquic)
#   10.83.0.5   OpenVPN servers, UDP 1194 and TCP 1194 (a test PKI made here)
#   10.83.0.6   wireguard-go (UDP 51821), the peer of a real WireGuard tunnel
#   10.83.0.7   nginx (443), standing for a Tor relay: the bundle's tor list names this address
#   10.83.0.8   dropbear (SSH, ports 22 and 443)
#   10.83.0.9   dropbear (SSH, port 22), standing for the school's own SSH server (bypass.sshServers)
# Users (setpriv): uid 4241 is in no group (the school's top-level policy: every bypass blocked,
# SafeSearch on, noName allow), 4242 in "relaxed" (every bypass allowed, no SafeSearch), 4243 in
# "nonames" (as 4241 but noName: block). Root's flows (a kernel-owned or root socket) are system
# flows, which get the top-level policy.
#
# Run as root on Debian 12:   scripts/bypass-matrix.sh [--keep] [--capture FILE]
#   --keep          leave everything running until Enter
#   --capture FILE  write what the lab machine sends and receives (tcpdump) to FILE, e.g. for
#                   HALLPASS_BYPASS_CAPTURE=FILE swift test --filter anyCapture
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
capture=
while [ $# -gt 0 ]; do
    case "$1" in
        --keep) keep=1 ;;
        --capture) capture=${2:?--capture needs a file}; shift ;;
        *) echo "bypass-matrix: unknown option '$1' (use --keep, --capture FILE)" >&2; exit 64 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "bypass-matrix: run as root (namespaces, kernel rules)" >&2; exit 77; }

scripts/install-deps.sh --bypass-matrix
echo "== building hallpass (debug)"
for product in filterctl filter-control filter-data; do swift build --product "$product" >/dev/null; done
bin=$(swift build --show-bin-path)
filterctl="$bin/filterctl"
# Debian's Python (the test users must be able to run it) with aioquic, made by install-deps.
python=$PWD/.build/bypass-venv/bin/python
helper=$PWD/scripts/lib/bypass_matrix.py

work=$(mktemp -d /tmp/hallpass-bypass.XXXXXX)
chmod 755 "$work"
client=hpbm$$c
server=hpbm$$s
pids=()
wg_server=wgs$$
wg_client=wgc$$
cleanup() {
    set +e
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    for namespace in "$client" "$server"; do ip netns pids "$namespace" 2>/dev/null | xargs -r kill 2>/dev/null; done
    sleep 0.3
    for namespace in "$client" "$server"; do
        ip netns pids "$namespace" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns del "$namespace" 2>/dev/null
    done
    # wireguard-go's control sockets are in the host's /run, not in the namespace.
    rm -f "/var/run/wireguard/$wg_server.sock" "/var/run/wireguard/$wg_client.sock"
    rm -rf "/etc/netns/$client" "/etc/netns/$server" "$work"
}
trap cleanup EXIT
in_server() { ip netns exec "$server" "$@"; }
in_client() { ip netns exec "$client" "$@"; }
start_server() {  # start_server NAME COMMAND...: in the background, output in $work/NAME.log
    local name=$1
    shift
    in_server "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
}

echo "== network: lab machine 10.83.0.1, servers 10.83.0.2-6 and 10.83.0.53"
ip netns add "$client"
ip netns add "$server"
ip link add "b$$c" type veth peer name "b$$s"
ip link set "b$$c" netns "$client"
ip link set "b$$s" netns "$server"
ip -n "$client" link set lo up
ip -n "$server" link set lo up
ip -n "$client" addr add 10.83.0.1/24 dev "b$$c"
for host in 2 3 4 5 6 7 8 9 53; do ip -n "$server" addr add "10.83.0.$host/24" dev "b$$s"; done
ip -n "$client" link set "b$$c" up
ip -n "$server" link set "b$$s" up
for namespace in "$client" "$server"; do
    mkdir -p "/etc/netns/$namespace"
    echo "nameserver 10.83.0.53" >"/etc/netns/$namespace/resolv.conf"
done
in_server sysctl -qw net.ipv4.ip_forward=1

echo "== test PKI (a CA, a server certificate for every name used here, an OpenVPN client)"
pki=$work/pki
mkdir -p "$pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=Bypass Matrix CA" \
    -keyout "$pki/ca.key" -out "$pki/ca.pem" 2>/dev/null
issue() {  # issue NAME EXTENSIONS
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
    printf '%s\n' "$2" >"$pki/$1.ext"
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
        -extfile "$pki/$1.ext" -out "$pki/$1.pem" 2>/dev/null
}
issue server "subjectAltName=DNS:dns.google,DNS:doq.example.test,DNS:dot.example.test,DNS:www.example.test,DNS:www.google.com,DNS:forcesafesearch.google.com,DNS:cloudflare-ech.com,IP:10.83.0.2,IP:10.83.0.4
extendedKeyUsage=serverAuth"
issue vpnserver "extendedKeyUsage=serverAuth
keyUsage=digitalSignature,keyAgreement"
issue vpnclient "extendedKeyUsage=clientAuth
keyUsage=digitalSignature,keyAgreement"
chmod 644 "$pki"/*

echo "== servers"
# An HTTPS record for www.ech.test: priority 1, target ".", alpn=h2, ech=Cloudflare's published ECHConfigList.
ech_rdata=$(python3 -c '
import base64, struct
ech = base64.b64decode("AEX+DQBB8gAgACDCIaU3P6vz668J2oRRZtptSEwH+1IX8/3TOArEx0tRLAAEAAEAAQASY2xvdWRmbGFyZS1lY2guY29tAAA=")
params = struct.pack("!HH", 1, 3) + b"\x02h2" + struct.pack("!HH", 5, len(ech)) + ech
print((struct.pack("!H", 1) + b"\x00" + params).hex())')
start_server dnsmasq dnsmasq --keep-in-foreground --log-facility=- --no-resolv --no-hosts --bind-interfaces --listen-address=10.83.0.53 --user=root \
    --pid-file="$work/dnsmasq.pid" --local-ttl=30 --address=/#/10.83.0.2 --address=/dns.google/10.83.0.4 --address=/dns.cert.ee/10.83.0.4 \
    --address=/forcesafesearch.google.com/10.83.0.3 --address=/restrict.youtube.com/10.83.0.3 \
    --address=/restrictmoderate.youtube.com/10.83.0.3 --address=/strict.bing.com/10.83.0.3 --address=/safe.duckduckgo.com/10.83.0.3 \
    --dns-rr="www.ech.test,65,$ech_rdata"
cat >"$work/nginx.conf" <<NGINX
daemon off; master_process off; worker_processes 1; user root; pid $work/nginx.pid; error_log $work/nginx-error.log;
events { worker_connections 64; }
http { access_log off; client_body_temp_path $work/b; proxy_temp_path $work/p; fastcgi_temp_path $work/f;
  uwsgi_temp_path $work/u; scgi_temp_path $work/s;
  ssl_certificate $pki/server.pem; ssl_certificate_key $pki/server.key;
  server { listen 10.83.0.2:80; listen 10.83.0.2:443 ssl; location / { return 200 "web server: \$host\n"; } }
  server { listen 10.83.0.3:80; listen 10.83.0.3:443 ssl; location / { return 200 "SafeSearch enforcement host: \$host\n"; } }
  server { listen 10.83.0.7:443 ssl; location / { return 200 "a Tor relay (pretend): \$host\n"; } } }
NGINX
start_server nginx nginx -c "$work/nginx.conf" -p "$work"
cat >"$work/dnsdist.conf" <<LUA
setLocal("10.83.0.4:5300")
newServer({address="10.83.0.53:53"})
addTLSLocal("10.83.0.4:853", "$pki/server.pem", "$pki/server.key")
addDOHLocal("10.83.0.4:443", "$pki/server.pem", "$pki/server.key", "/dns-query")
LUA
start_server dnsdist dnsdist --supervised --disable-syslog -C "$work/dnsdist.conf"
start_server doq "$python" "$helper" doq-server 10.83.0.4 853 "$pki/server.pem" "$pki/server.key"
start_server udp-echo "$python" "$helper" udp-echo 10.83.0.2 51820 4443
start_server microsocks microsocks -i 10.83.0.2 -p 1080
cat >"$work/tinyproxy.conf" <<CONF
User root
Group root
Port 8888
Listen 10.83.0.2
Timeout 30
Allow 10.83.0.0/24
ConnectPort 443
LogLevel Info
CONF
start_server tinyproxy tinyproxy -d -c "$work/tinyproxy.conf"
# The school's own proxy (bypass.proxy): the same, on 3128.
sed 's/^Port 8888$/Port 3128/' "$work/tinyproxy.conf" >"$work/school-proxy.conf"
start_server school-proxy tinyproxy -d -c "$work/school-proxy.conf"
# OpenVPN: a UDP and a TCP server with tls-auth; clients run unprivileged with --dev null.
openvpn --genkey tls-auth "$pki/ta.key" 2>/dev/null || openvpn --genkey --secret "$pki/ta.key"
openssl dhparam -dsaparam -out "$pki/dh.pem" 2048 2>/dev/null
chmod 644 "$pki/ta.key"
for proto in udp tcp; do
    subnet=$([ "$proto" = udp ] && echo 10.8.0.0 || echo 10.9.0.0)
    start_server "openvpn-$proto" openvpn --proto "${proto/tcp/tcp-server}" --local 10.83.0.5 --port 1194 --dev "tun-$proto" \
        --dev-type tun --server "$subnet" 255.255.255.0 --ca "$pki/ca.pem" --cert "$pki/vpnserver.pem" --key "$pki/vpnserver.key" \
        --dh "$pki/dh.pem" --tls-auth "$pki/ta.key" 0 --verb 3
done
# SSH: dropbear with a host key made here, on 22 and 443 of an outside server and on 22 of the school's.
dropbearkey -t ed25519 -f "$work/dropbear-host-key" >/dev/null 2>&1
start_server dropbear dropbear -F -E -s -P "$work/dropbear.pid" -r "$work/dropbear-host-key" \
    -p 10.83.0.8:22 -p 10.83.0.8:443 -p 10.83.0.9:22
# WireGuard: wireguard-go in the server namespace (the kernel here has no wireguard module).
wg genkey >"$work/wg-server.key"
wg pubkey <"$work/wg-server.key" >"$work/wg-server.pub"
wg genkey >"$work/wg-client.key"
wg pubkey <"$work/wg-client.key" >"$work/wg-client.pub"
start_server wireguard-go-server env WG_PROCESS_FOREGROUND=1 wireguard-go "$wg_server"
in_client env WG_PROCESS_FOREGROUND=1 wireguard-go "$wg_client" >"$work/wireguard-go-client.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do
    in_server ip link show "$wg_server" >/dev/null 2>&1 && in_client ip link show "$wg_client" >/dev/null 2>&1 && break
    sleep 0.1
done
in_server wg set "$wg_server" listen-port 51821 private-key "$work/wg-server.key" peer "$(cat "$work/wg-client.pub")" allowed-ips 10.84.0.2/32
in_server ip addr add 10.84.0.1/24 dev "$wg_server"
in_server ip link set "$wg_server" up
in_client wg set "$wg_client" private-key "$work/wg-client.key" peer "$(cat "$work/wg-server.pub")" endpoint 10.83.0.6:51821 allowed-ips 10.84.0.0/24
in_client ip addr add 10.84.0.2/24 dev "$wg_client"
in_client ip link set "$wg_client" up

echo "== the school's policy, in a bundle"
policy_base() {
    cat <<YAML
groups:
  relaxed: { uids: ["4242"] }
  nonames: { uids: ["4243"] }
policy:
  block: [ vpn ]        # doh and ech-front go with bypass.encryptedDNS and bypass.ech
  unknown: allow
  noName: allow
YAML
}
policy_bypass_top() {
    cat <<YAML
  safeSearch: [ google, youtube-strict, bing, duckduckgo ]
  bypass: { encryptedDNS: block, ech: block, tunnels: block, unreadableQUIC: block, quic: allow, ssh: block,
            proxy: [ 10.83.0.2:3128 ], sshServers: [ 10.83.0.9:22 ] }
YAML
}
policy_groups() {
    local with_bypass=$1
    echo "  groups:"
    echo "    relaxed:"
    echo "      block: [ ]"
    [ "$with_bypass" = 1 ] && echo "      safeSearch: none" && echo "      bypass: { encryptedDNS: allow, ech: allow, tunnels: allow, unreadableQUIC: allow, ssh: allow }"
    echo "    nonames:"
    echo "      noName: block"
}
{ policy_base; policy_bypass_top; policy_groups 1; } >"$work/school-policy.yaml"
# The school's Tor relay list (docs/bypass.md): one pretend relay.
mkdir -p "$work/lists"
echo "10.83.0.7" >"$work/lists/tor.txt"
key=$("$filterctl" bundle keygen --out "$work/signing-key.pem")
policy_keys=1
if ! "$filterctl" bundle build --key "$work/signing-key.pem" --version 1 --expires 2d --policy "$work/school-policy.yaml" \
        --out "$work/bundle" rules/ut1 rules/bypass rules/demo "$work/lists/tor.txt" >"$work/bundle.log" 2>&1; then
    policy_keys=0
    echo "   (this hallpass does not read policy.safeSearch and policy.bypass yet: $(grep -o 'unknown key[^)]*)' "$work/bundle.log" | head -1);"
    echo "    the bundle carries the policy without them, and the rows that need them show the difference)"
    { policy_base; policy_groups 0; } >"$work/school-policy.yaml"
    "$filterctl" bundle build --key "$work/signing-key.pem" --version 1 --expires 2d --policy "$work/school-policy.yaml" \
        --out "$work/bundle" rules/ut1 rules/bypass rules/demo "$work/lists/tor.txt" >"$work/bundle.log" 2>&1
fi
sed 's/^/   | /' "$work/school-policy.yaml"
# The machine's own policy: the school's top level again, for a hallpass whose daemon does not
# apply the bundle's policy (groups) yet.
cat >"$work/hallpass.yaml" <<YAML
policy:
  block: [ vpn ]
  unknown: allow
  noName: allow
queue:
  number: 11
  user: nobody        # the build folder's filter-data runs as nobody (no _hallpass user here)
rules:
  directory: $work/lib
  source: file://$work/bundle/
  trustedKeys: [ "$key" ]
blockPage:
  organization: "Bypass Matrix School"
  ca: $work/ca
log:
  file: $work/audit.jsonl
  journald: false
admin:
  socket: $work/control.sock
YAML
echo "== hallpass on the lab machine"
in_client "$bin/filter-control" --config "$work/hallpass.yaml" --runtime-dir "$work/run" >"$work/filter-control.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do
    in_client awk '$1 == 11 { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue 2>/dev/null && break
    sleep 0.1
done
in_client awk '$1 == 11 { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue \
    || { echo "filter-control did not start:"; cat "$work/filter-control.log"; exit 1; }
sleep 1
if [ -n "$capture" ]; then
    in_client tcpdump -q -U -i "b$$c" -w "$capture" >"$work/tcpdump.log" 2>&1 &
    pids+=($!)
    sleep 1
fi
# Whether filter-data got the school's groups (the policy text names them) or one policy for everyone.
groups_applied=0
grep -q relaxed "$work/run/policy" 2>/dev/null && groups_applied=1

# ------------------------------------------------------------------ the rows
# Each try_* prints "allow" (the traffic got through) or "block" (it did not). $1 is the uid.
as_user() {  # as_user UID COMMAND...: in the lab machine, as that user, at most 10 s
    local uid=$1
    shift
    in_client timeout 10 setpriv --reuid="$uid" --regid="$uid" --clear-groups -- env HOME="$work" "$@"
}
outcome() { if "$@" >>"$work/clients.log" 2>&1; then echo allow; else echo block; fi; }

try_doh() { outcome as_user "$1" curl -sS -m 6 --doh-url https://dns.google/dns-query --doh-insecure -o /dev/null http://www.example.test/; }
try_dot() {
    local answer
    answer=$(as_user "$1" kdig +short +tls +tls-ca="$pki/ca.pem" +tls-hostname=dot.example.test +timeout=3 +retry=0 @10.83.0.4 -p 853 www.example.test A 2>>"$work/clients.log" || true)
    [ -n "$answer" ] && echo allow || echo block
}
try_doq() { outcome as_user "$1" "$python" "$helper" doq-client 10.83.0.4 853 www.example.test; }
try_canary() {  # NXDOMAIN is the filter's answer
    local status
    status=$(as_user "$1" dig +time=3 +tries=1 "$2" A 2>&1 | sed -n 's/.*status: \([A-Z]*\).*/\1/p' || true)
    echo "dig $2 -> $status" >>"$work/clients.log"
    [ "$status" = NXDOMAIN ] && echo block || echo allow
}
try_https_record() {
    local answer
    answer=$(as_user "$1" dig +short +time=3 +tries=1 www.ech.test HTTPS 2>&1 || true)
    echo "dig www.ech.test HTTPS -> $answer" >>"$work/clients.log"
    case "$answer" in
        *ech=*) echo allow ;;
        *alpn=*) echo block ;;
        *) echo "no-answer" ;;
    esac
}
try_ech_hello() { outcome as_user "$1" "$python" "$helper" ech-hello 10.83.0.2 443 cloudflare-ech.com; }
try_wireguard_bytes() { outcome as_user "$1" "$python" "$helper" udp-probe 10.83.0.2 51820 wireguard; }
try_wireguard_tunnel() { outcome in_client timeout 6 ping -c 2 -W 2 10.84.0.1; }
try_openvpn() {
    local proto=$1 uid=$2 log=$work/openvpn-client-$1-$2.log
    as_user "$uid" openvpn --client --dev null --proto "${proto/tcp/tcp-client}" --remote 10.83.0.5 1194 --nobind \
        --ca "$pki/ca.pem" --cert "$pki/vpnclient.pem" --key "$pki/vpnclient.key" --tls-auth "$pki/ta.key" 1 \
        --remote-cert-tls server --connect-retry-max 1 --route-noexec --ifconfig-noexec --verb 3 >"$log" 2>&1 &
    local vpn=$!
    for _ in $(seq 1 16); do
        grep -qs "Initialization Sequence Completed" "$log" && break
        sleep 0.5
    done
    kill "$vpn" 2>/dev/null
    wait "$vpn" 2>/dev/null || true
    grep -q "Initialization Sequence Completed" "$log" && echo allow || echo block
}
try_socks() { outcome as_user "$1" curl -sS -m 6 --socks5-hostname 10.83.0.2:1080 -o /dev/null http://www.example.test/; }
try_connect() { outcome as_user "$1" curl -sS -m 6 --proxytunnel -x http://10.83.0.2:8888 -k -o /dev/null https://www.example.test/; }
try_https_record_tcp() {  # over TCP the answer cannot be rewritten: the query is refused
    local answer
    answer=$(as_user "$1" dig +tcp +short +time=3 +tries=1 www.ech.test HTTPS 2>&1 || true)
    echo "dig +tcp www.ech.test HTTPS -> $answer" >>"$work/clients.log"
    case "$answer" in
        *ech=*) echo allow ;;
        *"connection reset"*|*"end of file"*) echo block ;;  # refused by the filter
        *) echo "error" ;;
    esac
}
try_canary_tcp() {  # an answer with an address is the resolver's, not the filter's
    local answer
    answer=$(as_user "$1" dig +tcp +short +time=3 +tries=1 "$2" A 2>&1 || true)
    echo "dig +tcp $2 -> $answer" >>"$work/clients.log"
    case "$answer" in
        10.83.0.*) echo allow ;;
        *"connection reset"*|*"end of file"*) echo block ;;  # refused by the filter
        *) echo "error" ;;
    esac
}
try_school_proxy() { outcome as_user "$1" curl -sS -m 6 --proxytunnel -x http://10.83.0.2:3128 -k -o /dev/null "https://$2/"; }
try_ssh() {  # the key exchange completes (a host key comes back) only when the client's first line passes
    local keys
    keys=$(as_user "$1" ssh-keyscan -T 4 -t ed25519 -p "$3" "$2" 2>>"$work/clients.log" || true)
    echo "ssh-keyscan -p $3 $2 -> $keys" >>"$work/clients.log"
    case "$keys" in *ssh-ed25519*) echo allow ;; *) echo block ;; esac
}
try_tor() { outcome as_user "$1" curl -sS -m 6 -k --resolve www.innocent.test:443:10.83.0.7 -o /dev/null https://www.innocent.test/; }
try_quic_unknown() { outcome as_user "$1" "$python" "$helper" udp-probe 10.83.0.2 4443 quic-unknown; }
try_safesearch_dns() {  # a CNAME to the enforcement host is the filter's answer
    local answer
    answer=$(as_user "$1" dig +short +time=3 +tries=1 www.google.com A 2>&1 || true)
    echo "dig www.google.com -> $answer" >>"$work/clients.log"
    case "$answer" in *forcesafesearch.google.com*|*10.83.0.3*) echo block ;; *) echo allow ;; esac
}
try_safesearch_address() { outcome as_user "$1" curl -sS -m 6 -k --resolve www.google.com:443:10.83.0.2 -o /dev/null https://www.google.com/; }
try_padded_hello() {  # a real ClientHello padded past the 16 KiB peek bound (scripts/lib/padded-hello.py); a ServerHello back = allow
    local answer
    answer=$(as_user "$1" python3 scripts/lib/padded-hello.py 10.83.0.2 443 "$2" "$3" 2>&1 || true)
    echo "padded-hello $2 $3 -> $answer" >>"$work/clients.log"
    [ "$answer" = serverhello ] && echo allow || echo block
}
try_ip_literal() { outcome as_user "$1" curl -sS -m 6 -k -o /dev/null https://10.83.0.2/; }

# technique | client | uid | expected | command
rows=(
    "DNS over HTTPS|curl --doh-url https://dns.google/dns-query|4241|block|try_doh 4241"
    "DNS over HTTPS|curl --doh-url https://dns.google/dns-query|4242|allow|try_doh 4242"
    "DNS over TLS (853)|kdig +tls (dnsdist)|4241|block|try_dot 4241"
    "DNS over TLS (853)|kdig +tls (dnsdist)|4242|allow|try_dot 4242"
    "DNS over QUIC (853/udp)|aioquic DoQ client|4241|block|try_doq 4241"
    "DNS over QUIC (853/udp)|aioquic DoQ client|4242|allow|try_doq 4242"
    "canary use-application-dns.net|dig (NXDOMAIN = block)|4241|block|try_canary 4241 use-application-dns.net"
    "canary use-application-dns.net|dig (NXDOMAIN = block)|4242|allow|try_canary 4242 use-application-dns.net"
    "Private Relay mask.icloud.com|dig (NXDOMAIN = block)|4241|block|try_canary 4241 mask.icloud.com"
    "Private Relay mask-h2.icloud.com|dig (NXDOMAIN = block)|4242|allow|try_canary 4242 mask-h2.icloud.com"
    "HTTPS record with ech|dig HTTPS (stripped = block)|4241|block|try_https_record 4241"
    "HTTPS record with ech|dig HTTPS (stripped = block)|4242|allow|try_https_record 4242"
    "HTTPS record with ech, over TCP|dig +tcp HTTPS (refused = block)|4241|block|try_https_record_tcp 4241"
    "HTTPS record with ech, over TCP|dig +tcp HTTPS (refused = block)|4242|allow|try_https_record_tcp 4242"
    "canary over TCP|dig +tcp use-application-dns.net|4241|block|try_canary_tcp 4241 use-application-dns.net"
    "canary over TCP|dig +tcp use-application-dns.net|4242|allow|try_canary_tcp 4242 use-application-dns.net"
    "ECH ClientHello, cloudflare-ech.com|python ClientHello + 0xfe0d|4241|block|try_ech_hello 4241"
    "ECH ClientHello, cloudflare-ech.com|python ClientHello + 0xfe0d|4242|allow|try_ech_hello 4242"
    "WireGuard handshake|148-byte initiation to udp/51820|4241|block|try_wireguard_bytes 4241"
    "WireGuard handshake|148-byte initiation to udp/51820|4242|allow|try_wireguard_bytes 4242"
    "WireGuard tunnel|wireguard-go (root: system flow)|0|block|try_wireguard_tunnel 0"
    "OpenVPN UDP (tls-auth)|openvpn 2.6 --dev null|4241|block|try_openvpn udp 4241"
    "OpenVPN UDP (tls-auth)|openvpn 2.6 --dev null|4242|allow|try_openvpn udp 4242"
    "OpenVPN TCP (tls-auth)|openvpn 2.6 --dev null|4241|block|try_openvpn tcp 4241"
    "OpenVPN TCP (tls-auth)|openvpn 2.6 --dev null|4242|allow|try_openvpn tcp 4242"
    "SOCKS5 (not the school proxy)|curl --socks5-hostname (microsocks)|4241|block|try_socks 4241"
    "SOCKS5 (not the school proxy)|curl --socks5-hostname (microsocks)|4242|allow|try_socks 4242"
    "HTTP CONNECT (not the school proxy)|curl --proxytunnel (tinyproxy)|4241|block|try_connect 4241"
    "HTTP CONNECT (not the school proxy)|curl --proxytunnel (tinyproxy)|4242|allow|try_connect 4242"
    "HTTP CONNECT via the school proxy|curl --proxytunnel -x :3128 www.example.test|4241|allow|try_school_proxy 4241 www.example.test"
    "... to a name of a blocked category|curl --proxytunnel -x :3128 (vpn list)|4241|block|try_school_proxy 4241 01usevpn.website"
    "SSH (ssh -D is a SOCKS proxy)|ssh-keyscan to dropbear, port 22|4241|block|try_ssh 4241 10.83.0.8 22"
    "SSH (ssh -D is a SOCKS proxy)|ssh-keyscan to dropbear, port 22|4242|allow|try_ssh 4242 10.83.0.8 22"
    "SSH on port 443|ssh-keyscan to dropbear, port 443|4241|block|try_ssh 4241 10.83.0.8 443"
    "SSH to the school's SSH server|ssh-keyscan, bypass.sshServers|4241|allow|try_ssh 4241 10.83.0.9 22"
    "Tor relay (the school's tor list)|curl to a relay's address|4241|block|try_tor 4241"
    "Tor relay (the school's tor list)|curl to a relay's address|4242|allow|try_tor 4242"
    "QUIC of an unknown version|long header 0x1a2b3c4d to udp/4443|4241|block|try_quic_unknown 4241"
    "QUIC of an unknown version|long header 0x1a2b3c4d to udp/4443|4242|allow|try_quic_unknown 4242"
    "SafeSearch: DNS for www.google.com|dig (CNAME = block)|4241|block|try_safesearch_dns 4241"
    "SafeSearch: DNS for www.google.com|dig (CNAME = block)|4242|allow|try_safesearch_dns 4242"
    "SafeSearch: hard-coded address|curl --resolve www.google.com:443:10.83.0.2|4241|block|try_safesearch_address 4241"
    "SafeSearch: hard-coded address|curl --resolve www.google.com:443:10.83.0.2|4242|allow|try_safesearch_address 4242"
    "ClientHello +20 KB, SafeSearch name|python ClientHello + 20 KB, www.google.com|4241|block|try_padded_hello 4241 www.google.com 20000"
    "ClientHello +20 KB, SafeSearch name|python ClientHello + 20 KB, www.google.com|4242|allow|try_padded_hello 4242 www.google.com 20000"
    "ClientHello +20 KB, vpn list name|python ClientHello + 20 KB, 01usevpn.website|4241|block|try_padded_hello 4241 01usevpn.website 20000"
    "ClientHello +20 KB, allowed name|python ClientHello + 20 KB extension|4241|allow|try_padded_hello 4241 www.example.test 20000"
    "ClientHello past 64 KiB (tunnels)|python ClientHello, extensions filled up|4241|block|try_padded_hello 4241 www.example.test max"
    "ClientHello past 64 KiB (tunnels)|python ClientHello, extensions filled up|4242|allow|try_padded_hello 4242 www.example.test max"
    "IP-literal HTTPS (policy.noName)|curl https://10.83.0.2/|4243|block|try_ip_literal 4243"
    "IP-literal HTTPS (policy.noName)|curl https://10.83.0.2/|4242|allow|try_ip_literal 4242"
)
# Why a row differs, when the daemon does not apply the bundle's groups (uids 4242, 4243): said
# next to the row; any other difference is a bug in hallpass (docs/bypass.md says what it enforces).
missing_piece() {  # missing_piece TECHNIQUE UID EXPECTED
    if [ "$2" != 4241 ] && [ "$2" != 0 ] && [ "$groups_applied" = 0 ]; then
        echo "(needs the bundle's groups in the daemon)"
    fi
}

# Runs the rows of the array named (technique | client | uid | expected |
# command each): one line of the table per row, the command's log in
# clients.log, and one more in $differences for each result that is not the
# one expected.
run_rows() {  # run_rows NAME_OF_ARRAY
    local -n table=$1
    local row technique client_name uid expected command result mark
    for row in "${table[@]}"; do
        IFS='|' read -r technique client_name uid expected command <<<"$row"
        echo "== $technique / $uid: $command" >>"$work/clients.log"
        result=$($command)
        mark="ok"
        if [ "$result" != "$expected" ]; then
            differences=$((differences + 1))
            mark="DIFFERS $(missing_piece "$technique" "$uid" "$expected")"
        fi
        printf '%-36s %-44s %-5s %-8s %-8s %s\n' "$technique" "$client_name" "$uid" "$expected" "$result" "$mark"
    done
}

echo
printf '%-36s %-44s %-5s %-8s %-8s %s\n' "TECHNIQUE" "CLIENT" "USER" "EXPECTED" "RESULT" ""
differences=0
run_rows rows

# A bundle of the school's UT1 lists alone (no rules/bypass), with the same policy: hallpass's own
# lists of DoH resolvers and ECH public names come with it all the same (filterctl adds them to every
# store; docs/bypass.md, "hallpass's own lists"). dns.cert.ee is in rules/bypass/doh and in no UT1 list.
echo "== version 2: a bundle of rules/ut1 alone, the same policy" | tee -a "$work/clients.log"
"$filterctl" bundle build --key "$work/signing-key.pem" --version 2 --expires 2d --policy "$work/school-policy.yaml" \
    --out "$work/bundle" rules/ut1 >"$work/bundle-ut1.log" 2>&1 || { cat "$work/bundle-ut1.log"; exit 1; }
grep -E "categories|own protections" "$work/bundle-ut1.log" | sed 's/^ */   | /'
if ! in_client "$filterctl" reload --socket "$work/control.sock" >"$work/reload-ut1.log" 2>&1; then
    differences=$((differences + 1))
    echo "   DIFFERS: the machine did not take version 2; the rows below show version 1"
fi
sed 's/^/   | /' "$work/reload-ut1.log"
try_doh_at() { outcome as_user "$1" curl -sS -m 6 --doh-url "https://$2/dns-query" --doh-insecure -o /dev/null http://www.example.test/; }
ut1_rows=(
    "UT1-only bundle: DNS over HTTPS|curl --doh-url https://dns.cert.ee/dns-query|4241|block|try_doh_at 4241 dns.cert.ee"
    "UT1-only bundle: DNS over HTTPS|curl --doh-url https://dns.cert.ee/dns-query|4242|allow|try_doh_at 4242 dns.cert.ee"
    "UT1-only: ECH, cloudflare-ech.com|python ClientHello + 0xfe0d|4241|block|try_ech_hello 4241"
    "UT1-only: ECH, cloudflare-ech.com|python ClientHello + 0xfe0d|4242|allow|try_ech_hello 4242"
)
run_rows ut1_rows
echo
echo "$differences of $((${#rows[@]} + ${#ut1_rows[@]})) rows differ from the policy."
[ "$policy_keys" = 1 ] || echo "(policy.safeSearch and policy.bypass are not read by this hallpass yet: the bundle carries the policy without them)"
[ "$groups_applied" = 1 ] || echo "(filter-data got one policy for everyone, not the bundle's groups: rows of uids 4242 and 4243 show the top-level policy)"
echo "Logs: clients $work/clients.log, servers $work/*.log, hallpass $work/filter-control.log"
if [ "$keep" = 1 ]; then
    echo "Everything keeps running: ip netns exec $client ... ; press Enter to stop."
    read -r _
fi
[ "$differences" = 0 ]
