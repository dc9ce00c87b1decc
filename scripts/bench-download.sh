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
bench_name=bench-download
bench_net=78
bench_queue=5
source scripts/lib/bench-network.sh
bench_setup
truncate -s "${size_mib}M" "$work/big.bin"
bench_nginx

echo "blocked.test" >"$work/demo.txt"
"$bin/filterctl" compile --quiet --out "$work/rules.hpstore" "demo=$work/demo.txt"
cat >"$work/hallpass.yaml" <<EOF
queue:
  number: 5
  user: nobody        # the build folder's filter-data runs as nobody (no _hallpass user here)
  failMode: open
rules:
  directory: $work/lib   # not the host's /var/lib/hallpass
policy:
  block: [ demo ]
EOF
bench_hallpass

fetch() {  # prints bytes per second
    ip netns exec "$client" curl -s -o /dev/null -m 120 -w '%{speed_download}' \
        --resolve allowed.test:80:$server_ip http://allowed.test/big
}
bypass() {  # on | off
    if [ "$1" = on ]; then
        ip netns exec "$client" iptables -w -I OUTPUT 1 -m comment --comment hallpass-bench-bypass -j ACCEPT
    else
        ip netns exec "$client" iptables -w -D OUTPUT -m comment --comment hallpass-bench-bypass -j ACCEPT
    fi
}

# Both paths work before measuring: the filter judges (blocked.test fails) and allowed.test answers.
if ip netns exec "$client" curl -s -m 3 --resolve blocked.test:80:$server_ip http://blocked.test/ >/dev/null; then
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
data_pid=$(bench_data_pid || true)
if [ -n "$data_pid" ]; then
    grep -E "VmHWM|VmRSS" "/proc/$data_pid/status" | sed 's/^/filter-data /'
fi
