/// The schema, as numbered steps applied in order at start and recorded in
/// `schema_migrations`. A step is never edited once released: a change is a
/// new step. The statements are the same for SQLite and PostgreSQL (whole
/// numbers are BIGINT, times are Unix seconds, a record's time Unix milliseconds).
enum Migrations {
    struct Step: Sendable {
        let version: Int
        let summary: String
        let statements: [String]
    }

    static let steps: [Step] = [
        Step(
            version: 1, summary: "enrolment tokens, machines, records, API tokens, server state",
            statements: [
                """
                CREATE TABLE enrolment_tokens (
                    hash TEXT PRIMARY KEY,
                    room TEXT NOT NULL,
                    uses_left BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    created_by TEXT NOT NULL,
                    created_at BIGINT NOT NULL
                )
                """,
                """
                CREATE TABLE machines (
                    id TEXT PRIMARY KEY,
                    public_key TEXT NOT NULL UNIQUE,
                    room TEXT NOT NULL,
                    hostname TEXT NOT NULL,
                    version TEXT NOT NULL,
                    enrolled_at BIGINT NOT NULL,
                    revoked_at BIGINT,
                    stored_through BIGINT NOT NULL DEFAULT 0,
                    records_dropped BIGINT NOT NULL DEFAULT 0,
                    checkin_at BIGINT,
                    checkin_version TEXT,
                    rules_version BIGINT,
                    rules_since TEXT,
                    filter_data TEXT,
                    filter_data_restarts BIGINT,
                    fail_mode TEXT,
                    queue_drops BIGINT,
                    previous_queue_drops BIGINT,
                    records_waiting BIGINT,
                    checkin_records_dropped BIGINT,
                    users TEXT
                )
                """,
                """
                CREATE TABLE records (
                    machine TEXT NOT NULL REFERENCES machines (id),
                    sequence BIGINT NOT NULL,
                    time BIGINT NOT NULL,
                    uid BIGINT,
                    user_name TEXT,
                    group_name TEXT,
                    kind TEXT,
                    host TEXT,
                    url TEXT,
                    destination TEXT,
                    port BIGINT,
                    action TEXT NOT NULL,
                    category TEXT,
                    rule TEXT,
                    reason TEXT,
                    rules_version BIGINT,
                    received_at BIGINT NOT NULL,
                    PRIMARY KEY (machine, sequence)
                )
                """,
                "CREATE INDEX records_time ON records (time)",
                "CREATE INDEX records_user_time ON records (user_name, time)",
                "CREATE INDEX records_machine_time ON records (machine, time)",
                """
                CREATE TABLE api_tokens (
                    id TEXT PRIMARY KEY,
                    hash TEXT NOT NULL UNIQUE,
                    role TEXT NOT NULL,
                    created_by TEXT NOT NULL,
                    created_at BIGINT NOT NULL
                )
                """,
                "CREATE TABLE server_state (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
            ]),
        // The records query pages in the order (time, machine, sequence). With
        // that whole key in the index, a filter by user or machine and dates
        // reads the index in order, checks the cursor in the index, and stops
        // at the page's end; with step 1's (user, time) the engines added a
        // sort of the records within each time (SQLite "USE TEMP B-TREE FOR
        // RIGHT PART OF ORDER BY") and read each row to compare its machine
        // and sequence with the cursor. The time index serves retention too.
        Step(
            version: 2, summary: "record indexes that end with the records query's order",
            statements: [
                "DROP INDEX records_time",
                "DROP INDEX records_user_time",
                "DROP INDEX records_machine_time",
                "CREATE INDEX records_time_key ON records (time, machine, sequence)",
                "CREATE INDEX records_user_time_key ON records (user_name, time, machine, sequence)",
                "CREATE INDEX records_machine_time_key ON records (machine, time, sequence)",
            ]),
        // Publishing (docs/server.md, "Publishing"). Lists and bundle files are
        // kept once each, by SHA-256, as bytes: BYTEA is PostgreSQL's type, and
        // SQLite keeps a BLOB as it is in a column of any declared type. The
        // files are in the database, not only in a folder, so that every server
        // instance on one PostgreSQL serves the same publication. A publication's
        // file names stay for its history; the bytes of old publications' files
        // are removed (publication_files names them without a foreign key).
        Step(
            version: 3, summary: "policy versions, their lists, publications and bundle files",
            statements: [
                """
                CREATE TABLE list_contents (
                    sha256 TEXT PRIMARY KEY,
                    size BIGINT NOT NULL,
                    names BIGINT NOT NULL,
                    contents BYTEA NOT NULL
                )
                """,
                """
                CREATE TABLE policy_versions (
                    version BIGINT PRIMARY KEY,
                    created_at BIGINT NOT NULL,
                    author TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    policy TEXT
                )
                """,
                """
                CREATE TABLE policy_lists (
                    version BIGINT NOT NULL REFERENCES policy_versions (version),
                    category TEXT NOT NULL,
                    sha256 TEXT NOT NULL REFERENCES list_contents (sha256),
                    PRIMARY KEY (version, category)
                )
                """,
                """
                CREATE TABLE bundle_files (
                    sha256 TEXT PRIMARY KEY,
                    size BIGINT NOT NULL,
                    contents BYTEA NOT NULL
                )
                """,
                """
                CREATE TABLE publications (
                    bundle_version BIGINT PRIMARY KEY,
                    policy_version BIGINT NOT NULL REFERENCES policy_versions (version),
                    created_at BIGINT NOT NULL,
                    author TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    state TEXT NOT NULL,
                    manifest BYTEA NOT NULL,
                    signature BYTEA,
                    published_at BIGINT
                )
                """,
                "CREATE INDEX publications_state ON publications (state, bundle_version)",
                """
                CREATE TABLE publication_files (
                    bundle_version BIGINT NOT NULL REFERENCES publications (bundle_version),
                    name TEXT NOT NULL,
                    sha256 TEXT NOT NULL,
                    size BIGINT NOT NULL,
                    PRIMARY KEY (bundle_version, name)
                )
                """,
            ]),
        // The console's accounts (docs/server.md, "Accounts and sessions"). A
        // person's scope is kept as text, one room or group a line (rooms and
        // groups hold no line break). A session and a sign-in state are kept by
        // the SHA-256 of their secret, never the secret. Audit events are read
        // newest first, by (time, id), filtered by actor or action. The records
        // query's category filter gets an index ending in the query's order, as
        // step 2 made for user and machine.
        Step(
            version: 4, summary: "people, sessions, sign-in states, audit events, API token scopes, a records category index",
            statements: [
                """
                CREATE TABLE people (
                    login TEXT PRIMARY KEY,
                    display_name TEXT NOT NULL,
                    role TEXT NOT NULL,
                    scope_rooms TEXT NOT NULL DEFAULT '',
                    scope_groups TEXT NOT NULL DEFAULT '',
                    method TEXT NOT NULL,
                    password_hash TEXT,
                    failed_attempts BIGINT NOT NULL DEFAULT 0,
                    locked_until BIGINT,
                    disabled_at BIGINT,
                    created_by TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    last_sign_in_at BIGINT
                )
                """,
                """
                CREATE TABLE sessions (
                    hash TEXT PRIMARY KEY,
                    login TEXT NOT NULL REFERENCES people (login),
                    csrf_token TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    last_seen BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    method TEXT NOT NULL
                )
                """,
                "CREATE INDEX sessions_login ON sessions (login)",
                """
                CREATE TABLE sign_in_states (
                    hash TEXT PRIMARY KEY,
                    verifier TEXT NOT NULL,
                    nonce TEXT NOT NULL,
                    return_path TEXT NOT NULL,
                    created_at BIGINT NOT NULL
                )
                """,
                """
                CREATE TABLE audit_events (
                    id TEXT PRIMARY KEY,
                    time BIGINT NOT NULL,
                    actor TEXT NOT NULL,
                    action TEXT NOT NULL,
                    target TEXT,
                    reason TEXT,
                    detail TEXT
                )
                """,
                "CREATE INDEX audit_events_time ON audit_events (time, id)",
                "CREATE INDEX audit_events_actor ON audit_events (actor, time, id)",
                "CREATE INDEX audit_events_action ON audit_events (action, time, id)",
                "ALTER TABLE api_tokens ADD COLUMN scope_rooms TEXT NOT NULL DEFAULT ''",
                "ALTER TABLE api_tokens ADD COLUMN scope_groups TEXT NOT NULL DEFAULT ''",
                "CREATE INDEX records_category_time_key ON records (category, time, machine, sequence)",
            ]),
        // The live channel (docs/server.md, "The live channel"). A live item is
        // kept after it ends (ended_at) or expires, so that a machine's view
        // keeps the sequence of its last change: the state a machine holds is
        // replaced when its view's highest sequence passes the one it has. The
        // sequence is one counter row for the whole server, taken in the
        // change's own transaction: a PostgreSQL SEQUENCE hands numbers out
        // outside the transaction, so a change numbered 41 could commit after
        // 42 was sent, and a machine holding 42 would never be sent 41. The row
        // lock orders the commits as the numbers. A machine's room change takes
        // a number too (machines.live_sequence): its view changed.
        Step(
            version: 5, summary: "live items, the live sequence, machines' live sequence",
            statements: [
                """
                CREATE TABLE live_items (
                    id TEXT PRIMARY KEY,
                    scope_kind TEXT NOT NULL,
                    scope_value TEXT NOT NULL,
                    action TEXT NOT NULL,
                    targets TEXT NOT NULL DEFAULT '',
                    starts_at BIGINT NOT NULL,
                    ends_at BIGINT NOT NULL,
                    by_author TEXT NOT NULL,
                    by_name TEXT NOT NULL,
                    reason TEXT NOT NULL DEFAULT '',
                    request TEXT,
                    sequence BIGINT NOT NULL,
                    created_at BIGINT NOT NULL,
                    ended_at BIGINT,
                    ended_by TEXT
                )
                """,
                "CREATE INDEX live_items_scope ON live_items (scope_kind, scope_value, sequence)",
                "CREATE INDEX live_items_ends ON live_items (ends_at)",
                "CREATE TABLE live_sequence (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
                "INSERT INTO live_sequence (name, value) VALUES ('live', 0)",
                "ALTER TABLE machines ADD COLUMN live_sequence BIGINT NOT NULL DEFAULT 0",
            ]),
        // Access requests (docs/server.md, "Access requests"). A machine's own id
        // of a request is unique on that machine only: the server gives each its
        // own id, and (machine, machine_request) keeps a request sent twice once.
        // Lists read pending requests newest first (state, received_at); a
        // machine's live state reads the decisions on its requests (machine, decided_at).
        Step(
            version: 6, summary: "access requests",
            statements: [
                """
                CREATE TABLE access_requests (
                    id TEXT PRIMARY KEY,
                    machine TEXT NOT NULL REFERENCES machines (id),
                    machine_request TEXT NOT NULL,
                    room TEXT NOT NULL,
                    user_name TEXT,
                    group_name TEXT,
                    host TEXT NOT NULL,
                    url TEXT NOT NULL,
                    category TEXT,
                    reason TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    received_at BIGINT NOT NULL,
                    state TEXT NOT NULL,
                    decided_by TEXT,
                    decided_at BIGINT,
                    message TEXT,
                    approval_scope TEXT,
                    approval_value TEXT,
                    approval_minutes BIGINT,
                    approval_until BIGINT,
                    live_item TEXT,
                    UNIQUE (machine, machine_request)
                )
                """,
                "CREATE INDEX access_requests_state ON access_requests (state, received_at, id)",
                "CREATE INDEX access_requests_machine_decided ON access_requests (machine, decided_at)",
            ]),
        // Safeguarding alerts (docs/server.md, "Safeguarding alerts"). An alert
        // is made in the transaction that stores its record, for the records
        // that were new: (machine, record_sequence, rule_id) is unique, so no
        // record alerts twice for one rule even if it came again after
        // retention removed it. The queue is read newest first by state or by
        // person; the delivery reads the undispatched ones (a partial index:
        // the statement says `dispatched = 0` in its text, as both engines
        // need to use it). `alert_limits` is the repeat limit, one row per
        // person and rule, written with one conditional upsert so that two
        // instances never both alert (last_at in Unix seconds, the server's
        // clock). `alert_attempts` counts the records of `attempts:` rules
        // (time in Unix ms, the record's), pruned past each rule's window.
        Step(
            version: 7, summary: "safeguarding alerts, their repeat limits and attempts",
            statements: [
                """
                CREATE TABLE alerts (
                    id TEXT PRIMARY KEY,
                    time BIGINT NOT NULL,
                    created_at BIGINT NOT NULL,
                    machine TEXT NOT NULL REFERENCES machines (id),
                    room TEXT NOT NULL,
                    user_name TEXT,
                    group_name TEXT,
                    rule_id TEXT NOT NULL,
                    severity TEXT NOT NULL,
                    action TEXT NOT NULL,
                    host TEXT,
                    url TEXT,
                    category TEXT,
                    search_term TEXT,
                    record_sequence BIGINT NOT NULL,
                    state TEXT NOT NULL,
                    note TEXT,
                    updated_at BIGINT,
                    updated_by TEXT,
                    dispatched BIGINT NOT NULL DEFAULT 0,
                    UNIQUE (machine, record_sequence, rule_id)
                )
                """,
                "CREATE INDEX alerts_created ON alerts (created_at, id)",
                "CREATE INDEX alerts_state_created ON alerts (state, created_at, id)",
                "CREATE INDEX alerts_user_created ON alerts (user_name, created_at, id)",
                "CREATE INDEX alerts_undispatched ON alerts (created_at, id) WHERE dispatched = 0",
                """
                CREATE TABLE alert_limits (
                    person TEXT NOT NULL,
                    rule_id TEXT NOT NULL,
                    last_at BIGINT NOT NULL,
                    suppressed BIGINT NOT NULL DEFAULT 0,
                    PRIMARY KEY (person, rule_id)
                )
                """,
                """
                CREATE TABLE alert_attempts (
                    person TEXT NOT NULL,
                    rule_id TEXT NOT NULL,
                    time BIGINT NOT NULL
                )
                """,
                "CREATE INDEX alert_attempts_key ON alert_attempts (person, rule_id, time)",
                "CREATE INDEX alert_attempts_time ON alert_attempts (time)",
            ]),
        // The outbox of alert emails and webhooks (docs/server.md, "Alert delivery").
        // No foreign key to `alerts`: each delivery carries the message it
        // sends (`message`, the AlertMessage as JSON), fixed when the alert
        // is enqueued, so the worker renders it without reading the alert
        // again and a triage step does not change what is being sent.
        // One row per (alert, channel, target): a second enqueue of one alert
        // (two server instances, or a crash between writing the deliveries
        // and marking the alert dispatched) adds nothing. The worker takes
        // the waiting rows that are due (state, next_attempt_at) with a lease.
        // People get an email address for the alerts they receive.
        Step(
            version: 8, summary: "alert deliveries, people's email addresses",
            statements: [
                """
                CREATE TABLE alert_deliveries (
                    id TEXT PRIMARY KEY,
                    alert_id TEXT NOT NULL,
                    channel TEXT NOT NULL,
                    target TEXT NOT NULL,
                    state TEXT NOT NULL,
                    attempts BIGINT NOT NULL DEFAULT 0,
                    next_attempt_at BIGINT NOT NULL,
                    last_error TEXT,
                    sent_at BIGINT,
                    lease_until BIGINT,
                    lease_owner TEXT,
                    created_at BIGINT NOT NULL,
                    message TEXT NOT NULL,
                    UNIQUE (alert_id, channel, target)
                )
                """,
                "CREATE INDEX alert_deliveries_due ON alert_deliveries (state, next_attempt_at)",
                "ALTER TABLE people ADD COLUMN email TEXT",
            ]),
        // The safeguarding digests (docs/server.md, "Safeguarding digests").
        // `digest_claims` holds one row per digest and recipient: (kind, the
        // period's start in Unix ms, login) is the key, and the row is written
        // with INSERT ... ON CONFLICT DO NOTHING in the same transaction as the
        // digest's email in the outbox, so that a restart, or two server
        // instances on one PostgreSQL making the same digest at once, send it
        // once, and a digest is never claimed without its email. The email is
        // a row of `alert_deliveries` of kind `digest` (the alerts' rows are
        // `alert`): the message is the whole email, written when the digest
        // was made, and the outbox's leases and retries send it.
        Step(
            version: 9, summary: "digest claims, the outbox's kind of delivery",
            statements: [
                """
                CREATE TABLE digest_claims (
                    kind TEXT NOT NULL,
                    period_start BIGINT NOT NULL,
                    login TEXT NOT NULL,
                    period_end BIGINT NOT NULL,
                    address TEXT NOT NULL,
                    delivery_id TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    PRIMARY KEY (kind, period_start, login)
                )
                """,
                "ALTER TABLE alert_deliveries ADD COLUMN kind TEXT NOT NULL DEFAULT 'alert'",
            ]),
        // The filtering test and the annual review (docs/server.md, "The
        // filtering test"). A run keeps what it asked (`plan`: its groups,
        // names, and the categories the published policy blocked for each
        // group, as JSON) and a number of its own, which its alerts carry as
        // their negative record_sequence: one danger alert per run and
        // machine, as (machine, record_sequence, rule_id) is unique. A
        // machine answers a run once: `filtering_answers` (run, machine) is
        // written with ON CONFLICT DO NOTHING in the transaction of its
        // results. `reviews` are the recorded annual reviews, newest first.
        Step(
            version: 10, summary: "filtering test runs, answers and results; recorded reviews",
            statements: [
                """
                CREATE TABLE filtering_runs (
                    id TEXT PRIMARY KEY,
                    number BIGINT NOT NULL UNIQUE,
                    created_at BIGINT NOT NULL,
                    created_by TEXT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    bundle_version BIGINT NOT NULL,
                    policy_version BIGINT,
                    plan TEXT NOT NULL
                )
                """,
                "CREATE INDEX filtering_runs_created ON filtering_runs (created_at, id)",
                """
                CREATE TABLE filtering_answers (
                    run TEXT NOT NULL REFERENCES filtering_runs (id),
                    machine TEXT NOT NULL REFERENCES machines (id),
                    room TEXT NOT NULL,
                    answered_at BIGINT NOT NULL,
                    bundle_version BIGINT NOT NULL,
                    failures BIGINT NOT NULL,
                    alert_id TEXT,
                    PRIMARY KEY (run, machine)
                )
                """,
                """
                CREATE TABLE filtering_results (
                    run TEXT NOT NULL REFERENCES filtering_runs (id),
                    machine TEXT NOT NULL REFERENCES machines (id),
                    group_name TEXT NOT NULL,
                    name TEXT NOT NULL,
                    category TEXT NOT NULL,
                    expected TEXT NOT NULL,
                    actual TEXT NOT NULL,
                    actual_category TEXT,
                    reason TEXT NOT NULL,
                    bundle_version BIGINT NOT NULL,
                    PRIMARY KEY (run, machine, group_name, name, category)
                )
                """,
                """
                CREATE TABLE reviews (
                    id TEXT PRIMARY KEY,
                    time BIGINT NOT NULL,
                    reviewer TEXT NOT NULL,
                    note TEXT NOT NULL
                )
                """,
                "CREATE INDEX reviews_time ON reviews (time, id)",
            ]),
        // Retention per kind of record (docs/safeguarding.md, "How long things
        // are kept") removes the oldest access requests in batches, in the
        // order of their arrival; alerts (created_at), audit events (time) and
        // live items (ends_at) have such indexes already, and digest claims
        // are a few a person a week. The export of one person's records
        // (`GET /api/v1/people/{user}/export`) pages through their requests
        // newest first, as their alerts and records already can.
        Step(
            version: 11, summary: "access requests by arrival and by student, for retention and a person's export",
            statements: [
                "CREATE INDEX access_requests_received ON access_requests (received_at, id)",
                "CREATE INDEX access_requests_user_received ON access_requests (user_name, received_at, id)",
            ]),
    ]

    static var latest: Int { steps.last?.version ?? 0 }
}
