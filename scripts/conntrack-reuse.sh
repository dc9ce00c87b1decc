#!/usr/bin/env bash
# Shows how a stale connection-tracking entry hands an old connection's
# redirect decision to a new connection from the same local port, and how
# the zone of hallpass's raw-table chain keeps the proxy's entries from the
# people's (docs/inspection.md, "How a connection reaches the proxy", step
# 2). Root; two network namespaces of its own joined by a veth pair, removed
# at the end; needs python3 and conntrack (Debian's conntrack package).
#
#   scripts/conntrack-reuse.sh
#
# Namespace A redirects TCP 443 to 10.99.0.2 (nat OUTPUT REDIRECT, the allow
# mark 0x100000 exempt) onto a listener on 127.0.0.1:1023 (the "proxy"); B
# listens on 10.99.0.2:443 and 10.99.0.3:443 (the "server", which answers
# with the port it saw; .3 is not redirected). Without and then with
# hallpass's rule (`-m mark --mark allow -j CT --zone-orig 18512` in the raw
# table's OUTPUT), `conntrack -I` plants ESTABLISHED entries as the proxy's
# own connections leave them when the kernel misses their end (no redirect;
# in the zone when the rule is there), and a person's connections follow:
#   - from port 40001 to 10.99.0.2: without the zone it takes the planted
#     entry's decision and reaches the server around the redirect; with the
#     zone it reaches the proxy;
#   - with the zone, from port 40002 to 10.99.0.3, whose answers would have
#     the key of the proxy's planted entry: the kernel's NAT gives it another
#     local port and it connects.
# Exits 1 when a connection does not go as said, 69 when a tool is missing,
# 70 when the kernel refuses the zone or the planted entries.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "conntrack-reuse.sh: run as root (network namespaces, iptables)" >&2; exit 77; }
for tool in conntrack python3 iptables; do
    command -v "$tool" >/dev/null || { echo "conntrack-reuse.sh: needs $tool (conntrack: apt-get install conntrack)" >&2; exit 69; }
done
a=hpctA$$
b=hpctB$$
pids=()
stop_listeners() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    pids=()
}
cleanup() {
    stop_listeners
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
}
trap cleanup EXIT

listener() {  # NAMESPACE ADDRESS PORT NAME
    ip netns exec "$1" python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('$2', $3)); s.listen(16)
while True:
    c, peer = s.accept(); c.sendall(b'$4 %d' % peer[1]); c.close()" &
    pids+=($!)
    local _
    for _ in $(seq 1 50); do
        ip netns exec "$1" ss -ltn | grep -q " $2:$3 " && return 0
        sleep 0.1
    done
    echo "conntrack-reuse.sh: the listener on $2:$3 did not start" >&2
    exit 1
}
connect() {  # LOCAL_PORT ADDRESS: who answered, and the local port it saw
    ip netns exec "$a" python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('10.99.0.1', $1)); s.settimeout(3)
try:
    s.connect(('$2', 443)); print(s.recv(32).decode())
except OSError as error:
    print('nobody', error)"
}
plant() {  # LOCAL_PORT ADDRESS [conntrack options]
    local port=$1 address=$2 said
    shift 2
    said=$(ip netns exec "$a" conntrack -I -p tcp -s 10.99.0.1 -d "$address" --sport "$port" --dport 443 --state ESTABLISHED \
        -t 300 -u ASSURED "$@" 2>&1) || { echo "conntrack-reuse.sh: conntrack -I refused the planted entry: $said" >&2; exit 70; }
}

status=0
expect() {  # WHAT GOT WANTED
    echo "$1: $2"
    case "$2" in "$3"*) ;; *) echo "  (expected: $3)"; status=1 ;; esac
}
for zone in 0 1; do
    cleanup
    ip netns add "$a"
    ip netns add "$b"
    ip link add "hpcta$$" netns "$a" type veth peer name "hpctb$$" netns "$b"
    ip -n "$a" addr add 10.99.0.1/24 dev "hpcta$$"
    ip -n "$b" addr add 10.99.0.2/24 dev "hpctb$$"
    ip -n "$b" addr add 10.99.0.3/24 dev "hpctb$$"
    for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
    ip -n "$a" link set "hpcta$$" up
    ip -n "$b" link set "hpctb$$" up
    listener "$b" 10.99.0.2 443 server
    listener "$b" 10.99.0.3 443 server
    listener "$a" 127.0.0.1 1023 proxy
    ip netns exec "$a" iptables -w -t nat -A OUTPUT -m mark --mark 0x100000/0x300000 -j RETURN
    ip netns exec "$a" iptables -w -t nat -A OUTPUT -p tcp --dport 443 -d 10.99.0.2 -j REDIRECT --to-ports 1023
    zoned=()
    if [ "$zone" = 1 ]; then
        ip netns exec "$a" iptables -w -t raw -A OUTPUT -m mark --mark 0x100000/0x300000 -j CT --zone-orig 18512 ||
            { echo "conntrack-reuse.sh: this kernel refuses CT --zone-orig" >&2; exit 70; }
        zoned=(--orig-zone 18512)
    fi
    label=$([ "$zone" = 1 ] && echo "with the zone" || echo "without the zone")
    expect "$label, a person's connection from a fresh port" "$(connect 40000 10.99.0.2)" "proxy"
    plant 40001 10.99.0.2 "${zoned[@]}"
    expect "$label, from the port of the proxy's stale entry" "$(connect 40001 10.99.0.2)" "$([ "$zone" = 1 ] && echo proxy || echo server)"
    if [ "$zone" = 1 ]; then
        plant 40002 10.99.0.3 "${zoned[@]}"
        answer=$(connect 40002 10.99.0.3)
        expect "$label, to an address not redirected, from the port of the proxy's entry there" "$answer" "server"
        [ "$answer" != "server 40002" ] || { echo "  (the server saw port 40002: the entry was not in the zone)"; status=1; }
    fi
    stop_listeners
done
exit "$status"
