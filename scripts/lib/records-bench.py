#!/usr/bin/env python3
"""The records query over many records: load them, then time the queries.

  records-bench.py load --engine sqlite --database FILE --records N
  records-bench.py load --engine postgres --socket DIR --port P --database NAME --records N
  records-bench.py query --server https://127.0.0.1:PORT --token API_TOKEN --start MS [--queries 200]
  records-bench.py console --server https://127.0.0.1:PORT --start MS [--requests 200]   (passwords in the environment)

`load` writes N records straight into the database hallpass-server made
(its migrations ran first: this adds rows, never schema), because posting
10 million records through the API would take longer than the whole
benchmark may. It adds 300 machines (12 rooms) and N records over the 30
whole UTC days before today, each day's records between 08:00 and 16:00
in time order: machine by machine in turn, so each machine's sequence
rises with time as a real machine's does; users drawn from 3,000 pupils
and staff, skewed (the product of two uniform draws) so that some use the
machines far more than others, as in a school; a mix of kinds, actions,
categories and reasons. The indexes on records are dropped before the
load and made again after it from their own definitions as the database
holds them (the same indexes, built in one pass rather than row by row).
PostgreSQL gets a VACUUM ANALYZE after it, as autovacuum would do on its
own after such a load; SQLite gets nothing (hallpass-server never runs
ANALYZE, so its planner works without statistics there as on a school's
server).

`query` asks GET /api/v1/records over HTTPS (one kept-alive connection,
one request at a time, certificate not checked: it is the benchmark's own)
with an API token: --queries requests each with a random user (of those
the load made) and a random whole day or 7 whole days; then, --repeat
times each, the first page without filters, a CSV page of 1,000 records
over 7 days, and 7 days of a room, 7 days of a category, 1 day of blocks;
and 3 times a category no record has, over all 30 days.
It prints one JSON object with each part's latency (ms: p50, p95, max) and
the records the answers held.

`console` signs in to the console as the accounts bench-server.sh made
(POST /console/sign-in; the passwords in $ADMIN_PASSWORD, $TEACHER_PASSWORD
and $SAFEGUARDING_PASSWORD), then asks its pages over the same kind of
connection, each page --requests times after one untimed request: the
dashboard as the admin and as the teacher (of lab3); records pages as the
admin, of a user and 7 days, a room and 1 day, a category and 7 days, and
the blocks of 1 day; the teacher's records page of 7 days (their scope,
no filter); a user's timeline of 7 days as the safeguarding lead; the CSV
export of a user's 7 days; and --repeat times the CSV export of a
category's 7 days (the most one file holds, 10,000 records). Every answer
must be 200 and the page asked for (HTML, not the sign-in; CSV for the
exports). It prints one JSON object as `query` does, with the rows each
page showed (records, or the dashboard's blocks in the last hour).

Used by scripts/bench-server.sh; Python's standard library only.
"""
import argparse
import http.client
import json
import os
import random
import re
import sqlite3
import ssl
import subprocess
import sys
import time
import urllib.parse

MACHINES = 300
ROOMS = 12
USERS = 3000
STAFF = 150  # users 0..149 are staff, the rest pupils in six year groups
DAYS = 30
DAY_MS = 86_400_000
BASE32 = "abcdefghijklmnopqrstuvwxyz234567"


def machine_id(index: int) -> str:
    """m- and 20 base32 characters, as the server makes them."""
    digits = ""
    value = index
    for _ in range(4):
        digits = BASE32[value % 32] + digits
        value //= 32
    return "m-" + "bench" + "a" * 11 + digits


def first_day_ms() -> int:
    """Midnight UTC 30 days before today's."""
    today = int(time.time()) // 86_400 * DAY_MS
    return today - DAYS * DAY_MS


def user_name(index: int) -> str:
    return f"user{index:04d}"


def machines_rows(now: int):
    for index in range(MACHINES):
        room = f"lab{index % ROOMS + 1}"
        yield (machine_id(index), f"benchkey{index:036d}=", room, f"{room}-pc{index // ROOMS + 1:02d}", "bench", now, now)


# The records, as SQL over a numbered series s(i, a, b, c) of N rows where
# a, b, c are random whole numbers >= 0 drawn once per row (both engines
# evaluate them once: SQLite keeps a recursive CTE's rows, PostgreSQL does
# not pull a subquery with volatile functions up). The same statement runs
# on both: `||` joins text, `/` of whole numbers is whole, and the machine's
# id is spelled out of its number as machine_id() does.
RECORD_COLUMNS = ("machine, sequence, time, uid, user_name, group_name, kind, host, url, destination, port, action, "
                  "category, rule, reason, rules_version, received_at")
RECORD_SELECT = """
SELECT
    'm-bench' || 'aaaaaaaaaaa' || {digit3} || {digit2} || {digit1} || {digit0},
    s.i / {machines} + 1,
    {time},
    1000 + {user},
    'user' || CASE WHEN {user} < 10 THEN '000' WHEN {user} < 100 THEN '00' WHEN {user} < 1000 THEN '0' ELSE '' END || {user},
    CASE WHEN {user} < {staff} THEN 'staff' ELSE 'year' || (7 + {user} % 6) END,
    CASE WHEN s.b % 10 < 6 THEN 'tls' WHEN s.b % 10 < 8 THEN 'dns' WHEN s.b % 10 < 9 THEN 'http' ELSE 'quic' END,
    CASE WHEN s.b % 100 < 8 THEN 'blocked' || (s.c % 400) || '.example' ELSE 'site' || (s.c % 20000) || '.example' END,
    CASE WHEN s.b % 10 = 8 THEN 'http://site' || (s.c % 20000) || '.example/page/' || (s.c % 97) ELSE NULL END,
    '192.0.2.' || (s.c % 250 + 1),
    CASE WHEN s.b % 10 < 6 THEN 443 WHEN s.b % 10 < 8 THEN 53 WHEN s.b % 10 < 9 THEN 80 ELSE 443 END,
    CASE WHEN s.b % 100 < 8 THEN 'block' ELSE 'allow' END,
    CASE WHEN s.b % 100 < 8 THEN (CASE s.c % 5 WHEN 0 THEN 'gambling' WHEN 1 THEN 'games' WHEN 2 THEN 'social'
                                  WHEN 3 THEN 'adult' ELSE 'proxy' END)
         WHEN s.c % 10 < 3 THEN (CASE s.c % 3 WHEN 0 THEN 'education' WHEN 1 THEN 'search' ELSE 'news' END)
         ELSE NULL END,
    CASE WHEN s.b % 100 < 8 THEN 'blocked' || (s.c % 400) || '.example'
         WHEN s.c % 10 < 3 THEN 'site' || (s.c % 20000) || '.example' ELSE NULL END,
    CASE WHEN s.b % 100 < 8 THEN 'category' WHEN s.c % 10 < 3 THEN 'category' ELSE 'unknown' END,
    40 + s.i / {per_day} / 7,
    ({time}) / 1000 + 2
FROM {series} s
"""


def record_sql(engine: str, first: int, count: int, total: int, start: int, recent_until: int = 0) -> str:
    """The INSERT of records first..first+count-1 of a load of `total`; with
    `recent_until` (Unix ms), records numbered from `total` on, spread
    evenly over the hour before that time instead of the 30 days."""
    per_day = -(-total // DAYS)
    last = first + count - 1
    if engine == "sqlite":
        draw = "(random() & 9223372036854775807)"
        series = (f"(WITH RECURSIVE r(i, a, b, c) AS (SELECT {first}, {draw} % 1000000007, {draw}, {draw} "
                  f"UNION ALL SELECT i + 1, {draw} % 1000000007, {draw}, {draw} FROM r WHERE i < {last}) SELECT * FROM r)")
    else:
        series = (f"(SELECT i, floor(random() * 1000000007)::bigint AS a, floor(random() * 2147483647)::bigint AS b, "
                  f"floor(random() * 2147483647)::bigint AS c FROM generate_series({first}::bigint, {last}::bigint) i OFFSET 0)")
    # Each day's records spread evenly over 08:00 to 16:00 UTC, in the order of i.
    day_time = f"{start} + (s.i / {per_day}) * 86400000 + 28800000 + (s.i % {per_day}) * 28800000 / {per_day}"
    if recent_until:
        day_time = f"{recent_until - 3_600_000} + (s.i - {total}) * 3600000 / {count}"
    # Some users use the machines far more than others: the product of two uniform draws.
    user = f"((s.a % {USERS}) * ((s.a / {USERS}) % {USERS}) / {USERS})"
    digits = {f"digit{k}": f"substr('{BASE32}', CAST((s.i % {MACHINES}) / {32 ** k} % 32 + 1 AS INTEGER), 1)" for k in range(4)}
    select = RECORD_SELECT.format(machines=MACHINES, per_day=per_day, time=day_time, user=user, staff=STAFF,
                                  series=series, **digits)
    return f"INSERT INTO records ({RECORD_COLUMNS}) {select}"


def load(args):
    start = first_day_ms()
    now = int(time.time())
    batch = args.batch
    began = time.monotonic()
    if args.engine == "sqlite":
        db = sqlite3.connect(args.database, isolation_level=None)
        db.execute("PRAGMA cache_size = -1000000")  # 1 GB of cache for the index builds
        db.execute("PRAGMA temp_store = FILE")
        indexes = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records' "
                             "AND sql IS NOT NULL ORDER BY name").fetchall()
        db.execute("BEGIN")
        for name, _ in indexes:
            db.execute(f'DROP INDEX "{name}"')
        db.executemany("INSERT INTO machines (id, public_key, room, hostname, version, enrolled_at, checkin_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", machines_rows(now))
        db.execute("COMMIT")
        for first in range(0, args.records, batch):
            db.execute("BEGIN")
            db.execute(record_sql("sqlite", first, min(batch, args.records - first), args.records, start))
            db.execute("COMMIT")
            print(f"  {min(first + batch, args.records):,} records, {time.monotonic() - began:.0f} s", file=sys.stderr)
        if args.recent_hour:
            db.execute("BEGIN")
            db.execute(record_sql("sqlite", args.records, args.recent_hour, args.records, start, recent_until=now * 1000))
            db.execute("COMMIT")
        loaded = time.monotonic()
        for name, sql in indexes:
            db.execute(sql)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
    else:
        def psql(sql: str) -> str:
            result = subprocess.run(
                ["runuser", "-u", "postgres", "--", "psql", "-h", args.socket, "-p", str(args.port), "-d", args.database,
                 "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"],
                input=sql, text=True, capture_output=True)
            if result.returncode != 0:
                sys.exit(f"records-bench.py: psql failed: {result.stderr.strip()}")
            return result.stdout
        definitions = [line.split("|", 1) for line in psql(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'records' AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE conrelid = 'records'::regclass) ORDER BY indexname;").splitlines() if line]
        values = ",\n".join(
            "('{}', '{}', '{}', '{}', '{}', {}, {})".format(*row) for row in machines_rows(now))
        psql("BEGIN;\n" + "".join(f'DROP INDEX "{name}";\n' for name, _ in definitions)
             + "INSERT INTO machines (id, public_key, room, hostname, version, enrolled_at, checkin_at) VALUES\n"
             + values + ";\nCOMMIT;\n")
        # The machines exist; the foreign key's check per row is skipped, as a restore does.
        script = "SET session_replication_role = replica;\n"
        for first in range(0, args.records, batch):
            script += record_sql("postgres", first, min(batch, args.records - first), args.records, start) + ";\n"
        if args.recent_hour:
            script += record_sql("postgres", args.records, args.recent_hour, args.records, start, recent_until=now * 1000) + ";\n"
        psql(script)
        loaded = time.monotonic()
        psql("SET maintenance_work_mem = '512MB';\n" + "".join(f"{definition};\n" for _, definition in definitions))
        psql("VACUUM ANALYZE records;\nVACUUM ANALYZE machines;\nCHECKPOINT;\n")
    done = time.monotonic()
    print(json.dumps({"records": args.records, "recentHour": args.recent_hour, "machines": MACHINES, "users": USERS, "days": DAYS, "firstDay": start,
                      "rowsSeconds": round(loaded - began, 1), "indexSeconds": round(done - loaded, 1)}))


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def summary(latencies, records):
    return {"requests": len(latencies), "p50": round(percentile(latencies, 0.5), 1),
            "p95": round(percentile(latencies, 0.95), 1), "max": round(max(latencies), 1),
            "recordsMean": round(sum(records) / len(records), 1), "recordsMax": max(records)}


def query(args):
    url = urllib.parse.urlsplit(args.server)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=120)
    headers = {"Authorization": f"Bearer {args.token}"}

    def ask(parameters):
        path = "/api/v1/records?" + urllib.parse.urlencode(parameters)
        began = time.perf_counter()
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        elapsed = (time.perf_counter() - began) * 1000
        if response.status != 200:
            sys.exit(f"records-bench.py: {path}: {response.status} {body[:300]!r}")
        if parameters.get("format") == "csv":
            count = body.count(b"\r\n") - 1
        else:
            count = len(json.loads(body)["records"])
        return elapsed, count

    def iso(ms):
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))

    rng = random.Random(args.seed)
    ask({"limit": "1"})  # the connection and its TLS handshake, not timed
    filtered = {"1 day": ([], []), "7 days": ([], [])}
    for _ in range(args.queries):
        days = rng.choice([1, 7])
        first = args.start + rng.randrange(DAYS - days + 1) * DAY_MS
        parameters = {"user": user_name(rng.randrange(USERS)), "since": iso(first), "until": iso(first + days * DAY_MS)}
        elapsed, count = ask(parameters)
        part = filtered["1 day" if days == 1 else "7 days"]
        part[0].append(elapsed)
        part[1].append(count)
    every = ([], [])
    for part in filtered.values():
        every[0].extend(part[0])
        every[1].extend(part[1])
    result = {"userAndDates": summary(*every)}
    for name, part in filtered.items():
        if part[0]:
            result[f"userAndDates {name}"] = summary(*part)
    # Other questions a school asks, each --repeat times: no filter; a CSV
    # export page; filters no index of their own serves (a room, a
    # category, the blocks), read along the time index; and the worst of
    # those, a category no record has over all 30 days (3 times).
    others = {
        "firstPageUnfiltered": lambda first: {},
        "csvPage1000 7 days": lambda first: {"since": iso(first), "until": iso(first + 7 * DAY_MS), "limit": "1000", "format": "csv"},
        "room 7 days": lambda first: {"room": f"lab{rng.randrange(ROOMS) + 1}", "since": iso(first),
                                      "until": iso(first + 7 * DAY_MS)},
        "category gambling 7 days": lambda first: {"category": "gambling", "since": iso(first), "until": iso(first + 7 * DAY_MS)},
        "blocks 1 day": lambda first: {"action": "block", "since": iso(first), "until": iso(first + DAY_MS)},
        "category none has, 30 days": lambda first: {"category": "self-harm", "since": iso(args.start),
                                                      "until": iso(args.start + DAYS * DAY_MS)},
    }
    if args.repeat > 0:
        for name, parameters in others.items():
            latencies, counts = [], []
            for _ in range(3 if name.startswith("category none") else args.repeat):
                elapsed, count = ask(parameters(args.start + rng.randrange(DAYS - 6) * DAY_MS))
                latencies.append(elapsed)
                counts.append(count)
            result[name] = summary(latencies, counts)
    print(json.dumps(result))


SESSION_COOKIE = "__Host-hallpass-session"


def console(args):
    url = urllib.parse.urlsplit(args.server)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=120)

    def sign_in(login, password):
        body = urllib.parse.urlencode({"login": login, "password": password, "next": "/console/"})
        connection.request("POST", "/console/sign-in", body=body,
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
        response = connection.getresponse()
        response.read()
        cookies = [value for name, value in response.getheaders() if name.lower() == "set-cookie"]
        for cookie in cookies:
            name, _, rest = cookie.partition("=")
            if name.strip() == SESSION_COOKIE:
                value = rest.split(";", 1)[0]
                if response.status == 303 and value:
                    return value
        sys.exit(f"records-bench.py: signing in as {login}: {response.status} {response.getheader('Location')}, no session cookie")

    sessions = {"admin": sign_in("bench-admin", os.environ["ADMIN_PASSWORD"]),
                "teacher": sign_in("bench-teacher", os.environ["TEACHER_PASSWORD"])}
    if os.environ.get("SAFEGUARDING_PASSWORD"):
        sessions["safeguarding"] = sign_in("bench-dsl", os.environ["SAFEGUARDING_PASSWORD"])

    blocks_table = re.compile(rb'<table id="blocks-by-category">(.*?)</table>', re.S)
    number_cell = re.compile(rb'<td class="number">([^<]*)</td>')

    def ask(who, path, expect):
        began = time.perf_counter()
        connection.request("GET", path, headers={"Cookie": f"{SESSION_COOKIE}={sessions[who]}"})
        response = connection.getresponse()
        body = response.read()
        elapsed = (time.perf_counter() - began) * 1000
        content_type = response.getheader("Content-Type", "")
        if response.status != 200:
            sys.exit(f"records-bench.py: {who} {path}: {response.status} {response.getheader('Location')} {body[:300]!r}")
        if expect == "csv":
            if not content_type.startswith("text/csv"):
                sys.exit(f"records-bench.py: {who} {path}: {content_type}, not CSV")
            return elapsed, body.count(b"\r\n") - 1
        if not content_type.startswith("text/html"):
            sys.exit(f"records-bench.py: {who} {path}: {content_type}, not HTML")
        if expect == "dashboard":
            if b'id="blocks-heading"' not in body:
                sys.exit(f"records-bench.py: {who} {path}: not the dashboard: {body[:300]!r}")
            table = blocks_table.search(body)
            counts = number_cell.findall(table.group(1)) if table else []
            return elapsed, sum(int(re.sub(rb"[^0-9]", b"", count) or b"0") for count in counts)
        if b'id="records"' not in body and b'id="no-records"' not in body:
            sys.exit(f"records-bench.py: {who} {path}: no records table: {body[:300]!r}")
        return elapsed, body.count(b"<time datetime=")

    def day(index):
        return time.strftime("%Y-%m-%d", time.gmtime((args.start + index * DAY_MS) / 1000))

    def window(days):
        first = rng.randrange(DAYS - days + 1)
        return {"since": day(first), "until": day(first + days - 1)}

    def records(**filters):
        return "/console/records?" + urllib.parse.urlencode(filters)

    rng = random.Random(args.seed)
    categories = ["gambling", "games", "social", "adult", "proxy"]
    pages = {
        "dashboard admin": ("admin", "dashboard", lambda: "/console/"),
        "dashboard teacher": ("teacher", "dashboard", lambda: "/console/"),
        "records user 7 days": ("admin", "records", lambda: records(user=user_name(rng.randrange(USERS)), **window(7))),
        "records room 1 day": ("admin", "records", lambda: records(room=f"lab{rng.randrange(ROOMS) + 1}", **window(1))),
        "records category 7 days": ("admin", "records", lambda: records(category=rng.choice(categories), **window(7))),
        "records blocks 1 day": ("admin", "records", lambda: records(action="block", **window(1))),
        "records teacher 7 days": ("teacher", "records", lambda: records(**window(7))),
        "timeline 7 days": ("safeguarding" if "safeguarding" in sessions else "admin", "records",
                            lambda: "/console/timeline?" + urllib.parse.urlencode({"user": user_name(rng.randrange(USERS)), **window(7)})),
        "csv user 7 days": ("admin", "csv", lambda: records(user=user_name(rng.randrange(USERS)), format="csv", **window(7))),
        "csv category 7 days": ("admin", "csv", lambda: records(category=rng.choice(categories), format="csv", **window(7))),
    }
    result = {}
    for name, (who, expect, path) in pages.items():
        times = args.repeat if name == "csv category 7 days" else args.requests
        if times <= 0:
            continue
        ask(who, path(), expect)  # the first of its kind, not timed
        latencies, counts = [], []
        for _ in range(times):
            elapsed, count = ask(who, path(), expect)
            latencies.append(elapsed)
            counts.append(count)
        result[name] = summary(latencies, counts)
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    loader = commands.add_parser("load")
    loader.add_argument("--engine", choices=["sqlite", "postgres"], required=True)
    loader.add_argument("--database", required=True, help="the SQLite file, or the PostgreSQL database's name")
    loader.add_argument("--socket", help="PostgreSQL: the unix socket's folder")
    loader.add_argument("--port", type=int, default=5432)
    loader.add_argument("--records", type=int, default=10_000_000)
    loader.add_argument("--batch", type=int, default=1_000_000, help="records a transaction")
    loader.add_argument("--recent-hour", type=int, default=0,
                        help="records more, in the hour before the load (what the console's dashboard counts)")
    asker = commands.add_parser("query")
    asker.add_argument("--server", required=True)
    asker.add_argument("--token", required=True, help="an API token (admin or auditor)")
    asker.add_argument("--start", type=int, required=True, help="the first day's midnight, Unix ms (load prints it)")
    asker.add_argument("--queries", type=int, default=200)
    asker.add_argument("--repeat", type=int, default=20, help="times each of the other questions is asked (0: none)")
    asker.add_argument("--seed", type=int, default=28)
    pages = commands.add_parser("console")
    pages.add_argument("--server", required=True)
    pages.add_argument("--start", type=int, required=True, help="the first day's midnight, Unix ms (load prints it)")
    pages.add_argument("--requests", type=int, default=200, help="times each page is asked")
    pages.add_argument("--repeat", type=int, default=20, help="times the 10,000-record CSV export is asked (0: none)")
    pages.add_argument("--seed", type=int, default=29)
    args = parser.parse_args()
    {"load": load, "query": query, "console": console}[args.command](args)


if __name__ == "__main__":
    main()
