#!/usr/bin/env bash
# Large-download speed with hallpass filtering against the same path with
# hallpass bypassed, for BENCHMARKS.md (release build, root).
#   scripts/bench-download.sh [SIZE_MIB] [ROUNDS]     (default 2048 MiB, 4 rounds)
#
# Two network namespaces joined by a veth pair (10.78.0.1 client, .2 server;
# nothing leaves the machine); nginx in the server serves a sparse file;
# filter-control and filter-data run in the client on queue 5 with rules
# that block blocked.test. Each round downloads the file over plain HTTP
# four times, ON OFF OFF ON: OFF inserts an ACCEPT at the top of OUTPUT in
# the client (hallpass keeps running but sees nothing), so ON and OFF share
# the machine's state and only the filter differs. Prints each speed, the
# medians and their ratio, and filter-data's peak RSS (VmHWM).
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-2048}
rounds=${2:-4}
[ "$(id -u)" = 0 ] || { echo "bench-download.sh: needs root (network namespaces, iptables, NFQUEUE)" >&2; exit 77; }

scripts/install-deps.sh
swift build -c release 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/hallpass-bench-download.XXXXXX)
client=hpbdc$$
server=hpbds$$
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
ip link add "v$$c" type veth peer name "v$$s"
ip link set "v$$c" netns "$client"
ip link set "v$$s" netns "$server"
ip -n "$client" link set lo up
ip -n "$server" link set lo up
ip -n "$client" addr add 10.78.0.1/24 dev "v$$c"
ip -n "$server" addr add 10.78.0.2/24 dev "v$$s"
ip -n "$client" link set "v$$c" up
ip -n "$server" link set "v$$s" up

truncate -s "${size_mib}M" "$work/big.bin"
cat >"$work/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
user root;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server {
    listen 10.78.0.2:80;
    location /big { alias $work/big.bin; }
    location / { return 200 "ok \$host\n"; }
  }
}
EOF
ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" &
nginx_pid=$!

echo "blocked.test" >"$work/demo.txt"
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$work/demo.txt"
cat >"$work/hallpass.yaml" <<EOF
queue:
  number: 5
  failMode: open
policy:
  block: [ demo ]
EOF
ip netns exec "$client" "$bin/filter-control" --config "$work/hallpass.yaml" --store "$work/rules.hpstore" \
    --runtime-dir "$work/run" 2>"$work/filter-control.log" &
control_pid=$!
for _ in $(seq 1 100); do
    ip netns exec "$client" awk '$1 == 5 { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue 2>/dev/null && break
    sleep 0.1
done

fetch() {  # prints bytes per second
    ip netns exec "$client" curl -s -o /dev/null -m 120 -w '%{speed_download}' \
        --resolve allowed.test:80:10.78.0.2 http://allowed.test/big
}
bypass() {  # on | off
    if [ "$1" = on ]; then
        ip netns exec "$client" iptables -w -I OUTPUT 1 -m comment --comment hallpass-bench-bypass -j ACCEPT
    else
        ip netns exec "$client" iptables -w -D OUTPUT -m comment --comment hallpass-bench-bypass -j ACCEPT
    fi
}

# Both paths work before measuring: the filter judges (blocked.test fails) and allowed.test answers.
if ip netns exec "$client" curl -s -m 3 --resolve blocked.test:80:10.78.0.2 http://blocked.test/ >/dev/null; then
    echo "bench-download.sh: blocked.test was not blocked; is hallpass running?" >&2
    cat "$work/filter-control.log" >&2
    exit 1
fi
fetch >/dev/null

on=()
off=()
echo "# machine: $(nproc) cores, $(uname -r); file ${size_mib} MiB over HTTP, veth between two namespaces"
for round in $(seq 1 "$rounds"); do
    for mode in on off off on; do
        if [ "$mode" = off ]; then bypass on; fi
        speed=$(fetch)
        if [ "$mode" = off ]; then bypass off; fi
        mbps=$(awk -v s="$speed" 'BEGIN { printf "%.0f", s * 8 / 1e6 }')
        echo "round $round filter $mode: $mbps Mbit/s"
        if [ "$mode" = on ]; then on+=("$mbps"); else off+=("$mbps"); fi
    done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
on_median=$(median "${on[@]}")
off_median=$(median "${off[@]}")
echo "median filter on:  $on_median Mbit/s (${#on[@]} downloads)"
echo "median filter off: $off_median Mbit/s (${#off[@]} downloads)"
awk -v a="$on_median" -v b="$off_median" 'BEGIN { printf "on/off: %.1f %%\n", 100 * a / b }'
data_pid=$(pgrep -f "$bin/filter-data" | head -1 || true)
if [ -n "$data_pid" ]; then
    grep -E "VmHWM|VmRSS" "/proc/$data_pid/status" | sed 's/^/filter-data /'
fi
