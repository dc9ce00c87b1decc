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
# listens on 10.99.0.2:443 (the "server"). Each listener answers with its
# name. Without and then with hallpass's rule (`-m mark --mark allow -j CT
# --zone-orig 18512` in the raw table's OUTPUT), `conntrack -I` plants an
# ESTABLISHED entry for local port 40001 as the proxy's own connection
# leaves it when the kernel misses its end (no redirect; in the zone when
# the rule is there), and a person's connection from that port follows.
# Exits 1 when, with the rule, that connection does not reach the proxy.
set -euo pipefail
command -v conntrack >/dev/null || { echo "conntrack-reuse.sh: needs conntrack (apt-get install conntrack)" >&2; exit 69; }
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

listener() {  # NAMESPACE ADDRESS PORT ANSWER
    ip netns exec "$1" python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('$2', $3)); s.listen(16)
while True:
    c, _ = s.accept(); c.sendall(b'$4'); c.close()" &
    pids+=($!)
}
connect() {  # LOCAL_PORT: who answered
    ip netns exec "$a" python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('10.99.0.1', $1)); s.settimeout(3)
s.connect(('10.99.0.2', 443)); print(s.recv(16).decode())"
}

status=0
for zone in 0 1; do
    cleanup
    ip netns add "$a"
    ip netns add "$b"
    ip link add "hpcta$$" netns "$a" type veth peer name "hpctb$$" netns "$b"
    ip -n "$a" addr add 10.99.0.1/24 dev "hpcta$$"
    ip -n "$b" addr add 10.99.0.2/24 dev "hpctb$$"
    for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
    ip -n "$a" link set "hpcta$$" up
    ip -n "$b" link set "hpctb$$" up
    listener "$b" 10.99.0.2 443 server
    listener "$a" 127.0.0.1 1023 proxy
    sleep 0.5
    ip netns exec "$a" iptables -w -t nat -A OUTPUT -m mark --mark 0x100000/0x300000 -j RETURN
    ip netns exec "$a" iptables -w -t nat -A OUTPUT -p tcp --dport 443 -d 10.99.0.2 -j REDIRECT --to-ports 1023
    planted=(-I -p tcp -s 10.99.0.1 -d 10.99.0.2 --sport 40001 --dport 443 --state ESTABLISHED -t 300 -u ASSURED)
    if [ "$zone" = 1 ]; then
        ip netns exec "$a" iptables -w -t raw -A OUTPUT -m mark --mark 0x100000/0x300000 -j CT --zone-orig 18512
        planted+=(--orig-zone 18512)
    fi
    fresh=$(connect 40000)
    ip netns exec "$a" conntrack "${planted[@]}" >/dev/null 2>&1
    stale=$(connect 40001)
    label=$([ "$zone" = 1 ] && echo "with the zone" || echo "without the zone")
    echo "$label: a person's connection from a fresh port reached the $fresh; from the port of the proxy's stale entry, the $stale"
    [ "$fresh" = proxy ] || status=1
    [ "$zone" = 0 ] || [ "$stale" = proxy ] || status=1
    stop_listeners
done
exit "$status"
