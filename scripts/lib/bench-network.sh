# Shared by the scripts/bench-*.sh benchmarks (sourced, not run): a release
# build, a client and a server network namespace joined by a veth pair,
# nginx in the server, hallpass in the client, and a cleanup that stops
# what the benchmark started (by pid) and removes the namespaces, also when
# the benchmark fails. Nothing leaves the machine.
#
# The sourcing script sets before calling bench_setup:
#   bench_name   its name, for messages and folder names
#   bench_net    the third octet of 10.N.0.0/24 (client .1, server .2)
#   bench_queue  the NFQUEUE number hallpass uses

bench_setup() {
    [ "$(id -u)" = 0 ] || { echo "$bench_name: needs root (network namespaces, iptables, NFQUEUE)" >&2; exit 77; }
    scripts/install-deps.sh
    swift build -c release 2>&1 | tail -1
    bin=$(swift build -c release --show-bin-path)
    work=$(mktemp -d "/tmp/hallpass-$bench_name.XXXXXX")
    client=hpb${bench_net}c$$
    server=hpb${bench_net}s$$
    client_ip=10.$bench_net.0.1
    server_ip=10.$bench_net.0.2
    control_pid=""
    nginx_pid=""
    trap bench_cleanup EXIT

    ip netns add "$client"
    ip netns add "$server"
    ip link add "b$$c" type veth peer name "b$$s"
    ip link set "b$$c" netns "$client"
    ip link set "b$$s" netns "$server"
    ip -n "$client" link set lo up
    ip -n "$server" link set lo up
    ip -n "$client" addr add "$client_ip/24" dev "b$$c"
    ip -n "$server" addr add "$server_ip/24" dev "b$$s"
    ip -n "$client" link set "b$$c" up
    ip -n "$server" link set "b$$s" up
}

bench_cleanup() {
    [ -n "$control_pid" ] && kill "$control_pid" 2>/dev/null && wait "$control_pid" 2>/dev/null || true
    [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null || true
    ip netns del "$client" 2>/dev/null || true
    ip netns del "$server" 2>/dev/null || true
    rm -rf "$work"
}

# nginx on the server's port 80: every name answers `ok NAME`; /big is
# $work/big.bin when the benchmark made one.
bench_nginx() {
    cat >"$work/nginx.conf" <<NGINX
daemon off;
master_process off;
worker_processes 1;
user root;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server {
    listen $server_ip:80;
    location /big { alias $work/big.bin; }
    location / { return 200 "ok \$host\n"; }
  }
}
NGINX
    ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" &
    nginx_pid=$!
}

# filter-control in the client with $work/hallpass.yaml and $work/rules.hpstore.
bench_hallpass() {
    ip netns exec "$client" "$bin/filter-control" --config "$work/hallpass.yaml" --store "$work/rules.hpstore" \
        --runtime-dir "$work/run" 2>"$work/filter-control.log" &
    control_pid=$!
    bench_wait_for_queue
}

# Waits until a filter-data is bound to $bench_queue.
bench_wait_for_queue() {
    for _ in $(seq 1 100); do
        bench_queue_bound && return 0
        sleep 0.1
    done
    echo "$bench_name: filter-data did not bind queue $bench_queue" >&2
    cat "$work/filter-control.log" >&2
    exit 1
}

bench_queue_bound() {
    ip netns exec "$client" awk -v q="$bench_queue" '$1 == q { found = 1 } END { exit !found }' \
        /proc/net/netfilter/nfnetlink_queue 2>/dev/null
}

# The pid of the filter-data serving $bench_queue.
bench_data_pid() {
    pgrep -f "$bin/filter-data --queue $bench_queue" | head -1
}
