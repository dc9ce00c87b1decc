# Shared by the scripts/bench-*.sh benchmarks and scripts/soak.sh (sourced,
# not run): a release build, a client and a server network namespace joined
# by a veth pair, servers in the server (nginx; optionally HTTPS and a rule
# server, dnsmasq, a QUIC server, an rsyslog collector), hallpass in the
# client, names the client resolves without DNS, and a cleanup
# that stops what the script started (by pid) and removes the namespaces,
# also when the script fails or is interrupted. Nothing leaves the machine.
#
# The sourcing script sets before calling bench_setup:
#   bench_name   its name, for messages and folder names
#   bench_net    the third octet of 10.N.0.0/24 (client .1, server .2)
#   bench_queue  the NFQUEUE number hallpass uses
# and may set:
#   bench_build_flags  swift build flags (default: -c release; make and
#                      peerbench.sh add --static-swift-stdlib)
# HALLPASS_BIN (from the environment): a folder with filterctl, filter-control
# and filter-data to use instead of building (a long soak keeps its copy while
# the tree is built again).
#   bench_https        1: bench_nginx also serves HTTPS on 443 and the rule
#                      server on 8443 (call bench_tls first)
#   bench_store        the store filter-control uses (--store; default
#                      $work/rules.hpstore); empty: rules.source instead
#   bench_nginx_extra  more directives for nginx's http block
# Extra background processes go into bench_pids, for the cleanup.

# Sets bin: the folder of the programs, HALLPASS_BIN's or a fresh build's.
bench_programs() {
    if [ -n "${HALLPASS_BIN:-}" ]; then
        bin=$HALLPASS_BIN
        for program in filterctl filter-control filter-data; do
            [ -x "$bin/$program" ] || { echo "$bench_name: no $program in HALLPASS_BIN=$bin" >&2; exit 66; }
        done
    else
        # shellcheck disable=SC2086  # the flags are words
        swift build ${bench_build_flags:--c release} 2>&1 | tail -1
        # shellcheck disable=SC2086
        bin=$(swift build ${bench_build_flags:--c release} --show-bin-path)
    fi
}

bench_setup() {
    [ "$(id -u)" = 0 ] || { echo "$bench_name: needs root (network namespaces, iptables, NFQUEUE)" >&2; exit 77; }
    scripts/install-deps.sh
    bench_programs
    work=$(mktemp -d "/tmp/hallpass-$bench_name.XXXXXX")
    # filter-data (uid 65534 once locked down) reads the policy files in $work/run.
    chmod 755 "$work"
    client=hpb${bench_net}c$$
    server=hpb${bench_net}s$$
    client_ip=10.$bench_net.0.1
    server_ip=10.$bench_net.0.2
    control_pid=""
    nginx_pid=""
    bench_pids=()
    bench_store=${bench_store-$work/rules.hpstore}
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM

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
    local pid
    for pid in "${bench_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${bench_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    [ -n "$control_pid" ] && kill "$control_pid" 2>/dev/null && wait "$control_pid" 2>/dev/null || true
    [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null || true
    ip netns del "$client" 2>/dev/null || true
    ip netns del "$server" 2>/dev/null || true
    [ -n "${client:-}" ] && rm -rf "/etc/netns/$client"
    # HALLPASS_BENCH_KEEP=1 keeps the logs and files of the run, to look into.
    if [ "${HALLPASS_BENCH_KEEP:-}" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}

# Names the client resolves to the server without DNS (getaddrinfo reads
# /etc/netns/$client/hosts, which `ip netns exec` mounts over /etc/hosts;
# removed by the cleanup): bench_hosts NAME...
bench_hosts() {
    mkdir -p "/etc/netns/$client"
    printf '%s %s\n' 127.0.0.1 localhost >"/etc/netns/$client/hosts"
    local name
    for name in "$@"; do printf '%s %s\n' "$server_ip" "$name"; done >>"/etc/netns/$client/hosts"
}

# rsyslogd (Debian's rsyslog) in the server with docs/examples/rsyslog-collector.conf,
# the school's collector of docs/fleet.md: TCP and UDP port 514, one file per
# machine in $work/collector (MACHINE.log).
bench_collector() {
    mkdir -p "$work/collector" "$work/rsyslog-work"
    {
        printf 'global(workDirectory="%s")\n' "$work/rsyslog-work"
        sed "s|/var/log/hallpass-collector|$work/collector|" docs/examples/rsyslog-collector.conf
    } >"$work/rsyslog.conf"
    ip netns exec "$server" rsyslogd -n -f "$work/rsyslog.conf" -i "$work/rsyslog.pid" >"$work/rsyslog.log" 2>&1 &
    bench_pids+=($!)
    bench_wait_for "rsyslog to listen" ip netns exec "$server" sh -c "ss -ltn | grep -q ':514 '"
}

# A test CA ($work/ca.pem, known to nobody else) and a certificate it signs
# for the server's address and every name under .test ($work/server-cert.pem,
# server-key.pem): the rule server's certificate that filter-control checks
# with rules.caFile, and the one HTTPS and QUIC clients get (unchecked).
bench_tls() {
    (
        set -e
        cd "$work"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=hallpass $bench_name CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
            -keyout ca-key.pem -out ca.pem
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$server_ip" \
            -keyout server-key.pem -out server.csr
        printf 'subjectAltName=IP:%s,DNS:*.test\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$server_ip" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
            -extfile server.ext -out server-cert.pem
    ) >"$work/openssl.log" 2>&1 || { cat "$work/openssl.log" >&2; exit 1; }
}

# nginx on the server's port 80: every name answers `ok NAME`; /big is
# $work/big.bin when the benchmark made one. With bench_https=1 the same on
# 443, and $work/www (the rule server's folder) on 8443, each request
# logged to $work/rules-access.log as `URI STATUS`.
bench_nginx() {
    local tls="" rules=""
    if [ "${bench_https:-0}" = 1 ]; then
        mkdir -p "$work/www"
        tls="listen $server_ip:443 ssl;
    ssl_certificate $work/server-cert.pem;
    ssl_certificate_key $work/server-key.pem;"
        rules="server {
    listen $server_ip:8443 ssl;
    ssl_certificate $work/server-cert.pem;
    ssl_certificate_key $work/server-key.pem;
    access_log $work/rules-access.log brief;
    root $work/www;
  }"
    fi
    cat >"$work/nginx.conf" <<NGINX
daemon off;
master_process off;
worker_processes 1;
user root;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  log_format brief '\$request_uri \$status';
  sendfile on;
  ${bench_nginx_extra:-}
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server {
    listen $server_ip:80;
    $tls
    location /big { alias $work/big.bin; }
    location / { return 200 "ok \$host\n"; }
  }
  $rules
}
NGINX
    ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" &
    nginx_pid=$!
    bench_wait_for "nginx to listen" ip netns exec "$server" sh -c "ss -ltn | grep -q '$server_ip:80 '"
}

# dnsmasq on the server's port 53: every name under .test is the server.
bench_dns() {
    ip netns exec "$server" dnsmasq --no-daemon --no-resolv --no-hosts --bind-interfaces --listen-address="$server_ip" \
        --address="/test/$server_ip" --user=root --pid-file="$work/dnsmasq.pid" --log-facility=- >"$work/dnsmasq.log" 2>&1 &
    bench_pids+=($!)
    bench_wait_for "dnsmasq to listen" ip netns exec "$server" sh -c "ss -lun | grep -q '$server_ip:53 '"
}

# The integration tests' QUIC server (aioquic, in the virtualenv that
# scripts/install-deps.sh prepares) on the server's UDP port 443: answers
# `ok NAME`. Needs bench_tls.
bench_quic_server() {
    ip netns exec "$server" .build/test-venv/bin/python Tests/IntegrationTests/Helpers/quic_server.py \
        --host "$server_ip" --cert "$work/server-cert.pem" --key "$work/server-key.pem" >"$work/quic-server.log" 2>&1 &
    bench_pids+=($!)
    bench_wait_for "the QUIC server to listen" ip netns exec "$server" sh -c "ss -lun | grep -q '$server_ip:443 '"
}

# Runs COMMAND... until it succeeds, at most 10 s.
bench_wait_for() {
    local what=$1
    shift
    for _ in $(seq 1 100); do
        "$@" && return 0
        sleep 0.1
    done
    echo "$bench_name: timed out waiting for $what" >&2
    exit 1
}

# Prefixes each line of standard input with the time (seconds since the epoch).
bench_stamp() {
    local line
    while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done
}

# filter-control in the client with $work/hallpass.yaml and $bench_store;
# its output, each line with the time, goes to $work/filter-control.log.
bench_hallpass() {
    local store=()
    [ -n "$bench_store" ] && store=(--store "$bench_store")
    ip netns exec "$client" "$bin/filter-control" --config "$work/hallpass.yaml" "${store[@]}" \
        --runtime-dir "$work/run" 2> >(bench_stamp >>"$work/filter-control.log") &
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

# The pid of the filter-data of the running filter-control (CONTROL_PID,
# default $control_pid), found by what it is: a child of that process whose
# name is filter-data and whose program is a file named filter-data (when
# its link in /proc can be read). Not by a path on its command line:
# filter-control starts it by the resolved path, which is not $bin when
# HALLPASS_BIN goes through a link. Prints nothing and fails when there is
# none (filter-data restarting, or filter-control gone).
bench_data_pid() {
    local control=${1:-$control_pid} child exe
    [ -n "$control" ] || return 1
    for child in $(pgrep -P "$control"); do
        [ "$(cat "/proc/$child/comm" 2>/dev/null)" = filter-data ] || continue
        if exe=$(readlink "/proc/$child/exe" 2>/dev/null); then
            exe=${exe% (deleted)}
            [ "${exe##*/}" = filter-data ] || continue
        fi
        echo "$child"
        return 0
    done
    return 1
}
