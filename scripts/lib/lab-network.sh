# Shared by the benchmarks of the school's side with real lab machines
# (scripts/bench-live.sh, scripts/bench-alerts.sh; sourced, not run): a
# server network namespace with one address (hallpass-server, nginx and
# whatever the script adds), LABS lab machines each in a namespace of its
# own joined to the server by a veth pair, the school's server configured
# and started, the lab machines enrolled and started, and a cleanup that
# stops what the script started (by pid) and removes the namespaces and
# the work folder, also when the script fails or is interrupted. Nothing
# leaves the machine.
#
# The sourcing script sets before calling lab_setup:
#   lab_name    its name, for messages and folder names
#   lab_tag     two or three letters naming its namespaces and veths
#   lab_net     the second octet of the server's 10.N.0.1 (the labs get 10.N+1.I.0/24)
#   labs        how many lab machines
# HALLPASS_BIN (from the environment): a folder with the programs to use
# instead of building. Sets: bin, venv, work, server (its namespace),
# address, url, pids (more background processes go there, for the cleanup).

lab_setup() {
    [ "$(id -u)" = 0 ] || { echo "$lab_name: needs root (network namespaces, NFQUEUE)" >&2; exit 77; }
    scripts/install-deps.sh >/dev/null
    # The simulators' Python: aiohttp and cryptography from PyPI, once.
    venv=.build/bench-venv
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import aiohttp, cryptography" 2>/dev/null; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check "aiohttp>=3.9,<4" "cryptography>=42"
    fi
    if [ -n "${HALLPASS_BIN:-}" ]; then
        bin=$HALLPASS_BIN
    else
        swift build -c release --static-swift-stdlib 2>&1 | tail -1
        bin=$(swift build -c release --static-swift-stdlib --show-bin-path)
    fi
    work=$(mktemp -d "/tmp/hallpass-$lab_name.XXXXXX")
    # filter-data (nobody, once locked down) reads each machine's rules and runtime folders.
    chmod 755 "$work"
    server=$lab_tag$$s
    address=10.$lab_net.0.1
    url=https://$address:8443
    pids=()
    lab_namespaces=("$server")
    trap lab_cleanup EXIT
    trap 'exit 130' INT TERM

    ip netns add "$server"
    ip -n "$server" link set lo up
    ip -n "$server" addr add "$address/32" dev lo
    local i ns
    for i in $(seq "$labs"); do
        ns=$(lab_namespace "$i")
        lab_namespaces+=("$ns")
        ip netns add "$ns"
        ip link add "$lab_tag$$a$i" type veth peer name "$lab_tag$$b$i"
        ip link set "$lab_tag$$a$i" netns "$ns"
        ip link set "$lab_tag$$b$i" netns "$server"
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "10.$((lab_net + 1)).$i.1/24" dev "$lab_tag$$a$i"
        ip -n "$server" addr add "10.$((lab_net + 1)).$i.2/24" dev "$lab_tag$$b$i"
        ip -n "$ns" link set "$lab_tag$$a$i" up
        ip -n "$server" link set "$lab_tag$$b$i" up
        ip -n "$ns" route add "$address/32" via "10.$((lab_net + 1)).$i.2"
    done
}

# The namespace of lab machine I.
lab_namespace() {
    echo "$lab_tag$$l$1"
}

lab_cleanup() {
    local pid ns
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in "${lab_namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$work"
}

# lab_wait_for WHAT COMMAND...: up to 60 s.
lab_wait_for() {
    local what=$1
    shift
    for _ in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "$lab_name: timed out waiting for $what" >&2
    return 1
}

# nginx on the server's address, port 80, answering "ok HOST" to everything.
lab_nginx() {
    cat >"$work/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
user root;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server {
    listen $address:80;
    server_name _;
    location / { return 200 "ok \$host\\n"; }
  }
}
EOF
    ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" >"$work/nginx.log" 2>&1 &
    pids+=($!)
}

# The school's server.yaml ($work/server.yaml) on SQLite with its own
# certificate, the enrolment rate lifted for a simulated fleet, and the
# lines of standard input added; then `hallpass-server init`.
lab_server_config() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/server.key" -out "$work/server.crt" \
        -subj /CN=school -addext "subjectAltName=IP:$address" -days 2 2>/dev/null
    {
        cat <<EOF
listen:
  address: $address
  port: 8443
tls:
  certificate: $work/server.crt
  key: $work/server.key
database: $work/server.db
# thousands of simulated machines enrol from one address within a minute
machines:
  enrolRate: 100000
EOF
        cat
    } >"$work/server.yaml"
    hs init >"$work/init.log" 2>&1
}

# A hallpass-server command on $work/server.yaml.
hs() {
    "$bin/hallpass-server" "$@" --config "$work/server.yaml"
}

# hallpass-server serve in the server's namespace, its log in LOG; sets server_pid.
lab_server_start() {
    ip netns exec "$server" "$bin/hallpass-server" serve --config "$work/server.yaml" >"$1" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    lab_wait_for "hallpass-server" ip netns exec "$server" curl -sk -o /dev/null -m 1 "$url/metrics"
}

# Each lab machine: its folder $work/labI with hallpass.yaml (the lines of
# standard input added), enrolled with TOKEN, filter-control started
# (through WRAPPER..., words run before it in the machine's namespace, if
# any); then waits for each one's first rules.
lab_machines() {
    local token=$1
    shift
    local extra i ns folder
    extra=$(cat)
    for i in $(seq "$labs"); do
        ns=$(lab_namespace "$i")
        folder=$work/lab$i
        mkdir -p "$folder/lib" "$folder/run"
        chmod 755 "$folder" "$folder/lib" "$folder/run"
        cat >"$folder/hallpass.yaml" <<EOF
queue:
  user: nobody
  number: 3
proxy:
  user: nobody
rules:
  directory: $folder/lib
policy:
  unknown: allow
log:
  file: $folder/audit.jsonl
  journald: false
admin:
  socket: $folder/control.sock
$extra
EOF
        ip netns exec "$ns" "$bin/filterctl" enroll "$url" "$token" --config "$folder/hallpass.yaml" >"$folder/enrol.log" 2>&1
        ip netns exec "$ns" "$@" "$bin/filter-control" --config "$folder/hallpass.yaml" --runtime-dir "$folder/run" \
            >"$folder/filter-control.log" 2>&1 &
        pids+=($!)
    done
    for i in $(seq "$labs"); do
        folder=$work/lab$i
        lab_wait_for "lab machine $i's first rules" sh -c "'$bin/filterctl' status --socket '$folder/control.sock' | grep -q 'version 1,'" \
            || { tail -30 "$folder/filter-control.log" >&2; exit 1; }
    done
}
