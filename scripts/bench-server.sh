#!/usr/bin/env bash
# The school's server under a fleet, for BENCHMARKS.md ("The school's server").
#   scripts/bench-server.sh [sqlite|postgres|both]     (default: both)
#
# For each storage engine, a release hallpass-server on 127.0.0.1 over TLS
# (its own self-signed certificate) and a simulated fleet
# (scripts/lib/fleet-sim.py: each machine enrolled with its own Ed25519 key,
# every request signed as a real machine signs it, and each holding its live
# request, POST /api/v1/machine/live, as filter-control does; the result
# counts the live states received):
#   ingest    MACHINES_INGEST machines (default 300) posting records at
#             RATES records a second for the whole fleet (default "5000
#             10000"), DURATION seconds each (default 60), checking in every
#             60 s: records stored a second, and whether every record made
#             was stored (none left waiting, no failure)
#   fleet     MACHINES_FLEET machines (default 3000) enrolling, then checking
#             in every 60 s and posting every 10 s, FLEET_RATE records a
#             second for the whole fleet (default 300), for FLEET_DURATION
#             seconds (default 180): the server's peak resident memory
#             (VmHWM) and its CPU seconds, the enrolment included
#   records   RECORDS records (default 10000000) written straight into the
#             database the server migrated (scripts/lib/records-bench.py:
#             300 machines, 3,000 users, 30 days), then QUERIES (default
#             200) GET /api/v1/records over HTTPS with an admin API token,
#             each with a random user and a random 1-day or 7-day window:
#             p50, p95 and max; then the first page unfiltered and a CSV
#             page of 1,000 records, a room's, a category's and the blocks'
#             pages, 20 times each, a category no record has over 30 days
#             3 times; the load average is printed with them.
#             Then, unless COLD=0, the same on cold caches: the server
#             stopped, PostgreSQL restarted, the kernel's page cache
#             dropped (the whole machine's: echo 3 >/proc/sys/vm/drop_caches),
#             the server started, QUERIES_COLD (default 50) user and date
#             queries of other users and days
#   console   the same load as records (once, when both are asked) and
#             RECENT_HOUR records more (default 42000) in the hour before
#             it, which the dashboard counts; an admin, a teacher of lab3
#             and a safeguarding lead (`hallpass-server user add`) sign in
#             to the console over HTTPS, and records-bench.py console asks
#             its pages PAGES times each (default 200) after one untimed
#             request: the dashboard as the admin and as the teacher,
#             filtered records pages, the teacher's records, a timeline, CSV
#             exports: p50, p95 and max, with the load average
# PARTS chooses the parts (default "ingest fleet records console").
# The fleet and the server share this machine's cores: the simulator's own
# CPU is part of the load. PostgreSQL is a cluster made in a folder of the
# benchmark's own (Debian's initdb and pg_ctl, as the postgres user, on a
# unix socket there, default settings: fsync on), removed at the end.
# Run as root; writes to bench-out/server/.
set -euo pipefail
cd "$(dirname "$0")/.."
engines=${1:-both}
failed=""
case "$engines" in
    both) engines="sqlite postgres" ;;
    sqlite|postgres) ;;
    *) echo "bench-server.sh: sqlite, postgres or both, not '$engines'" >&2; exit 64 ;;
esac
machines_ingest=${MACHINES_INGEST:-300}
rates=${RATES:-5000 10000}
duration=${DURATION:-60}
machines_fleet=${MACHINES_FLEET:-3000}
fleet_rate=${FLEET_RATE:-300}
fleet_duration=${FLEET_DURATION:-180}
parts=${PARTS:-ingest fleet records console}
records=${RECORDS:-10000000}
queries=${QUERIES:-200}
cold=${COLD:-1}
queries_cold=${QUERIES_COLD:-50}
recent_hour=${RECENT_HOUR:-42000}
pages=${PAGES:-200}
wants() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

command -v openssl >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null; }
[ -x /usr/lib/postgresql/15/bin/initdb ] || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
venv=.build/bench-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import aiohttp, cryptography" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "aiohttp>=3.9,<4" "cryptography>=42"
fi
swift build -c release --static-swift-stdlib --product hallpass-server 2>&1 | tail -1
bin=$(swift build -c release --static-swift-stdlib --show-bin-path)
out=$PWD/bench-out/server
rm -rf "$out" && mkdir -p "$out"
work=$(mktemp -d /tmp/hallpass-bench-server.XXXXXX)
chmod 755 "$work"
server_pid=""
pg_data=""

stop_server() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=""; fi
}
cleanup() {
    stop_server
    if [ -n "$pg_data" ]; then runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$pg_data" -m immediate -w stop >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/server.key" -out "$work/server.crt" \
    -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 -days 2 2>/dev/null
port=$((20000 + RANDOM % 20000))

database_for() {  # sets database (server.yaml's value) for engine $1, making the PostgreSQL cluster
    case "$1" in
        sqlite) database=$work/server.db ;;
        postgres)
            local folder=$work/pg
            mkdir -p "$folder" && chown postgres:postgres "$folder"
            pg_data=$folder/data
            runuser -u postgres -- /usr/lib/postgresql/15/bin/initdb -D "$pg_data" -U postgres --auth=trust -E UTF8 >/dev/null
            runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$pg_data" -l "$folder/server.log" -w -t 60 \
                -o "-c listen_addresses='' -c unix_socket_directories='$folder' -p 5432 -c max_connections=100" start >/dev/null
            runuser -u postgres -- /usr/lib/postgresql/15/bin/createdb -h "$folder" -p 5432 hallpass
            database="postgres://postgres@/hallpass?host=$folder" ;;
    esac
}

start_server() {  # engine, database[, log suffix]: init (migrates a fresh or an existing database), serve; sets server_pid
    cat >"$work/server.yaml" <<EOF
listen:
  address: 127.0.0.1
  port: $port
tls:
  certificate: $work/server.crt
  key: $work/server.key
database: $2
# The simulated fleet enrols thousands of machines from this one address in
# a minute; the limit (30 a minute) is for a hostile address, not for this.
machines:
  enrolRate: 100000
EOF
    "$bin/hallpass-server" init --config "$work/server.yaml" >/dev/null
    "$bin/hallpass-server" serve --config "$work/server.yaml" >"$out/server-$1${3:-}.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 300); do
        curl -sk -o /dev/null -m 1 "https://127.0.0.1:$port/metrics" && return 0
        sleep 0.1
    done
    echo "bench-server.sh: hallpass-server did not start:" >&2; cat "$out/server-$1${3:-}.log" >&2; exit 1
}

cpu_seconds() {  # user + system CPU of pid $1, in seconds
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}
peak_mb() {  # VmHWM of pid $1, in MB
    awk '/VmHWM/ { printf "%.1f", $2 * 1024 / 1e6 }' "/proc/$1/status"
}

records_in() {  # the records stored, by engine $1
    case "$1" in
        sqlite) python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM records").fetchone()[0])' "$work/server.db" ;;
        postgres) runuser -u postgres -- psql -h "$work/pg" -p 5432 -d hallpass -Atc "SELECT COUNT(*) FROM records" ;;
    esac
}

token() {
    "$bin/hallpass-server" token create --room bench --uses 10000 --config "$work/server.yaml" | grep '^hp1\.'
}

drop_database() {  # engine: stops its PostgreSQL cluster and removes it, or removes the SQLite file
    if [ "$1" = postgres ]; then
        runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$pg_data" -m fast -w stop >/dev/null; rm -rf "$work/pg"; pg_data=""
    else
        rm -f "$work"/server.db*
    fi
}

for engine in $engines; do
    if wants ingest; then
        database_for "$engine"
        start_server "$engine" "$database"
        tok=$(token)
        echo "== $engine: ingest, $machines_ingest machines"
        for rate in $rates; do
            cpu_before=$(cpu_seconds "$server_pid")
            result=$("$venv/bin/python" scripts/lib/fleet-sim.py --server "https://127.0.0.1:$port" --token "$tok" \
                --machines "$machines_ingest" --records-per-second "$rate" --duration "$duration" --state "$work/ingest-$engine.json") || failed="$failed ingest-$engine-$rate"
            cpu_after=$(cpu_seconds "$server_pid")
            echo "$result" >"$out/ingest-$engine-$rate.json"
            echo "rate $rate/s: $result"
            echo "   server CPU $(awk -v a="$cpu_before" -v b="$cpu_after" 'BEGIN { printf "%.1f", b - a }') s, stored in the database: $(records_in "$engine")"
        done
        stop_server
        drop_database "$engine"
    fi

    if wants fleet; then
        database_for "$engine"
        start_server "$engine" "$database"
        tok=$(token)
        echo "== $engine: fleet, $machines_fleet machines checking in every 60 s, $fleet_rate records/s in all"
        cpu_before=$(cpu_seconds "$server_pid")
        result=$("$venv/bin/python" scripts/lib/fleet-sim.py --server "https://127.0.0.1:$port" --token "$tok" \
            --machines "$machines_fleet" --records-per-second "$fleet_rate" --duration "$fleet_duration" --post-interval 10 \
            --state "$work/fleet-$engine.json") || failed="$failed fleet-$engine"
        cpu_after=$(cpu_seconds "$server_pid")
        echo "$result" >"$out/fleet-$engine.json"
        echo "$result"
        echo "   server VmHWM $(peak_mb "$server_pid") MB, CPU $(awk -v a="$cpu_before" -v b="$cpu_after" 'BEGIN { printf "%.1f", b - a }') s for the enrolment and ${fleet_duration} s, stored: $(records_in "$engine")"
        stop_server
        drop_database "$engine"
    fi

    if wants records || wants console; then
        # The server makes the schema (its migrations, at init and at the first
        # serve); the records go straight into it; the server then serves them.
        database_for "$engine"
        start_server "$engine" "$database" -records-migrate
        stop_server
        api_token=$("$bin/hallpass-server" api-token create --role admin --config "$work/server.yaml" | tail -n 1)
        recent=0
        if wants console; then recent=$recent_hour; fi
        echo "== $engine: $records records$([ "$recent" = 0 ] || echo " and $recent in the last hour")"
        case "$engine" in
            sqlite) loaded=$(python3 scripts/lib/records-bench.py load --engine sqlite --database "$work/server.db" --records "$records" \
                --recent-hour "$recent") ;;
            postgres) loaded=$(python3 scripts/lib/records-bench.py load --engine postgres --socket "$work/pg" --port 5432 \
                --database hallpass --records "$records" --recent-hour "$recent") ;;
        esac
        echo "$loaded" >"$out/records-load-$engine.json"
        echo "   loaded: $loaded"
        echo "   stored in the database: $(records_in "$engine"), $(du -sh "$work/$([ "$engine" = postgres ] && echo pg || echo server.db)" | cut -f1) on disk"
        first_day=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["firstDay"])' "$loaded")
        if wants console; then
            # The console's people, each with a password of its own made here.
            export ADMIN_PASSWORD TEACHER_PASSWORD SAFEGUARDING_PASSWORD
            ADMIN_PASSWORD=$(openssl rand -hex 16)
            TEACHER_PASSWORD=$(openssl rand -hex 16)
            SAFEGUARDING_PASSWORD=$(openssl rand -hex 16)
            echo "$ADMIN_PASSWORD" | "$bin/hallpass-server" user add bench-admin --role admin --password-stdin --config "$work/server.yaml" >/dev/null
            echo "$TEACHER_PASSWORD" | "$bin/hallpass-server" user add bench-teacher --role teacher --room lab3 --password-stdin \
                --config "$work/server.yaml" >/dev/null
            echo "$SAFEGUARDING_PASSWORD" | "$bin/hallpass-server" user add bench-dsl --role safeguarding --password-stdin \
                --config "$work/server.yaml" >/dev/null
        fi
        start_server "$engine" "$database" -records
        if wants records; then
            echo "-- records query"
            load_before=$(cut -d' ' -f1-3 /proc/loadavg)
            result=$(python3 scripts/lib/records-bench.py query --server "https://127.0.0.1:$port" --token "$api_token" \
                --start "$first_day" --queries "$queries")
            load_after=$(cut -d' ' -f1-3 /proc/loadavg)
            echo "$result" >"$out/records-query-$engine.json"
            echo "   $result"
            echo "   load average before the queries $load_before, after $load_after; server VmHWM $(peak_mb "$server_pid") MB"
        fi
        if wants console; then
            echo "-- console pages"
            load_before=$(cut -d' ' -f1-3 /proc/loadavg)
            result=$(python3 scripts/lib/records-bench.py console --server "https://127.0.0.1:$port" --start "$first_day" \
                --requests "$pages")
            load_after=$(cut -d' ' -f1-3 /proc/loadavg)
            echo "$result" >"$out/console-$engine.json"
            echo "   $result"
            echo "   load average before the pages $load_before, after $load_after; server VmHWM $(peak_mb "$server_pid") MB"
        fi
        stop_server
        if wants records && [ "$cold" != 0 ]; then
            if [ "$engine" = postgres ]; then
                runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$pg_data" -m fast -w restart >/dev/null
            fi
            sync
            echo 3 >/proc/sys/vm/drop_caches
            start_server "$engine" "$database" -records-cold
            load_before=$(cut -d' ' -f1-3 /proc/loadavg)
            result=$(python3 scripts/lib/records-bench.py query --server "https://127.0.0.1:$port" --token "$api_token" \
                --start "$first_day" --queries "$queries_cold" --repeat 0 --seed 29)
            load_after=$(cut -d' ' -f1-3 /proc/loadavg)
            echo "$result" >"$out/records-query-cold-$engine.json"
            echo "   cold caches: $result"
            echo "   load average before the queries $load_before, after $load_after"
            stop_server
        fi
        drop_database "$engine"
    fi
done
if [ -n "$failed" ]; then
    echo "bench-server.sh: the simulator failed in:$failed (see above); these results do not count" >&2
    exit 1
fi
