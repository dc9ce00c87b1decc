#!/usr/bin/env bash
# hallpass's Debian package under a real systemd: boots systemd 252 in a
# container (systemd-nspawn) on an overlay of a minimal Debian 12 root
# (scripts/systemd-rootfs.sh, cached), installs the package there with apt,
# and drives the packaged unit as an admin would, with the container in a
# test network namespace that reaches nginx and dnsmasq in a second one:
#
#   the package pulls what it needs (libnetfilter-queue1 comes from Depends),
#   installs the unit enabled and its configuration as a conffile, and makes
#   filter-data's system user _hallpass (sysusers); filter-data runs as that
#   user, also after a restart; systemd
#   skips the unit until a rule source is configured; start filters traffic
#   (HTTP and DNS), and the unit (Type=notify) is active only once
#   filter-control said it is ready; reload installs a new bundle, a refused bundle makes
#   `systemctl reload` fail with the reason in the journal and the rules in
#   force stay; stop returns within 0.5 s with filter-data gone and no kernel
#   rule left, in a steady state, right after a start (also before ready),
#   during a reload (SIGHUP) and during a restart delay after filter-data
#   was killed; chains left by an earlier run are replaced, not doubled; a
#   SIGKILL of filter-control is followed by a restart with one set of
#   chains; `journalctl -u hallpass` tells all of it; purge removes the state.
#
# and the school's server package, hallpass-server, beside it in the same
# container: its postinst makes the user _hallpass-server (sysusers) and, as
# that user, the database and the TLS pair (hallpass-server init, which
# prints the fingerprint); the service starts at boot as that user, answers
# on 8443 with the certificate of that fingerprint, refuses an unknown
# enrolment token; `hallpass-server token create`, run as root with the
# service's configuration, makes a token the running service takes once and
# then refuses, and leaves no file of root's in the state folder; the unit's
# hardening is rated by `systemd-analyze security`; stop is clean; purge
# removes /var/lib/hallpass-server.
#
# Everything it starts is stopped by pid and everything it makes is removed,
# also when a check fails; the container's journal and console log are kept
# in test-artifacts/systemd/.
#   scripts/test-systemd.sh [PACKAGE.deb [SERVER.deb]]
#     (default: the newest dist/hallpass_*.deb and dist/hallpass-server_*.deb)
# Run as root (scripts/test.sh runs it after `make deb-from-debug`).
set -euo pipefail
cd "$(dirname "$0")/.."

deb=${1:-$(ls -t dist/hallpass_*.deb 2>/dev/null | head -1)}
[ -n "$deb" ] && [ -f "$deb" ] || { echo "test-systemd: no package: give one, or run 'make deb' first" >&2; exit 66; }
deb=$(realpath "$deb")
server_deb=${2:-$(ls -t dist/hallpass-server_*.deb 2>/dev/null | head -1)}
[ -n "$server_deb" ] && [ -f "$server_deb" ] || { echo "test-systemd: no hallpass-server package: give one, or run 'make deb' first" >&2; exit 66; }
server_deb=$(realpath "$server_deb")
[ "$(id -u)" = 0 ] || { echo "test-systemd: needs root (containers, network namespaces, iptables)" >&2; exit 77; }
for tool in systemd-nspawn nsenter nginx dnsmasq dig curl nft openssl xxd; do
    command -v "$tool" >/dev/null || { echo "test-systemd: $tool is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
bin=$(swift build --show-bin-path)
filterctl=$bin/filterctl
[ -x "$filterctl" ] || { echo "test-systemd: $filterctl is missing (swift build first): it signs the test bundles" >&2; exit 1; }

rootfs=$(scripts/systemd-rootfs.sh)
work=$(mktemp -d /tmp/hallpass-systemd.XXXXXX)
artifacts=$PWD/test-artifacts/systemd
net=$(( $$ % 250 + 1 ))
client=hps$$c
server=hps$$s
client_ip=10.78.$net.1
server_ip=10.78.$net.2
nspawn_pid=""
leader=""
pids=()
failed=0

cleanup() {
    local status=$?
    set +e
    if [ -n "$leader" ]; then
        mkdir -p "$artifacts"
        in_container journalctl --no-pager -o short-precise >"$artifacts/journal.txt" 2>&1
    fi
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        # SIGTERM makes systemd-nspawn shut the container down in order.
        kill -TERM "$nspawn_pid"
        for _ in $(seq 1 60); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$nspawn_pid" 2>/dev/null && kill -KILL "$nspawn_pid"
        wait "$nspawn_pid" 2>/dev/null
    fi
    [ -f "$work/console.log" ] && mkdir -p "$artifacts" && cp "$work/console.log" "$artifacts/console.log"
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
    mountpoint -q "$work/root" && umount "$work/root"
    ip netns del "$client" 2>/dev/null
    ip netns del "$server" 2>/dev/null
    rm -rf "$work"
    if [ "$status" != 0 ] || [ "$failed" != 0 ]; then
        echo "test-systemd: FAILED (the container's journal: $artifacts/journal.txt)" >&2
        exit 1
    fi
}
trap cleanup EXIT

fail() {
    failed=1
    echo "test-systemd: FAIL: $*" >&2
    exit 1
}
step() { echo "== $*"; }
# A command inside the booted container (all its namespaces), with a plain environment.
in_container() { nsenter -t "$leader" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SYSTEMD_PAGER= "$@"; }
# The client namespace is the container's: the kernel rules it installs apply here.
in_client() { ip netns exec "$client" "$@"; }
now() { date +%s%N; }
seconds_since() { awk -v start="$1" -v end="$(now)" 'BEGIN { printf "%.2f", (end - start) / 1e9 }'; }
wait_until() {
    local what=$1 tries=$2
    shift 2
    for _ in $(seq 1 "$tries"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    fail "timed out after $((tries / 10)) s waiting for $what"
}
queue_bound() { in_client awk '$1 == 0 { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue; }
# Every line of the kernel's rule sets (iptables and ip6tables, all tables; and nft's whole
# rule set, which also shows what iptables-save would not) that names hallpass.
hallpass_rules() { { in_client iptables-save; in_client ip6tables-save; in_client nft list ruleset; } | grep -i hallpass || true; }
count_rules() { hallpass_rules | grep -c -- "$1" || true; }
expect_one_set_of_chains() {
    local jumps
    for family in iptables ip6tables; do
        for hook in OUTPUT:HALLPASS_OUT INPUT:HALLPASS_IN; do
            jumps=$(in_client "$family-save" | grep -c -- "^-A ${hook%%:*} -j ${hook##*:}\$" || true)
            [ "$jumps" = 1 ] || fail "$1: $family has $jumps jumps from ${hook%%:*} to ${hook##*:}, not 1: $(hallpass_rules | grep -- "^-A ${hook%%:*}")"
            [ "$(in_client "$family-save" | grep -c -- "^:${hook##*:} ")" = 1 ] || fail "$1: $family has no chain ${hook##*:} (or more than one)"
        done
    done
}
# The unit's journal, and what came after a mark (the journal only grows).
unit_journal() { in_container journalctl -u hallpass --no-pager -o cat; }
declare -A marks
mark_journal() { marks[$1]=$(unit_journal | wc -l); }
journal_since() { unit_journal | tail -n "+$((marks[$1] + 1))"; }
http() { in_client curl -sS -m 5 --resolve "$1:80:$server_ip" "http://$1/" 2>&1; }
expect_allowed() { local out; out=$(http "$1") || fail "$2: $1 should load: $out"; [ "$out" = "ok $1" ] || fail "$2: $1 answered '$out'"; }
expect_blocked() {
    local out status=0
    out=$(http "$1") || status=$?
    [ "$status" != 0 ] || fail "$2: $1 should be blocked, but loaded: $out"
    # 28 is curl's timeout: a hang, not the reset a block gives at once.
    [ "$status" != 28 ] || fail "$2: $1 hung (curl timed out) instead of being reset"
}
show() { in_container systemctl show hallpass -p "$1" --value; }
# The package's user for filter-data (packaging/hallpass.sysusers), as the install made it.
data_user=_hallpass
data_uid=""
data_gid=""
# Every id of the running filter-data (real, effective, saved, file system) must be the package's user.
expect_data_user() {
    local pid=$1 uids gids
    uids=$(in_container awk '$1 == "Uid:" { print $2, $3, $4, $5 }' "/proc/$pid/status")
    gids=$(in_container awk '$1 == "Gid:" { print $2, $3, $4, $5 }' "/proc/$pid/status")
    [ "$uids" = "$data_uid $data_uid $data_uid $data_uid" ] || fail "$2: filter-data $pid runs as uids '$uids', not $data_user ($data_uid)"
    [ "$gids" = "$data_gid $data_gid $data_gid $data_gid" ] || fail "$2: filter-data $pid runs as gids '$gids', not $data_user's group ($data_gid)"
}
data_pids() {
    in_container sh -c 'for p in /proc/[0-9]*; do tr "\0" " " <$p/cmdline 2>/dev/null | grep -q "^/usr/sbin/filter-data " && echo ${p#/proc/}; done; true'
}

step "a root file system with systemd, and the package"
echo "rootfs: $rootfs"
echo "package: $deb ($(du -h "$deb" | cut -f1))"
echo "server package: $server_deb ($(du -h "$server_deb" | cut -f1))"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for library in libnetfilter-queue1 libmnl0 libseccomp2 iptables ipset; do
    [[ ", $depends" == *", $library"* ]] || fail "the package's Depends does not name $library"
done

# The test's root: an overlay of the cached one, thrown away at the end.
mkdir -p "$work/upper" "$work/overlay-work" "$work/root"
mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$work/upper,workdir=$work/overlay-work" "$work/root"
root=$work/root
[ ! -e "$root/usr/lib/x86_64-linux-gnu/libnetfilter_queue.so.1" ] || fail "the root already has libnetfilter-queue1: the test would not show that Depends pulls it"

step "apt-get install ./$(basename "$deb") ./$(basename "$server_deb") in the container (host network, the host's apt sources)"
rm -f "$root/etc/apt/sources.list"
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] && cp "$file" "$root$file"
done
cp -r /etc/apt/apt.conf.d/. "$root/etc/apt/apt.conf.d/"
[ -d /etc/apt/trusted.gpg.d ] && cp -r /etc/apt/trusted.gpg.d/. "$root/etc/apt/trusted.gpg.d/"
[ -f /etc/apt/trusted.gpg ] && cp /etc/apt/trusted.gpg "$root/etc/apt/"
cp "$deb" "$server_deb" "$root/var/tmp/"
started=$(now)
systemd-nspawn -q -D "$root" --register=no --keep-unit --pipe -E DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends /var/tmp/$(basename "$deb") /var/tmp/$(basename "$server_deb")" \
    >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get install of the packages failed"; }
echo "installed both in $(seconds_since "$started") s"
rm -f "$root/var/tmp/$(basename "$deb")" "$root/var/tmp/$(basename "$server_deb")"
[ -e "$root/usr/lib/x86_64-linux-gnu/libnetfilter_queue.so.1" ] || fail "apt did not install libnetfilter-queue1 with the package"
[ -L "$root/etc/systemd/system/multi-user.target.wants/hallpass.service" ] || fail "the package did not enable hallpass.service"
grep -q "^ /etc/hallpass/hallpass.yaml " <(systemd-nspawn -q -D "$root" --register=no --keep-unit --pipe dpkg-query -W -f='${Conffiles}\n' hallpass 2>/dev/null) ||
    fail "/etc/hallpass/hallpass.yaml is not a conffile of the package"
for file in /lib/systemd/system/hallpass.service /usr/lib/sysusers.d/hallpass.conf /usr/share/man/man8/filterctl.8.gz /usr/share/man/man8/filter-control.8.gz \
    /usr/share/man/man8/filter-data.8.gz /usr/share/man/man5/hallpass.yaml.5.gz /usr/share/bash-completion/completions/filterctl \
    /usr/share/zsh/vendor-completions/_filterctl /usr/share/doc/hallpass/copyright; do
    [ -f "$root$file" ] || fail "the package did not install $file"
done

# The postinst made filter-data's user: a system user with its own group, no home, no login shell.
entry=$(grep "^$data_user:" "$root/etc/passwd" || true)
[ -n "$entry" ] || fail "the package did not make the user $data_user"
IFS=: read -r _ _ data_uid data_gid _ home shell <<<"$entry"
group=$(grep "^$data_user:" "$root/etc/group" || true)
[ "$(cut -d: -f3 <<<"$group")" = "$data_gid" ] || fail "$data_user's primary group is not $data_user: $entry / $group"
[ "$data_uid" -gt 0 ] && [ "$data_uid" -lt 1000 ] && [ "$data_uid" != 65534 ] || fail "$data_user is not a system user of its own: $entry"
[ "$home" = /nonexistent ] && [ "$shell" = /usr/sbin/nologin ] || fail "$data_user has a home or a shell: $entry"
echo "filter-data's user: $entry"

# The server package: its files, its conffile, its user, and what its postinst made as that user.
for file in /usr/sbin/hallpass-server /lib/systemd/system/hallpass-server.service /usr/lib/sysusers.d/hallpass-server.conf \
    /usr/share/man/man8/hallpass-server.8.gz /usr/share/doc/hallpass-server/copyright /usr/share/doc/hallpass-server/server.md.gz; do
    [ -f "$root$file" ] || fail "the hallpass-server package did not install $file"
done
dpkg-deb -c "$deb" | grep -q "hallpass-server" && fail "the machine's package carries a file of the server's: $(dpkg-deb -c "$deb" | grep hallpass-server)"
grep -q "^ /etc/hallpass/server.yaml " <(systemd-nspawn -q -D "$root" --register=no --keep-unit --pipe dpkg-query -W -f='${Conffiles}\n' hallpass-server 2>/dev/null) ||
    fail "/etc/hallpass/server.yaml is not a conffile of hallpass-server"
[ "$(dpkg-deb -f "$server_deb" Suggests)" = postgresql ] || fail "hallpass-server should suggest postgresql, not '$(dpkg-deb -f "$server_deb" Suggests)'"
server_user=_hallpass-server
entry=$(grep "^$server_user:" "$root/etc/passwd" || true)
[ -n "$entry" ] || fail "the package did not make the user $server_user"
IFS=: read -r _ _ server_uid server_gid _ home shell <<<"$entry"
[ "$(grep "^$server_user:" "$root/etc/group" | cut -d: -f3)" = "$server_gid" ] || fail "$server_user's primary group is not $server_user"
[ "$server_uid" -gt 0 ] && [ "$server_uid" -lt 1000 ] && [ "$server_uid" != "$data_uid" ] || fail "$server_user is not a system user of its own: $entry"
[ "$home" = /nonexistent ] && [ "$shell" = /usr/sbin/nologin ] || fail "$server_user has a home or a shell: $entry"
echo "the server's user: $entry"
# hallpass-server init, run by the postinst as that user: its lines are in apt's output
# (whose lines may end in CR LF: dpkg writes to a terminal when there is one).
tr -d '\r' <"$work/apt.log" >"$work/apt.txt"
fingerprint=$(sed -n 's/^fingerprint \([0-9a-f]\{64\}\)$/\1/p' "$work/apt.txt")
[ -n "$fingerprint" ] || { cat "$work/apt.log" >&2; fail "the postinst did not print the server's fingerprint (hallpass-server init)"; }
grep -q "^made a self-signed certificate: /var/lib/hallpass-server/tls/certificate.pem$" "$work/apt.txt" || fail "the postinst did not make the TLS pair"
echo "the postinst: $(grep -c . <<<"$(grep -E '^(made|database|fingerprint) ' "$work/apt.txt")") lines of hallpass-server init, fingerprint $fingerprint"
# By number: the host's names for these ids are other users'.
owned() { stat -c '%u:%g %a' "$root$1"; }
ids=$server_uid:$server_gid
[ "$(owned /var/lib/hallpass-server)" = "$ids 750" ] || fail "/var/lib/hallpass-server is $(owned /var/lib/hallpass-server)"
[ "$(owned /var/lib/hallpass-server/server.db)" = "$ids 640" ] || [ "$(owned /var/lib/hallpass-server/server.db)" = "$ids 644" ] ||
    fail "the database is $(owned /var/lib/hallpass-server/server.db)"
[ "$(owned /var/lib/hallpass-server/tls/key.pem)" = "$ids 600" ] || fail "the TLS key is $(owned /var/lib/hallpass-server/tls/key.pem)"

step "the test network: the container in $client ($client_ip), nginx and dnsmasq in $server ($server_ip)"
ip netns add "$client"
ip netns add "$server"
ip link add "hs$$c" type veth peer name "hs$$s"
ip link set "hs$$c" netns "$client"
ip link set "hs$$s" netns "$server"
ip -n "$client" link set lo up
ip -n "$server" link set lo up
ip -n "$client" addr add "$client_ip/24" dev "hs$$c"
ip -n "$server" addr add "$server_ip/24" dev "hs$$s"
ip -n "$client" addr add "fd78:$net::1/64" dev "hs$$c" nodad
ip -n "$server" addr add "fd78:$net::2/64" dev "hs$$s" nodad
ip -n "$client" link set "hs$$c" up
ip -n "$server" link set "hs$$s" up
cat >"$work/nginx.conf" <<NGINX
daemon off; master_process off; worker_processes 1; user root; pid $work/nginx.pid; error_log $work/nginx-error.log;
events { worker_connections 64; }
http { access_log off; client_body_temp_path $work/b; proxy_temp_path $work/p; fastcgi_temp_path $work/f;
  uwsgi_temp_path $work/u; scgi_temp_path $work/s;
  server { listen $server_ip:80; location / { return 200 "ok \$host\n"; } } }
NGINX
ip netns exec "$server" nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)
ip netns exec "$server" dnsmasq --no-daemon --no-resolv --no-hosts --bind-interfaces --listen-address="$server_ip" \
    --address="/test/$server_ip" --local-ttl=1 --user=root --pid-file="$work/dnsmasq.pid" 2>"$work/dnsmasq.log" &
pids+=($!)
wait_until "nginx to listen" 50 in_client curl -s -m 1 "http://$server_ip/"
echo "nameserver $server_ip" >"$root/etc/resolv.conf"

step "bundles: version 1 blocks blocked.test; version 2 also newly.test; version 3 is signed with a key the machine does not trust"
mkdir -p "$work/lists/games" "$work/published"
key=$("$filterctl" bundle keygen --out "$work/school.pem")
"$filterctl" bundle keygen --out "$work/stranger.pem" >/dev/null
publish() {
    local version=$1 signer=$2
    shift 2
    printf '%s\n' "$@" >"$work/lists/games/domains"
    rm -rf "$work/published/bundle"
    "$filterctl" bundle build --key "$work/$signer.pem" --version "$version" --out "$work/published/bundle" "$work/lists/" >/dev/null 2>&1 ||
        fail "cannot build bundle $version"
}
publish 1 school blocked.test

step "boot systemd in the container"
started=$(now)
systemd-nspawn --boot -D "$root" --register=no --keep-unit --console=read-only --resolv-conf=off \
    --network-namespace-path="/run/netns/$client" --capability=CAP_NET_ADMIN,CAP_NET_RAW \
    --bind-ro="$work/published:/srv/hallpass" >"$work/console.log" 2>&1 </dev/null &
nspawn_pid=$!
# The container's init: systemd-nspawn's child that runs systemd (earlier children are helpers that go away).
find_leader() {
    local child
    for child in $(cat "/proc/$nspawn_pid/task/$nspawn_pid/children" 2>/dev/null); do
        [ "$(cat "/proc/$child/comm" 2>/dev/null)" = systemd ] && leader=$child && return 0
    done
    return 1
}
wait_until "systemd-nspawn to start the container's systemd" 100 find_leader
wait_until "the container's systemd to listen" 100 in_container test -S /run/systemd/private
state=$(in_container systemctl is-system-running --wait || true)
echo "systemd: $state after $(seconds_since "$started") s ($(in_container systemctl --version | head -1))"
[ "$state" = running ] || [ "$state" = degraded ] || fail "the container's systemd did not come up: $state"
[ "$state" = running ] || in_container systemctl --failed --no-legend

step "installed enabled, skipped until a rule source is configured"
[ "$(in_container systemctl is-enabled hallpass)" = enabled ] || fail "hallpass is not enabled after the install"
[ "$(show ActiveState)" = inactive ] || fail "hallpass should not run before it is configured: $(show ActiveState)"
[ "$(show Result)" = exec-condition ] || fail "systemd should have skipped hallpass by its ExecCondition, Result=$(show Result)"
unit_journal | grep -q "hallpass is not configured yet" ||
    fail "the journal does not say why hallpass did not start"
[ -z "$(hallpass_rules)" ] || fail "kernel rules exist though hallpass never ran"

step "hallpass-server: started at boot as $server_user, answers on 8443 with the pinned certificate"
server_show() { in_container systemctl show hallpass-server -p "$1" --value; }
server_journal() { in_container journalctl -u hallpass-server --no-pager -o cat; }
[ "$(in_container systemctl is-enabled hallpass-server)" = enabled ] || fail "hallpass-server is not enabled after the install"
[ "$(server_show ActiveState)" = active ] || fail "hallpass-server is $(server_show ActiveState) after the boot: $(server_journal)"
# What the postinst printed is what the service presents: curl accepts only that key
# (--pinnedpubkey: base64 of the SHA-256 of the SubjectPublicKeyInfo, the fingerprint's bytes).
pin="sha256//$(xxd -r -p <<<"$fingerprint" | base64)"
server_get() { in_client curl -sS -m 5 -k --pinnedpubkey "$pin" "$@"; }
wait_until "hallpass-server to answer on 127.0.0.1:8443" 100 server_get -f -o /dev/null https://127.0.0.1:8443/health
# The counters, for a token of role metrics (what a school gives Prometheus).
metrics_token=$(in_container hallpass-server api-token create --role metrics) || fail "hallpass-server api-token create failed: $metrics_token"
status=$(server_get -o "$work/metrics" -w '%{http_code}' https://127.0.0.1:8443/metrics) || fail "GET /metrics failed"
[ "$status" = 401 ] || fail "GET /metrics without a token answered $status, not 401"
status=$(server_get -o "$work/metrics" -w '%{http_code}' -H "Authorization: Bearer $metrics_token" https://127.0.0.1:8443/metrics) || fail "GET /metrics failed"
[ "$status" = 200 ] && grep -q "^# TYPE hallpass_server_" "$work/metrics" || fail "GET /metrics answered $status: $(head -5 "$work/metrics")"
in_client curl -sS -m 5 -k --pinnedpubkey "sha256//$(head -c 32 /dev/zero | base64)" https://127.0.0.1:8443/health >/dev/null 2>&1 &&
    fail "curl accepted the server's certificate with another pin: the pin check proves nothing"
server_pid=$(server_show MainPID)
[ "$(in_container awk '$1 == "Uid:" { print $2, $3, $4, $5 }' "/proc/$server_pid/status")" = "$server_uid $server_uid $server_uid $server_uid" ] ||
    fail "hallpass-server ($server_pid) does not run as $server_user"
[ "$(in_container awk '$1 == "CapEff:" || $1 == "CapBnd:" { print $2 }' "/proc/$server_pid/status" | sort -u)" = 0000000000000000 ] ||
    fail "hallpass-server has capabilities: $(in_container grep ^Cap "/proc/$server_pid/status")"
server_journal | grep -q "fingerprint $fingerprint" || fail "the service's journal does not name the fingerprint: $(server_journal)"
enrol() { server_get -o "$work/enrol.json" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$1" https://127.0.0.1:8443/api/v1/enrol; }
public_key=$(openssl genpkey -algorithm ed25519 | openssl pkey -pubout -outform DER | tail -c 32 | base64)
status=$(enrol "{\"token\": \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\", \"publicKey\": \"$public_key\", \"hostname\": \"lab1-pc01\", \"version\": \"test\"}")
[ "$status" = 401 ] && grep -q '"token-unknown"' "$work/enrol.json" || fail "an unknown enrolment token got $status: $(cat "$work/enrol.json")"
echo "an unknown token: $status $(cat "$work/enrol.json")"
server_exposure() { in_container systemd-analyze security hallpass-server --no-pager | sed -n 's/^→ Overall exposure level for hallpass-server.service: \([0-9.]*\) .*/\1/p'; }
exposure=$(server_exposure)
echo "systemd-analyze security hallpass-server: exposure $exposure"
# The bound of 'OK' is 3.9 (systemd 252); what this unit reached is below 2: a change that gives it up fails here.
awk -v e="$exposure" 'BEGIN { exit !(e != "" && e + 0 <= 2.0) }' ||
    fail "hallpass-server's exposure is $exposure, not at most 2.0: $(in_container systemd-analyze security hallpass-server --no-pager | grep -v '^  ✓')"

step "hallpass-server token create as root, with the service's configuration: the running service takes the token once"
token=$(in_container hallpass-server token create --room lab1 --uses 1 --expires 1h) || fail "hallpass-server token create failed: $token"
[[ "$token" =~ ^hp1\.$fingerprint\.[A-Za-z0-9_-]{43}$ ]] || fail "token create printed '$token', not hp1.<the fingerprint>.<secret>"
request="{\"token\": \"${token##*.}\", \"publicKey\": \"$public_key\", \"hostname\": \"lab1-pc01\", \"version\": \"test\"}"
status=$(enrol "$request")
[ "$status" = 201 ] || fail "the service refused the token token create made: $status $(cat "$work/enrol.json")"
machine=$(sed -n 's/.*"machine" *: *"\(m-[a-z2-7]*\)".*/\1/p' "$work/enrol.json")
[ -n "$machine" ] || fail "the enrolment answered no machine id: $(cat "$work/enrol.json")"
# A second machine (a key of its own) with the same token.
status=$(enrol "${request/$public_key/$(openssl genpkey -algorithm ed25519 | openssl pkey -pubout -outform DER | tail -c 32 | base64)}")
[ "$status" = 410 ] && grep -q '"token-used-up"' "$work/enrol.json" || fail "a token of one use was taken twice: $status $(cat "$work/enrol.json")"
in_container hallpass-server machine list | grep -q "^$machine .*lab1 .*lab1-pc01 " || fail "machine list does not show $machine: $(in_container hallpass-server machine list)"
echo "enrolled $machine with it; the second use: 410 token-used-up"
left=$(in_container find /var/lib/hallpass-server ! -user "$server_user")
[ -z "$left" ] || fail "root's commands left files the service's user does not own: $left"

step "systemctl stop hallpass-server: clean, and start again"
started=$(now)
in_container systemctl stop hallpass-server || fail "systemctl stop hallpass-server failed"
echo "systemctl stop hallpass-server took $(seconds_since "$started") s"
[ "$(server_show ActiveState)" = inactive ] && [ "$(server_show Result)" = success ] ||
    fail "hallpass-server did not stop cleanly: $(server_show ActiveState), Result=$(server_show Result): $(server_journal | tail -5)"
server_get -o /dev/null https://127.0.0.1:8443/metrics 2>/dev/null && fail "something still answers on 8443 after the stop"
in_container systemctl start hallpass-server || fail "systemctl start hallpass-server failed"
wait_until "hallpass-server to answer again" 100 server_get -o /dev/null https://127.0.0.1:8443/metrics
in_container hallpass-server machine list | grep -q "^$machine " || fail "$machine is gone after the restart"

step "configure (closed mode) and start"
in_container sh -c "cat >/etc/hallpass/hallpass.yaml" <<YAML
queue:
  failMode: closed
rules:
  source: file:///srv/hallpass/bundle/
  trustedKeys: [ "$key" ]
policy:
  block: [ games ]
YAML
in_container filterctl config check >/dev/null || fail "the test configuration does not pass 'filterctl config check'"
started=$(now)
in_container systemctl start hallpass || fail "systemctl start hallpass failed"
# Type=notify: systemctl start returns once filter-control said READY=1, which it says only
# when filter-data filters; so the queue is bound and the ready line is in the journal already.
[ "$(show Type)" = notify ] || fail "the unit should be Type=notify, is $(show Type)"
queue_bound || fail "systemctl start returned (the unit active) before filter-data had the queue"
said_ready() { unit_journal | grep -q "ready: filter-data filters with rules version 1"; }
# (The line and READY=1 go out together; the journal may take a moment to show the line.)
wait_until "filter-control's ready line in the journal" 50 said_ready
echo "filtering $(seconds_since "$started") s after systemctl start"
[ "$(show ActiveState)" = active ] || fail "hallpass is $(show ActiveState) after start"
data=$(data_pids)
[ "$(wc -w <<<"$data")" = 1 ] || fail "expected one filter-data after start, found pids '$data'"
expect_data_user "$data" "after start"
echo "filter-data $data runs as $data_user (uid $data_uid, gid $data_gid)"
unit_journal | grep -q "queue.user" && fail "filter-control logged a problem with filter-data's user: $(unit_journal | grep queue.user)"
in_container filterctl status | grep -q "rules:       version 1" || fail "filterctl status does not show rules version 1: $(in_container filterctl status)"
expect_one_set_of_chains "after start"
expect_allowed allowed.test "after start"
expect_blocked blocked.test "after start"
answer=$(in_client dig +short +time=2 +tries=1 "@$server_ip" blocked.test A)
[ "$answer" = 127.0.0.1 ] || fail "the DNS answer for blocked.test should point at the block page (127.0.0.1), got '$answer'"
answer=$(in_client dig +short +time=2 +tries=1 "@$server_ip" allowed.test A)
[ "$answer" = "$server_ip" ] || fail "the DNS answer for allowed.test should be $server_ip, got '$answer'"

step "systemctl reload with a new bundle: installed"
publish 2 school blocked.test newly.test
mark_journal reload-good
in_container systemctl reload hallpass || fail "systemctl reload failed for a good bundle: $(journal_since reload-good)"
journal_since reload-good | grep -q "rules version 2 now in force" || fail "the journal does not show the reload's result: $(journal_since reload-good)"
expect_blocked newly.test "after the reload"
expect_allowed allowed.test "after the reload"

step "systemctl reload with a bundle signed by an unknown key: refused, and says why"
publish 3 stranger blocked.test
mark_journal reload-refused
status=0
in_container systemctl reload hallpass 2>"$work/reload.err" || status=$?
[ "$status" != 0 ] || fail "systemctl reload succeeded for a bundle signed by an unknown key"
echo "systemctl reload exited $status: $(head -1 "$work/reload.err")"
refusal=$(journal_since reload-refused)
grep -q "reload refused" <<<"$refusal" || fail "the journal does not show the refusal: $refusal"
in_container journalctl -u hallpass -t filterctl -o cat | grep -q "reload refused" ||
    fail "filterctl reload (ExecReload) did not write the refusal into the journal"
grep -qi "key" <<<"$refusal" || fail "the journal's refusal does not name the key problem: $refusal"
echo "journal: $(grep -m1 "reload refused" <<<"$refusal")"
[ "$(show ActiveState)" = active ] || fail "a refused reload stopped hallpass: $(show ActiveState)"
in_container filterctl status | grep -q "rules:       version 2" || fail "the refused bundle changed the rules in force"
expect_blocked newly.test "after the refused reload"

# systemctl stop, at the moment the caller chose: the stop must end cleanly (not by
# TimeoutStopSec and SIGKILL), leave no filter-data and no kernel rule, and take at most
# 0.5 s (issue 27's bound: a stop 0.25 s after filter-data started took 2.1 s, because the
# policy set handed over at the start was lost and its caller waited 2 s for an answer).
stop_bound=0.5
# The unit's TimeoutStopSec in seconds (systemctl shows it as "15s", "1min 30s", "500ms").
stop_timeout() {
    show TimeoutStopUSec | awk '{ for (i = 1; i <= NF; i++) { v = $i + 0
        if ($i ~ /ms$/) s += v / 1000; else if ($i ~ /min$/) s += v * 60; else if ($i ~ /h$/) s += v * 3600; else s += v }
        print s }'
}
stop_unit() {
    local situation=$1 took
    mark_journal "stop $situation"
    started=$(now)
    in_container systemctl stop hallpass || fail "systemctl stop ($situation) failed: $(journal_since "stop $situation")"
    took=$(seconds_since "$started")
    echo "systemctl stop $situation took $took s"
    # systemd's own bound first: past TimeoutStopSec it SIGKILLs, and the stop is not clean.
    awk -v took="$took" -v limit="$(stop_timeout)" 'BEGIN { exit !(took < limit) }' ||
        fail "systemctl stop $situation took $took s, systemd's TimeoutStopSec ($(show TimeoutStopUSec)): $(journal_since "stop $situation")"
    [ "$(show ActiveState)" = inactive ] || fail "hallpass is $(show ActiveState) after the stop $situation"
    [ "$(show Result)" = success ] || fail "the stop $situation did not end cleanly: Result=$(show Result) (timeout: filter-control did not end within TimeoutStopSec): $(journal_since "stop $situation")"
    [ -z "$(data_pids)" ] || fail "filter-data is still running after the stop $situation"
    [ -z "$(hallpass_rules)" ] || fail "kernel rules are left after the stop $situation: $(hallpass_rules)"
    # filter-control's own line (MESSAGE as swift-log wrote it to the journal), not ExecStopPost's.
    journal_since "stop $situation" | grep -qx "kernel rules removed" || fail "the journal does not show the rules removed by the stop $situation: $(journal_since "stop $situation")"
    awk -v took="$took" -v bound="$stop_bound" 'BEGIN { exit !(took <= bound) }' ||
        fail "systemctl stop $situation took $took s; a stop must return within $stop_bound s at any moment (issue 27): $(journal_since "stop $situation")"
}
# The unit's filter-data, once there is one (and it is not the one given).
new_data_pid() { local pid; pid=$(data_pids); [ -n "$pid" ] && [ "$pid" != "${1:-}" ] && echo "$pid"; }

step "systemctl stop in a steady state: within $stop_bound s, filter-data gone, no kernel rule left"
stop_unit "in a steady state"
# Closed mode, and still not cut off: nothing of hallpass is in the way.
expect_allowed blocked.test "after stop (no filter)"

step "systemctl stop right after systemctl start (which returns once filter-data filters)"
in_container systemctl start hallpass || fail "systemctl start failed"
stop_unit "right after a start"

step "systemctl stop as soon as filter-data is there, before the unit is ready"
in_container systemctl start --no-block hallpass
wait_until "filter-data to start" 100 new_data_pid
echo "the unit is $(show ActiveState) when the stop begins"
stop_unit "right after filter-data started"

step "systemctl stop during a reload (SIGHUP) of a large bundle"
in_container systemctl start hallpass || fail "systemctl start failed"
# 200,000 names more: fetching and checking the bundle and filter-data mapping it take a
# while, so the stop comes in the middle of the reload.
publish 4 school blocked.test newly.test
awk 'BEGIN { for (i = 0; i < 200000; i++) printf "site%d.example.test\n", i }' >>"$work/lists/games/domains"
rm -rf "$work/published/bundle"
"$filterctl" bundle build --key "$work/school.pem" --version 4 --out "$work/published/bundle" "$work/lists/" >/dev/null 2>&1 || fail "cannot build the large bundle 4"
mark_journal sighup
in_container systemctl kill --signal=SIGHUP --kill-whom=main hallpass
reloading() { journal_since sighup | grep -q "SIGHUP: reloading"; }
wait_until "the reload to begin" 50 reloading
stop_unit "during a reload"
# Whether it came in the middle: the reload's result after the stop began, or before.
unit_journal | sed -n "$((marks[sighup] + 1)),$((marks["stop during a reload"]))p" | grep -q "rules version 4 now in force" &&
    echo "(the reload had ended before the stop began)" || echo "(the stop began in the middle of the reload)"

step "systemctl stop during a restart delay, after filter-data was killed again and again"
in_container systemctl start hallpass || fail "systemctl start failed"
# Each kill of a filter-data that ran for less than 30 s doubles the delay before the
# next start (50 ms, 100, 200, 400, 800): the fifth leaves 0.8 s in which nothing runs.
mark_journal restarts
data=$(data_pids)
for kill in 1 2 3 4 5; do
    # (The container has no kill program; sh's own kill.)
    in_container sh -c "kill -KILL $data"
    exited() { [ "$(journal_since restarts | grep -c "filter-data exited (killed by signal 9); restarting")" -ge "$kill" ]; }
    wait_until "filter-control to see kill $kill" 50 exited
    [ "$kill" = 5 ] && break
    wait_until "a filter-data after kill $kill" 100 new_data_pid "$data"
    data=$(new_data_pid "$data")
done
stop_unit "during a restart delay"
journal_since "stop during a restart delay" | grep -q "filter-data started" && fail "filter-data was started again during the stop"

step "chains left by an earlier run are replaced at start, not doubled"
in_client iptables -N HALLPASS_OUT
in_client iptables -A HALLPASS_OUT -p tcp --dport 9 -j REJECT
in_client iptables -I OUTPUT -j HALLPASS_OUT
mark_journal stale
in_container systemctl start hallpass || fail "systemctl start failed over stale chains"
wait_until "filter-data to bind the queue" 100 queue_bound
journal_since stale | grep -q "kernel rules of an earlier run found; replacing them" || fail "the start did not notice the stale chains: $(journal_since stale)"
expect_one_set_of_chains "after a start over stale chains"
[ "$(count_rules "--dport 9 ")" = 0 ] || fail "the stale rule is still in HALLPASS_OUT"
expect_blocked blocked.test "after a start over stale chains"

step "kill -9 of filter-control: systemd removes the chains and starts it again"
main=$(show MainPID)
restarts=$(show NRestarts)
old_data=$(data_pids)
mark_journal kill
started=$(now)
in_container systemctl kill --signal=SIGKILL --kill-whom=main hallpass
restarted() { [ "$(show MainPID)" != "$main" ] && [ "$(show MainPID)" != 0 ] && [ "$(show ActiveState)" = active ] && queue_bound; }
wait_until "systemd to start hallpass again" 200 restarted
echo "filtering again $(seconds_since "$started") s after the SIGKILL (RestartSec=$(show RestartUSec))"
[ "$(show NRestarts)" = $((restarts + 1)) ] || fail "NRestarts went from $restarts to $(show NRestarts)"
kill_log=$(journal_since kill)
grep -q "code=killed, status=9/KILL" <<<"$kill_log" || fail "the journal does not show the SIGKILL: $kill_log"
grep -q "filter-control: kernel rules removed" <<<"$kill_log" || fail "ExecStopPost did not remove the rules after the SIGKILL: $kill_log"
data=$(data_pids)
[ "$(wc -w <<<"$data")" = 1 ] && [ "$data" != "$old_data" ] || fail "expected one new filter-data, found pids '$data' (before: '$old_data')"
expect_data_user "$data" "after the restart"
expect_one_set_of_chains "after the restart"
expect_blocked blocked.test "after the restart"
expect_allowed allowed.test "after the restart"

step "journalctl -u hallpass"
journal=$(unit_journal)
for line in "hallpass is not configured yet" "kernel rules installed" "rules version 2 now in force" \
    "reload refused" "filter-data stopped" "kernel rules removed" "Main process exited, code=killed, status=9/KILL" \
    "Scheduled restart job"; do
    grep -qF "$line" <<<"$journal" || fail "journalctl -u hallpass lacks '$line'"
done
# The records' structured fields: the queue and the fail mode of the kernel rules.
in_container journalctl -u hallpass --no-pager -o cat HALLPASS_QUEUE=0 HALLPASS_FAILMODE=closed | grep -qx "kernel rules installed" ||
    fail "the journal has no 'kernel rules installed' with HALLPASS_QUEUE=0 HALLPASS_FAILMODE=closed"
echo "$(wc -l <<<"$journal") lines, the whole story (kept in $artifacts/journal.txt)"

step "apt-get purge of both: the services stop, the state and the configuration go"
[ "$(server_show ActiveState)" = active ] || fail "hallpass-server is $(server_show ActiveState) before the purge"
in_container apt-get purge -y -qq hallpass hallpass-server >"$work/purge.log" 2>&1 || { cat "$work/purge.log" >&2; fail "apt-get purge failed"; }
[ -z "$(data_pids)" ] || fail "filter-data still runs after the purge"
[ -z "$(hallpass_rules)" ] || fail "kernel rules are left after the purge: $(hallpass_rules)"
[ "$(server_show ActiveState)" = inactive ] || fail "hallpass-server is $(server_show ActiveState) after the purge"
in_container sh -c 'for p in /proc/[0-9]*; do tr "\0" " " <$p/cmdline 2>/dev/null | grep -q "^/usr/sbin/hallpass-server " && exit 1; done; exit 0' ||
    fail "hallpass-server still runs after the purge"
for path in /var/lib/hallpass /etc/hallpass /lib/systemd/system/hallpass.service /etc/systemd/system/multi-user.target.wants/hallpass.service \
    /var/lib/hallpass-server /usr/sbin/hallpass-server /lib/systemd/system/hallpass-server.service /etc/systemd/system/multi-user.target.wants/hallpass-server.service; do
    in_container test ! -e "$path" || fail "$path is still there after the purge"
done

echo "test-systemd: the package under systemd $(in_container systemctl --version | head -1 | cut -d' ' -f2): ok"
