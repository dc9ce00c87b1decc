#!/usr/bin/env bash
# Selective TLS inspection measured side by side with Squid, for BENCHMARKS.md
# (release build, root):
#   scripts/bench-inspect.sh [CONNECTIONS] [ROUNDS] [SIZE_MIB]   (default 200, 3, 1024)
#
# Two network namespaces joined by a veth pair (client 10.84.0.1; server
# 10.84.0.2 and 10.84.0.3; nothing leaves the machine). In the server, nginx
# serves HTTPS with certificates from a test CA: inspected.test and
# spliced.test on .2 (each its own certificate, so the spliced name's does
# not cover the inspected one), direct.test on .3; dnsmasq answers for the
# three names. The client resolves through it and trusts the test CA.
#
# Three setups, one after the other, on the same servers and the same
# requests:
#   none      nothing in the client: the baseline;
#   hallpass  filter-control, filter-data and hallpass-proxy with a bundle
#             whose policy inspects `=inspected.test`: direct.test is judged
#             by name and goes direct; spliced.test shares inspected.test's
#             address, so its connections reach the proxy and are spliced;
#             inspected.test's are terminated (the interception CA);
#   squid     Debian's squid-openssl intercepting TCP 443 (nat OUTPUT
#             REDIRECT, its own uid exempt) with peek at step 1, bump for
#             inspected.test and splice for everything else.
# Each round makes CONNECTIONS new connections per kind (one curl, a new
# connection and a full handshake each: `Connection: close`, no TLS session
# reuse) and reports the median and p90 time to first byte (curl's
# time_starttransfer) and the CPU the setup's own processes used per
# connection (utime+stime of filter-control, filter-data and hallpass-proxy,
# or of squid and its certificate helpers), and how many answers were not
# 200 (left out of the times). Then one download of SIZE_MIB
# through each kind. Prints the ratios against the targets of issue 32:
# spliced TTFB <= 1.1 x direct, inspected <= 2 x direct.
set -euo pipefail
cd "$(dirname "$0")/.."
connections=${1:-200}
rounds=${2:-3}
size_mib=${3:-1024}
bench_name=bench-inspect
bench_net=84
bench_queue=10
bench_build_flags=${bench_build_flags:--c release --static-swift-stdlib}
source scripts/lib/bench-network.sh

command -v squid >/dev/null || {
    echo "bench-inspect.sh: installing Debian's squid-openssl (the peer)"
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q squid-openssl >/dev/null
    [ "$made_policy" = 1 ] && rm -f "$policy"
}
certgen=/usr/lib/squid/security_file_certgen
[ -x "$certgen" ] || { echo "bench-inspect.sh: no $certgen (squid-openssl)" >&2; exit 69; }

bench_setup
[ -x "$bin/hallpass-proxy" ] || { echo "bench-inspect.sh: no hallpass-proxy in $bin" >&2; exit 66; }
direct_ip=10.$bench_net.0.3
ip -n "$server" addr add "$direct_ip/24" dev "b$$s"
squid_pid=""
squid_cleanup() {
    [ -n "$squid_pid" ] && kill "$squid_pid" 2>/dev/null && wait "$squid_pid" 2>/dev/null || true
    bench_cleanup
}
trap squid_cleanup EXIT

# The test CA and one certificate per name.
(
    set -e
    cd "$work"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=hallpass $bench_name CA" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign -keyout ca-key.pem -out ca.pem
    for name in inspected spliced direct; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name.test" -keyout "$name-key.pem" -out "$name.csr"
        printf 'subjectAltName=DNS:%s.test\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$name" >"$name.ext"
        openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile "$name.ext" -out "$name.pem"
    done
) >"$work/openssl.log" 2>&1 || { cat "$work/openssl.log" >&2; exit 1; }
truncate -s "${size_mib}M" "$work/big.bin"

server_block() {  # NAME ADDRESS
    cat <<NGINX
  server {
    listen $2:443 ssl;
    server_name $1.test;
    ssl_certificate $work/$1.pem;
    ssl_certificate_key $work/$1-key.pem;
    location /big { alias $work/big.bin; }
    location / { return 200 "ok \$host\n"; }
  }
NGINX
}
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
  sendfile on;
  keepalive_requests 1000;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
$(server_block inspected "$server_ip")
$(server_block spliced "$server_ip")
$(server_block direct "$direct_ip")
}
NGINX
ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" &
nginx_pid=$!
bench_wait_for "nginx to listen" ip netns exec "$server" sh -c "ss -ltn | grep -q '$direct_ip:443 '"
ip netns exec "$server" dnsmasq --no-daemon --no-resolv --no-hosts --bind-interfaces --listen-address="$server_ip" \
    --address="/inspected.test/$server_ip" --address="/spliced.test/$server_ip" --address="/direct.test/$direct_ip" \
    --local-ttl=3600 --user=root --pid-file="$work/dnsmasq.pid" --log-facility=- >"$work/dnsmasq.log" 2>&1 &
bench_pids+=($!)
bench_wait_for "dnsmasq to listen" ip netns exec "$server" sh -c "ss -lun | grep -q '$server_ip:53 '"
mkdir -p "/etc/netns/$client"
printf 'nameserver %s\noptions timeout:2 attempts:1\n' "$server_ip" >"/etc/netns/$client/resolv.conf"
printf '127.0.0.1 localhost\n' >"/etc/netns/$client/hosts"

# The bundle: one list nothing here is in, a policy that inspects inspected.test only.
mkdir -p "$work/lists/blocked" "$work/bundle"
echo blocked.test >"$work/lists/blocked/domains"
cat >"$work/policy.yaml" <<EOF
policy:
  block: [blocked]
  inspect:
    hosts: ["=inspected.test"]
    searchTerms: capture
EOF
"$bin/filterctl" bundle keygen --out "$work/signing.pem" >"$work/public-key"
"$bin/filterctl" bundle build --key "$work/signing.pem" --version 1 --expires 2d --out "$work/bundle" \
    --policy "$work/policy.yaml" --no-builtin-protections "$work/lists" >/dev/null
cat >"$work/hallpass.yaml" <<EOF
queue:
  number: $bench_queue
  user: nobody        # the build folder's filter-data runs as nobody (no _hallpass user here)
  failMode: open
proxy:
  user: nobody
  ca: $work/inspect-ca
  trustFile: $work/ca.pem
rules:
  directory: $work/lib
  source: file://$work/bundle/
  trustedKeys: [ "$(tr -d '[:space:]' <"$work/public-key")" ]
log:
  file: $work/audit.jsonl
  journald: false
admin:
  socket: $work/control.sock
EOF

# CPU of PIDS... in clock ticks (utime + stime), the processes and their children.
ticks() {
    local pid total=0 stat
    for pid in "$@"; do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        stat=${stat##*) }
        # shellcheck disable=SC2086  # fields
        set -- $stat
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}
tree() {  # PID: it and its descendants
    local pid=$1 child
    echo "$pid"
    for child in $(pgrep -P "$pid"); do tree "$child"; done
}
hz=$(getconf CLK_TCK)

# One batch: CONNECTIONS new connections to NAME, CA the client trusts;
# prints each time to first byte in ms.
batch() {
    local name=$1 ca=$2
    ip netns exec "$client" curl -sS -m 20 --no-sessionid -H 'Connection: close' --cacert "$ca" -o /dev/null \
        -w '%{http_code} %{time_starttransfer}\n' "https://$name/ttfb[1-$connections]" |
        awk -v name="$name" -v errors="$work/errors" '
            $1 != 200 { bad++; print name " " $1 >> errors; next }
            { printf "%.3f\n", $2 * 1000 }'
}
download() {  # NAME CA: Mbit/s
    ip netns exec "$client" curl -sS --cacert "$2" -o /dev/null -m 300 -w '%{http_code} %{speed_download}\n' "https://$1/big" |
        awk '$1 != 200 { print "bench-inspect.sh: download answered " $1 > "/dev/stderr"; exit 1 } { printf "%.0f\n", $2 * 8 / 1e6 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
p90() { sort -n | awk '{ v[NR] = $1 } END { i = int(NR * 0.9 + 0.999); if (i < 1) i = 1; print v[i] }'; }

results=$work/results
: >"$results"
# measure SETUP KIND NAME CA PIDS...: ROUNDS batches, their times and the CPU per connection.
measure() {
    local setup=$1 kind=$2 name=$3 ca=$4
    shift 4
    local round before after times="$work/times-$setup-$kind" cpu=0
    : >"$times"
    batch "$name" "$ca" >/dev/null   # warm: the selection, the caches, the first handshake's costs
    : >"$work/errors"
    for round in $(seq 1 "$rounds"); do
        before=$(ticks $(for p in "$@"; do tree "$p"; done))
        batch "$name" "$ca" >>"$times"
        after=$(ticks $(for p in "$@"; do tree "$p"; done))
        cpu=$((cpu + after - before))
    done
    local n=$((connections * rounds))
    local med p cpu_us mbps
    med=$(median <"$times")
    p=$(p90 <"$times")
    cpu_us=$(awk -v t="$cpu" -v hz="$hz" -v n="$n" 'BEGIN { printf "%.0f", t / hz * 1e6 / n }')
    mbps=$(download "$name" "$ca")
    local failed
    failed=$(grep -c "^$name " "$work/errors" 2>/dev/null || true)
    : >"$work/errors"
    printf '%-9s %-10s ttfb median %7.3f ms  p90 %7.3f ms  cpu %5s us/connection  download %5s Mbit/s  not 200: %s\n' \
        "$setup" "$kind" "$med" "$p" "$cpu_us" "$mbps" "${failed:-0}"
    echo "$setup $kind $med $p $cpu_us $mbps" >>"$results"
}

echo "# machine: $(nproc) cores, $(uname -r); $connections connections x $rounds rounds per kind, ${size_mib} MiB download; $(squid -v | head -1)"

# 1. Nothing in the client.
measure none direct direct.test "$work/ca.pem"
measure none spliced spliced.test "$work/ca.pem"
measure none inspected inspected.test "$work/ca.pem"

# 2. hallpass.
ip netns exec "$client" "$bin/filter-control" --config "$work/hallpass.yaml" --runtime-dir "$work/run" \
    2> >(bench_stamp >>"$work/filter-control.log") &
control_pid=$!
bench_wait_for_queue
for _ in $(seq 1 300); do
    grep -q "is filtering with rules version 1" "$work/filter-control.log" && grep -q "interception CA" "$work/filter-control.log" && break
    sleep 0.1
done
bench_wait_for "the proxy to listen" ip netns exec "$client" sh -c "ss -ltn | grep -q '127.0.0.1:1023 '"
# The name's address goes into the inspect set when filter-data sees its DNS answer.
ip netns exec "$client" getent ahostsv4 inspected.test >/dev/null
ip netns exec "$client" ipset list hallpass-inspect4 | grep -q "^$server_ip" || {
    echo "bench-inspect.sh: $server_ip is not in the inspect set" >&2
    cat "$work/filter-control.log" >&2
    exit 1
}
measure hallpass direct direct.test "$work/ca.pem" "$control_pid"
measure hallpass spliced spliced.test "$work/ca.pem" "$control_pid"
measure hallpass inspected inspected.test "$work/inspect-ca/ca.pem" "$control_pid"
grep -q "counters" "$work/filter-control.log" && grep "counters" "$work/filter-control.log" | tail -1 | sed 's/^[0-9.]* /# /'
kill "$control_pid"
wait "$control_pid" 2>/dev/null || true
control_pid=""
# Connections refused on the way (counted once filter-control has written its last records): an
# inspected name that went around the redirect (reset by filter-data), and inspected requests whose
# server's certificate did not verify (the block page).
for category in outside-redirect certificate; do
    echo "# audit records of category $category: $(grep -c "\"category\":\"$category\"" "$work/audit.jsonl" 2>/dev/null || true)"
done
if ip netns exec "$client" iptables -w -t nat -S | grep -q HALLPASS; then
    echo "bench-inspect.sh: filter-control left its nat rules behind" >&2
    exit 1
fi

# 3. Squid: peek, then bump inspected.test and splice the rest.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=squid $bench_name CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
    -keyout "$work/squid-ca-key.pem" -out "$work/squid-ca.pem" >>"$work/openssl.log" 2>&1
cat "$work/squid-ca.pem" "$work/squid-ca-key.pem" >"$work/squid-ca-bundle.pem"
"$certgen" -c -s "$work/ssl_db" -M 4MB >"$work/certgen.log" 2>&1
chown -R proxy:proxy "$work/ssl_db"
chmod 644 "$work/squid-ca-bundle.pem"
mkdir -p "$work/squid"
chown proxy:proxy "$work/squid"
cat >"$work/squid.conf" <<EOF
http_port 127.0.0.1:3128
https_port 127.0.0.1:3129 intercept ssl-bump tls-cert=$work/squid-ca-bundle.pem generate-host-certificates=on dynamic_cert_mem_cache_size=4MB
sslcrtd_program $certgen -s $work/ssl_db -M 4MB
sslcrtd_children 5 startup=1 idle=1
acl step1 at_step SslBump1
acl inspected ssl::server_name inspected.test
ssl_bump peek step1
ssl_bump bump inspected
ssl_bump splice all
tls_outgoing_options cafile=$work/ca.pem
dns_nameservers $server_ip
http_access allow all
cache deny all
cache_mem 0 MB
access_log none
cache_log $work/squid/cache.log
pid_filename $work/squid/squid.pid
coredump_dir $work/squid
cache_effective_user proxy
shutdown_lifetime 1 seconds
netdb_filename none
EOF
ip netns exec "$client" squid -N -f "$work/squid.conf" >"$work/squid.out" 2>&1 &
squid_pid=$!
bench_wait_for "squid to listen" ip netns exec "$client" sh -c "ss -ltn | grep -q '127.0.0.1:3129 '"
ip netns exec "$client" iptables -w -t nat -A OUTPUT -p tcp --dport 443 -d "$server_ip" -m owner ! --uid-owner proxy \
    -j REDIRECT --to-ports 3129
measure squid direct direct.test "$work/ca.pem" "$squid_pid"
measure squid spliced spliced.test "$work/ca.pem" "$squid_pid"
measure squid inspected inspected.test "$work/squid-ca.pem" "$squid_pid"

# The ratios.
awk '
    { ttfb[$1 "/" $2] = $3; cpu[$1 "/" $2] = $5; mbps[$1 "/" $2] = $6 }
    function ratio(a, b) { return b > 0 ? a / b : 0 }
    END {
        printf "hallpass spliced / hallpass direct TTFB:   %.2f (target <= 1.1)\n", ratio(ttfb["hallpass/spliced"], ttfb["hallpass/direct"])
        printf "hallpass inspected / hallpass direct TTFB: %.2f (target <= 2)\n", ratio(ttfb["hallpass/inspected"], ttfb["hallpass/direct"])
        printf "hallpass spliced / none TTFB:              %.2f\n", ratio(ttfb["hallpass/spliced"], ttfb["none/spliced"])
        printf "hallpass inspected / none TTFB:            %.2f\n", ratio(ttfb["hallpass/inspected"], ttfb["none/inspected"])
        printf "squid spliced / hallpass spliced TTFB:     %.2f (above 1: hallpass ahead)\n", ratio(ttfb["squid/spliced"], ttfb["hallpass/spliced"])
        printf "squid bumped / hallpass inspected TTFB:    %.2f (above 1: hallpass ahead)\n", ratio(ttfb["squid/inspected"], ttfb["hallpass/inspected"])
        printf "CPU per connection, spliced:   hallpass %s us, squid %s us\n", cpu["hallpass/spliced"], cpu["squid/spliced"]
        printf "CPU per connection, inspected: hallpass %s us, squid %s us\n", cpu["hallpass/inspected"], cpu["squid/inspected"]
        printf "download, spliced:   none %s, hallpass %s, squid %s Mbit/s\n", mbps["none/spliced"], mbps["hallpass/spliced"], mbps["squid/spliced"]
        printf "download, inspected: none %s, hallpass %s, squid %s Mbit/s\n", mbps["none/inspected"], mbps["hallpass/inspected"], mbps["squid/inspected"]
    }' "$results"
