#!/usr/bin/env bash
# What a rule update costs a lab machine, in bytes, for BENCHMARKS.md ("Updates").
#   scripts/bench-updates.sh [NAMES...]     (default: 1000000 5000000)
#
# For each list size: a synthetic list (hallpass-bench generate, as
# scripts/bench-store.sh makes it) is published with `filterctl bundle build
# --out` into a folder served by nginx over HTTPS on 127.0.0.1, and a machine
# (hallpass-bench update: RuleUpdater, filter-control's own update code)
# installs it. Then, each built into the same folder as a school would:
#   policy-only   the same lists, another policy.yaml
#   1% change     1 % of the names removed and as many new ones added
#   full rebuild  another 1 % change, built into a fresh folder (no earlier
#                 stores kept there, so no deltas): the whole store, what
#                 every change of the lists cost before deltas
# The bytes are counted on nginx's side (the access log's $body_bytes_sent
# of every request of the update) and by the client (its state file's
# last-download-bytes); both are printed and must agree. The changed names
# compressed (zstd -19) are the moonshot's yardstick. Run as root (it installs
# what is missing, as scripts/bench-store.sh does); writes to bench-out/updates/.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000000 5000000)

scripts/install-deps.sh --build
command -v nginx >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null; }
command -v zstd >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zstd >/dev/null; }
command -v /usr/bin/time >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null; }
swift build -c release --product filterctl 2>&1 | tail -1
swift build -c release --product hallpass-bench 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)
out=$PWD/bench-out/updates
rm -rf "$out" && mkdir -p "$out"

nginx_pid=""
cleanup() {
    if [ -n "$nginx_pid" ]; then kill "$nginx_pid" 2>/dev/null || true; wait "$nginx_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

# A test CA and a certificate for 127.0.0.1; nginx serves $out/www on a free port.
(
    cd "$out"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench-updates CA" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out server.pem 2>/dev/null
)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$out/www"
cat >"$out/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $out/nginx.pid;
error_log $out/nginx-error.log;
events { worker_connections 64; }
http {
  log_format bytes '\$request_uri \$status \$body_bytes_sent';
  access_log $out/access.log bytes;
  client_body_temp_path $out/tmp-body;
  proxy_temp_path $out/tmp-proxy;
  fastcgi_temp_path $out/tmp-fastcgi;
  uwsgi_temp_path $out/tmp-uwsgi;
  scgi_temp_path $out/tmp-scgi;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$port ssl;
    ssl_certificate $out/server.pem;
    ssl_certificate_key $out/server.key;
    root $out/www;
  }
}
EOF
nginx -p "$out" -c "$out/nginx.conf" -e "$out/nginx-error.log" &
nginx_pid=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done

key=$("$bin/filterctl" bundle keygen --out "$out/signing.pem")

echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), zstd $(zstd -V | sed 's/.*v\([0-9.]*\).*/\1/')"

build() {  # label, folder, version, policy, list: builds and times the bundle
    local label=$1 folder=$2 version=$3 policy=$4 list=$5
    /usr/bin/time -f "%e %M" -o "$out/$label.time" "$bin/filterctl" bundle build --key "$out/signing.pem" --version "$version" \
        --expires 30d --policy "$policy" --out "$folder" "synthetic=$list" >"$out/$label.build.log" 2>&1
    # nginx's ETag is the manifest's time and size: give each version its own time.
    touch -d "@$(($(date +%s) + 10 * version))" "$folder/manifest"
    read -r seconds kilobytes <"$out/$label.time"
    echo "  build $label: ${seconds} s, peak RSS $((kilobytes / 1024)) MiB; $(grep -E '^(delta|unchanged)' "$out/$label.build.log" | tr '\n' ' ')"
}

fetch() {  # label, served folder name, machine folder: one update, bytes from both sides
    local label=$1 served=$2 machine=$3
    local mark; mark=$(wc -l <"$out/access.log" 2>/dev/null || echo 0)
    local client
    client=$(/usr/bin/time -f "%M" -o "$out/client.time" "$bin/hallpass-bench" update --directory "$machine" \
        --source "https://127.0.0.1:$port/$served/" --trusted-key "$key" --ca-file "$out/ca.pem")
    local served_bytes requests
    served_bytes=$(tail -n +"$((mark + 1))" "$out/access.log" | awk '{sum += $3} END {print sum + 0}')
    requests=$(tail -n +"$((mark + 1))" "$out/access.log" | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $3}')
    local client_bytes; client_bytes=$(sed -n 's/.*; \([0-9]*\) bytes downloaded;.*/\1/p' <<<"$client")
    [ "$client_bytes" = "$served_bytes" ] || echo "  WARNING: the client counted $client_bytes bytes, nginx $served_bytes"
    echo "  $label: $served_bytes bytes fetched ($requests)"
    echo "    client: $client; peak RSS $(($(cat "$out/client.time") / 1024)) MiB"
    last_bytes=$served_bytes
}

for names in "${sizes[@]}"; do
    work="$out/n$names"
    mkdir -p "$work"
    "$bin/hallpass-bench" generate --domains "$names" --queries 0 --out "$work" >/dev/null
    sort -u "$work/domains.txt" >"$work/v1.txt"
    # 1 %: every 100th name removed, as many new names added.
    awk 'NR % 100 == 0' "$work/v1.txt" >"$work/removed.txt"
    awk 'NR % 100 == 0 { printf "changed%d.%s\n", NR, $0 }' "$work/v1.txt" >"$work/added.txt"
    awk 'NR % 100 != 0' "$work/v1.txt" | cat - "$work/added.txt" >"$work/v3.txt"
    awk 'NR % 100 != 50' "$work/v3.txt" >"$work/v4.txt"
    awk 'NR % 100 == 50 { printf "again%d.%s\n", NR, $0 }' "$work/v3.txt" >>"$work/v4.txt"
    cat "$work/removed.txt" "$work/added.txt" | zstd -q -19 -c | wc -c >"$work/changed.zst.size"
    printf 'timezone: Europe/London\npolicy:\n  block: [synthetic]\n' >"$work/policy-1.yaml"
    printf 'timezone: Europe/London\npolicy:\n  block: [synthetic]\n  unknown: allow\n' >"$work/policy-2.yaml"

    echo "## $names names"
    served="$out/www/b$names"
    machine="$work/machine"
    build "v1" "$served" 1 "$work/policy-1.yaml" "$work/v1.txt"
    store_bytes=$(stat -c %s "$served/rules.hpstore")
    echo "  store: $store_bytes bytes"
    fetch "first install" "b$names" "$machine"
    build "v2" "$served" 2 "$work/policy-2.yaml" "$work/v1.txt"
    fetch "policy-only" "b$names" "$machine"
    policy_bytes=$last_bytes
    build "v3" "$served" 3 "$work/policy-2.yaml" "$work/v3.txt"
    fetch "1% change" "b$names" "$machine"
    change_bytes=$last_bytes
    # Another change, published into a new folder: no earlier store there, no delta.
    build "v4-full" "$out/www/f$names" 4 "$work/policy-2.yaml" "$work/v4.txt"
    fetch "full rebuild" "f$names" "$machine"
    changed=$(cat "$work/changed.zst.size")
    echo "  changed names: $(($(wc -l <"$work/removed.txt") + $(wc -l <"$work/added.txt"))) ($(cat "$work/removed.txt" "$work/added.txt" | wc -c) bytes), $changed bytes at zstd -19"
    awk -v p="$policy_bytes" -v d="$change_bytes" -v s="$store_bytes" -v c="$changed" 'BEGIN {
        printf "  targets: policy-only %d bytes (target <= 16384: %s); 1%% change %.2f%% of the store (target <= 5%%: %s), %.2f x the changed names compressed (moonshot <= 1.5: %s)\n",
            p, (p <= 16384 ? "met" : "missed"), 100 * d / s, (d <= 0.05 * s ? "met" : "missed"), d / c, (d <= 1.5 * c ? "met" : "missed") }'
done
