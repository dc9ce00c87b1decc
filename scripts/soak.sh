#!/usr/bin/env bash
# Soak: hallpass under mixed traffic for a long time while its rules change
# every 10 s and filter-data is killed every 5 min, for BENCHMARKS.md
# (release build as `make` builds it, root).
#   scripts/soak.sh [DURATION]       (default 1h; 90s, 6m, 1h, or seconds; over
#                                     5:30, the first kill, unless the kills
#                                     below come sooner)
#
# Environment (for short test runs):
#   SOAK_RELOAD_INTERVAL  seconds between reloads (default 10)
#   SOAK_KILL_INTERVAL    seconds between SIGKILLs of filter-data (default 300)
#   SOAK_KILL_OFFSET      each kill comes this many seconds after its interval,
#                         between two samples (default 30: 5:30, 10:30, ...)
#   SOAK_SAMPLE_INTERVAL  seconds between memory and descriptor samples (default 60)
#   SOAK_PAUSE            seconds each traffic generator waits between requests (default 0.05)
#   SOAK_MARGIN           seconds around each reload in which names that flip are
#                         not judged, and after filter-data is back from a kill
#                         before requests count again (default 1)
#
# Two network namespaces joined by a veth pair (10.81.0.1 client, .2 server;
# nothing leaves the machine). In the server: nginx (HTTP on 80, HTTPS on
# 443, the rule server on 8443 with a certificate from a test CA), dnsmasq
# (every .test name is the server) and the integration tests' aioquic
# server (UDP 443). In the client: filter-control in closed mode, fetching
# signed bundles from the rule server as a school machine does
# (rules.source https://, rules.caFile the test CA), with `policy.unknown:
# ask` and the lookup folder next to the bundle; four traffic generators
# (scripts/lib/soak-traffic.py: HTTP, HTTPS, QUIC, DNS with dig), each
# cycling through the classes of names in the plan below.
#
# Every SOAK_RELOAD_INTERVAL a new version is published (versions only go
# up: a rollback is refused), alternating the contents of bundle A and B,
# and hallpass.yaml's policy alternates with it; then `filterctl reload`,
# whose exit status and output are logged. Every SOAK_KILL_INTERVAL
# filter-data gets SIGKILL. Every SOAK_SAMPLE_INTERVAL: VmRSS and open
# descriptors of filter-control and filter-data, and `filterctl status --json`.
#
# At the end scripts/lib/soak-report.py prints the summary (also
# bench-out/soak/summary.txt and summary.json, next to the raw logs) and
# sets the exit status: non-zero when a goal with a definite answer failed:
#   - crashes other than the kills: 0 (filter-data exits not caused by the
#     soak, hangs the supervisor had to kill, filter-control deaths);
#   - blocked requests that got through: 0 (names blocked in both bundles at
#     any time, also during the kills; names that flip outside the margins);
#   - reloads that failed: 0;
#   - every kill the schedule had was made (the n-th, n = 1, 2, ..., at
#     n * SOAK_KILL_INTERVAL + SOAK_KILL_OFFSET s, if that is before the end:
#     a run no longer than 5:30 with the defaults has none, and fails), found
#     filter-data (the child of the running filter-control), filter-control
#     saw it die of SIGKILL, and a new one said hello;
#   - the memory samples found filter-data (and filter-control) at least once;
#   - RSS and descriptors of both processes, mean of the last 10 minutes
#     within 10 % of the mean of minutes 5-15 (needs 25 minutes or more).
# Allowed requests that failed outside the kill windows are counted and
# listed, with no goal.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

duration=${1:-1h}
[[ "$duration" =~ ^[0-9]+[hms]?$ ]] && [ "${duration%[hms]}" -gt 0 ] || { echo "soak.sh: DURATION is like 90s, 6m, 1h or 360" >&2; exit 64; }
case "$duration" in
    *h) duration=$(( ${duration%h} * 3600 )) ;;
    *m) duration=$(( ${duration%m} * 60 )) ;;
    *s) duration=${duration%s} ;;
esac
reload_interval=${SOAK_RELOAD_INTERVAL:-10}
kill_interval=${SOAK_KILL_INTERVAL:-300}
kill_offset=${SOAK_KILL_OFFSET:-30}
sample_interval=${SOAK_SAMPLE_INTERVAL:-60}
pause=${SOAK_PAUSE:-0.05}
margin=${SOAK_MARGIN:-1}

bench_name=soak
bench_net=81
bench_queue=8
bench_build_flags="-c release --static-swift-stdlib"
bench_https=1
bench_store=""
source scripts/lib/bench-network.sh
bench_setup
# filter-data (uid 65534 once sandboxed) opens each new version under
# rules.directory: the folders above it must let it through, as
# /var/lib/hallpass does (mktemp made this one 0700).
chmod 755 "$work"
out=$root/bench-out/soak
rm -rf "$out" && mkdir -p "$out"
bench_tls
bench_nginx
bench_dns
bench_quic_server
python=$root/.build/test-venv/bin/python
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the work tree

# The names, and what each bundle and policy make of them. Bundle A goes out
# with odd versions and policy A, bundle B with even versions and policy B.
#   never.test  adult in A, violence in B: blocked by both, through different categories
#   mal.test    malware in both: blocked by both
#   good.test   education in both: allowed by both
#   fa.test     games in both: blocked by policy A only
#   fb.test     social in both: blocked by policy B only
#   fc.test     adult in A, education in B: blocked by bundle A only
#   pd.test     in policy A's deny list; adult in B but in policy B's allow list
#   q*.learn.test, q*.risk.test, q*.play.test: in no bundle; the lookup folder
#               says education, malware, games (ttl lookupTTL), so they are asked
#               about again and again: allowed, blocked, blocked by A only
#   *.nobody.test  a new name each time, unknown to the lookup too: askDefault (block)
cat >"$work/plan.json" <<JSON
{
  "run": "$$",
  "lookupTTL": 20,
  "classes": [
    {"class": "never",   "base": "never.test",  "A": "block", "B": "block"},
    {"class": "malware", "base": "mal.test",    "A": "block", "B": "block"},
    {"class": "good",    "base": "good.test",   "A": "allow", "B": "allow"},
    {"class": "flip-policy-a", "base": "fa.test", "A": "block", "B": "allow"},
    {"class": "flip-policy-b", "base": "fb.test", "A": "allow", "B": "block"},
    {"class": "flip-bundle",   "base": "fc.test", "A": "block", "B": "allow"},
    {"class": "flip-lists",    "base": "pd.test", "A": "block", "B": "allow"},
    {"class": "ask-good",  "base": "learn.test", "names": "pool", "lookup": "education", "A": "allow", "B": "allow"},
    {"class": "ask-bad",   "base": "risk.test",  "names": "pool", "lookup": "malware",   "A": "block", "B": "block"},
    {"class": "ask-flip",  "base": "play.test",  "names": "pool", "lookup": "games",     "A": "block", "B": "allow"},
    {"class": "ask-nobody", "base": "nobody.test", "names": "fresh", "A": "block", "B": "block"}
  ]
}
JSON
for bundle in A B; do mkdir -p "$work/lists/$bundle"; done
printf 'never.test\nfc.test\n' >"$work/lists/A/adult.txt"
printf 'mal.test\n' | tee "$work/lists/A/malware.txt" >"$work/lists/B/malware.txt"
printf 'good.test\n' >"$work/lists/A/education.txt"
printf 'fa.test\n' | tee "$work/lists/A/games.txt" >"$work/lists/B/games.txt"
printf 'fb.test\n' | tee "$work/lists/A/social.txt" >"$work/lists/B/social.txt"
printf 'never.test\n' >"$work/lists/B/violence.txt"
printf 'good.test\nfc.test\n' >"$work/lists/B/education.txt"
printf 'pd.test\n' >"$work/lists/B/adult.txt"
policy_A='  block: [ adult, games, malware ]
  deny: [ "pd.test" ]'
policy_B='  block: [ violence, social, malware, adult ]
  allow: [ "pd.test" ]'
"$python" scripts/lib/soak-traffic.py lookup --plan "$work/plan.json" "$work/www/lookup"

trusted_key=$("$bin/filterctl" bundle keygen --out "$work/signing.pem")
socket=$work/control.sock
publications=0

# Publishes VERSION (bundle A when odd, B when even) and the matching
# policy in hallpass.yaml, as a school's publishing job would: the bundle
# folder switched in one step (a link renamed over the old one, so that no
# request, a lookup's included, ever finds no folder), the lookup folder
# beside it.
publish() {
    local version=$1 bundle
    bundle=$([ $((version % 2)) = 1 ] && echo A || echo B)
    local folder=$work/www/v$version
    "$bin/filterctl" bundle build --key "$work/signing.pem" --version "$version" --expires 2d --out "$folder" \
        "$work/lists/$bundle"/*.txt >>"$work/publish.log" 2>&1 || return 1
    ln -s ../lookup "$folder/lookup" || return 1
    # nginx's ETag is the manifest's modification time (seconds) and size:
    # each publication gets a later time than the last, or a manifest of the
    # same size published within the same second would look unchanged.
    publications=$((publications + 1))
    touch -d "@$(( ${EPOCHREALTIME%.*} + 10 * publications ))" "$folder/manifest" || return 1
    ln -sfn "v$version" "$work/www/bundle.new" && mv -T "$work/www/bundle.new" "$work/www/bundle" || return 1
    rm -rf "$work/www/v$((version - 2))"
    local policy_var=policy_$bundle
    cat >"$work/hallpass.yaml.new" <<YAML
queue:
  number: $bench_queue
  failMode: closed
  user: nobody
rules:
  directory: $work/lib
  source: https://$server_ip:8443/bundle/
  trustedKeys: [ "$trusted_key" ]
  caFile: $work/ca.pem
  refresh: 24h
policy:
${!policy_var}
  unknown: ask
  askDefault: block
  askTimeout: 2s
blockPage:
  ca: $work/blockpage-ca
log:
  file: $work/audit.jsonl
  journald: false
admin:
  socket: $socket
YAML
    mv "$work/hallpass.yaml.new" "$work/hallpass.yaml" || return 1
}

publish 1
bench_hallpass
echo "$control_pid" >"$work/control.pid"
bench_wait_for "filter-data with rules version 1" grep -q "is filtering with rules version 1" "$work/filter-control.log"

# Each protocol sees the rules before the soak starts: an allowed and a blocked name.
check() {  # PROTO NAME EXPECTED
    local got
    got=$(ip netns exec "$client" "$python" - "$1" "$server_ip" "$2" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("traffic", "scripts/lib/soak-traffic.py")
traffic = importlib.util.module_from_spec(spec); spec.loader.exec_module(traffic)
proto, server, name = sys.argv[1:]
result = {"http": lambda: traffic.http(server, name, False), "https": lambda: traffic.http(server, name, True),
          "quic": lambda: traffic.quic(server, name), "dns": lambda: traffic.dns(server, name)}[proto]()
print(result[0])
PY
)
    if [ "$got" != "$3" ]; then
        echo "soak.sh: $1 $2 gave '$got', expected '$3'; is hallpass filtering?" >&2
        cat "$work/filter-control.log" >&2
        exit 1
    fi
}
for proto in http https quic; do
    check "$proto" check.good.test ok
    check "$proto" check.never.test refused
done
check dns check.good.test ok
check dns check.never.test blockpage

start=$EPOCHREALTIME
end=$(awk -v s="$start" -v d="$duration" 'BEGIN { printf "%.6f", s + d }')
at() { awk -v s="$start" -v o="$1" 'BEGIN { printf "%.6f", s + o }'; }
# Sleeps until the time given, a second at most at a time, so that no sleep outlives the cleanup.
sleep_until() {
    local left
    while left=$(awk -v t="$1" -v n="$EPOCHREALTIME" 'BEGIN { d = t - n; printf "%.3f", (d > 1 ? 1 : d) }') && [ "${left#-}" = "$left" ] && [ "$left" != 0.000 ]; do
        sleep "$left"
    done
}
before_end() { awk -v t="$1" -v e="$end" 'BEGIN { exit !(t < e) }'; }
minutes=$(awk -v d="$duration" 'BEGIN { printf "%.1f", d / 60 }')
echo "soak: $minutes min from $(date -d "@${start%.*}" '+%F %T'); reload every ${reload_interval} s, kill every ${kill_interval} s (+${kill_offset} s), sample every ${sample_interval} s"

servers=("${bench_pids[@]}")
generators=()
for proto in http https quic dns; do
    ip netns exec "$client" "$python" scripts/lib/soak-traffic.py run --proto "$proto" --server "$server_ip" \
        --plan "$work/plan.json" --out "$work/attempts-$proto.tsv" --until "$end" --pause "$pause" 2>"$work/traffic-$proto.log" &
    bench_pids+=($!)
    generators+=($!)
done

# start end version bundle exit output
reloader() {
    local version=1 n=1 t first status output
    while t=$(at $((n * reload_interval))) && before_end "$t"; do
        sleep_until "$t"
        version=$((version + 1))
        first=$EPOCHREALTIME
        status=0
        if publish "$version"; then
            first=$EPOCHREALTIME
            output=$("$bin/filterctl" reload --socket "$socket" 2>&1) || status=$?
        else
            status=1
            output="publishing version $version failed (see publish.log); no reload"
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$first" "$EPOCHREALTIME" "$version" "$([ $((version % 2)) = 1 ] && echo A || echo B)" \
            "$status" "$(echo "$output" | tr '\t\n' '  ')" >>"$work/reloads.tsv"
        n=$((n + 1))
    done
}

# time pid (of the filter-data killed; - when the running filter-control had
# none, which fails the run: a kill that finds nothing tests nothing)
killer() {
    local n=1 t pid
    while t=$(at $((n * kill_interval + kill_offset))) && before_end "$t"; do
        sleep_until "$t"
        pid=$(bench_data_pid "$(cat "$work/control.pid")" || true)
        if [ -n "$pid" ]; then
            kill -KILL "$pid" || true
            printf '%s\t%s\n' "$EPOCHREALTIME" "$pid" >>"$work/kills.tsv"
        else
            printf '%s\t-\n' "$EPOCHREALTIME" >>"$work/kills.tsv"
        fi
        n=$((n + 1))
    done
}

# minute time control_pid rss_kb fds data_pid rss_kb fds (- when not running)
sampler() {
    local n=1 t control data
    proc() {  # pid: VmRSS in kB and open descriptors
        local rss fds
        rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || true
        fds=$(ls "/proc/$1/fd" 2>/dev/null | wc -l) || true
        [ -n "$rss" ] && printf '%s\t%s' "$rss" "$fds" || printf -- '-\t-'
    }
    while t=$(at $((n * sample_interval))) && ! awk -v t="$t" -v e="$end" 'BEGIN { exit !(t > e + 0.5) }'; do
        sleep_until "$t"
        control=$(cat "$work/control.pid")
        data=$(bench_data_pid "$control" || true)
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(awk -v n="$n" -v i="$sample_interval" 'BEGIN { printf "%g", n * i / 60 }')" \
            "$EPOCHREALTIME" "$control" "$(proc "$control")" "${data:--}" "$( [ -n "$data" ] && proc "$data" || printf -- '-\t-')" >>"$work/samples.tsv"
        { "$bin/filterctl" status --json --socket "$socket" 2>/dev/null || echo '{}'; } | tr -d '\n' >>"$work/status.jsonl"
        echo >>"$work/status.jsonl"
        n=$((n + 1))
    done
}

reloader &
bench_pids+=($!)
loops=($!)
killer &
bench_pids+=($!)
loops+=($!)
sampler &
bench_pids+=($!)
loops+=($!)

# filter-control dying is a crash to count: note it, start it again, go on.
while before_end "$EPOCHREALTIME"; do
    state=$(awk '{ print $3 }' "/proc/$control_pid/stat" 2>/dev/null || echo gone)
    if [ "$state" = Z ] || [ "$state" = gone ]; then
        status=0
        wait "$control_pid" || status=$?
        printf '%s\t%s\t%s\n' "$EPOCHREALTIME" "$control_pid" "$status" >>"$work/control-deaths.tsv"
        echo "soak: filter-control $control_pid died (status $status); starting it again" >&2
        bench_hallpass
        echo "$control_pid" >"$work/control.pid"
    fi
    sleep 1
done
wait "${generators[@]}" "${loops[@]}" || true
bench_pids=("${servers[@]}")  # the rest has ended: its pids are no longer ours to kill
"$bin/filterctl" status --json --socket "$socket" >"$work/status-final.json" 2>/dev/null || true
# A graceful stop: filter-data's last counters go to the log.
kill "$control_pid" && wait "$control_pid" || true
control_pid=""
sleep 0.2

cat "$work"/attempts-*.tsv >"$out/attempts.tsv"
for file in plan.json publish.log reloads.tsv kills.tsv samples.tsv status.jsonl status-final.json control-deaths.tsv filter-control.log \
    rules-access.log nginx-error.log quic-server.log dnsmasq.log traffic-http.log traffic-https.log traffic-quic.log traffic-dns.log; do
    [ -e "$work/$file" ] && cp "$work/$file" "$out/" || touch "$out/$file"
done
python3 scripts/lib/soak-report.py "$out" --start "$start" --end "$end" --margin "$margin" \
    --reload-interval "$reload_interval" --kill-interval "$kill_interval" --kill-offset "$kill_offset" --sample-interval "$sample_interval"
