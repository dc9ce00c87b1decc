import Foundation

/// What `GET /api/v1/records` asks of the storage: filters that all apply
/// (AND), where the page starts, and how many records it holds. Records come
/// in one stable order, by time, then machine, then sequence, which is also
/// the order of the key `(time, machine, sequence)` that the cursor names.
public struct RecordQuery: Sendable, Hashable {
    /// Records at or after this time (Unix ms).
    public var since: Int64?
    /// Records before this time (Unix ms).
    public var until: Int64?
    public var user: String?
    public var machine: String?
    /// The machine's room, as it enrolled.
    public var room: String?
    public var group: String?
    public var action: String?
    public var category: String?
    /// `dns`, `tls`, `http`, ... as the machine wrote it.
    public var kind: String?
    /// The page starts after this record; nil: at the first.
    public var after: RecordCursor?
    /// The most records in the page.
    public var limit: Int
    /// Who asks may see only these records: those of a machine in one of its
    /// rooms or of a user in one of its groups (`Scope.contains`). Applied
    /// with the filters, never instead of them.
    public var scope: Scope

    public init(
        since: Int64? = nil, until: Int64? = nil, user: String? = nil, machine: String? = nil, room: String? = nil,
        group: String? = nil, action: String? = nil, category: String? = nil, kind: String? = nil, after: RecordCursor? = nil,
        limit: Int = 100, scope: Scope = .school
    ) {
        self.scope = scope
        self.since = since
        self.until = until
        self.user = user
        self.machine = machine
        self.room = room
        self.group = group
        self.action = action
        self.category = category
        self.kind = kind
        self.after = after
        self.limit = limit
    }
}

/// Where a page ends: the key of its last record. A client sees it only as
/// an opaque token (`next`), so that the key may change without breaking
/// anyone's scripts; the token is checked strictly when it comes back.
public struct RecordCursor: Sendable, Hashable {
    public var time: Int64
    public var machine: String
    public var sequence: Int64

    public init(time: Int64, machine: String, sequence: Int64) {
        self.time = time
        self.machine = machine
        self.sequence = sequence
    }

    static let prefix = "r1."

    /// `r1.` and the base64url (no padding) of `<time>.<machine>.<sequence>`.
    public var token: String {
        Self.prefix + Secrets.base64URL(Array("\(time).\(machine).\(sequence)".utf8))
    }

    /// The cursor a `token` names; nil for anything this server did not make.
    public init?(token: String) {
        guard token.utf8.count <= 128, token.hasPrefix(Self.prefix) else { return nil }
        let encoded = token.dropFirst(Self.prefix.count)
        guard !encoded.isEmpty, encoded.utf8.allSatisfy(Secrets.isBase64URL) else { return nil }
        var base64 = encoded.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let text = String(data: data, encoding: .utf8) else { return nil }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), parts[2].utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
            let time = Int64(parts[0]), let sequence = Int64(parts[2]), sequence >= 1, Secrets.isMachineID(String(parts[1]))
        else { return nil }
        self.init(time: time, machine: String(parts[1]), sequence: sequence)
    }
}

/// A record as the query answers it: the stored record with its machine's
/// room and host name.
public struct QueriedRecord: Sendable, Hashable {
    public var stored: StoredRecord
    public var room: String
    public var hostname: String

    public init(stored: StoredRecord, room: String, hostname: String) {
        self.stored = stored
        self.room = room
        self.hostname = hostname
    }
}

/// One page of records, and where the next one starts (nil on the last page).
public struct RecordPage: Sendable, Hashable {
    public var records: [QueriedRecord]
    public var next: RecordCursor?

    public init(records: [QueriedRecord], next: RecordCursor?) {
        self.records = records
        self.next = next
    }
}

extension SQLStorage {
    /// The statement and its values for `query`, apart from running it, so
    /// that a test can ask each engine how it would run it (EXPLAIN). Every
    /// value is a bound parameter; only the server's own fragments are text.
    func recordsStatement(_ query: RecordQuery) -> (sql: String, binds: [SQLValue]) {
        var conditions: [String] = []
        var binds: [SQLValue] = []
        func bind(_ value: SQLValue) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        if let since = query.since { conditions.append("time >= \(bind(.integer(since)))") }
        if let until = query.until { conditions.append("time < \(bind(.integer(until)))") }
        if let user = query.user { conditions.append("user_name = \(bind(.text(user)))") }
        if let machine = query.machine { conditions.append("machine = \(bind(.text(machine)))") }
        // A subquery rather than a join: the planner keeps to one table and
        // its (time, machine, sequence) order, and reads rooms for the page only.
        if let room = query.room { conditions.append("machine IN (SELECT id FROM machines WHERE room = \(bind(.text(room))))") }
        if let group = query.group { conditions.append("group_name = \(bind(.text(group)))") }
        if let action = query.action { conditions.append("action = \(bind(.text(action)))") }
        if let category = query.category { conditions.append("category = \(bind(.text(category)))") }
        if let kind = query.kind { conditions.append("kind = \(bind(.text(kind)))") }
        if let scoped = Self.scopeCondition(query.scope, bind: bind) { conditions.append(scoped) }
        if let after = query.after {
            let time = bind(.integer(after.time))
            let machine = bind(.text(after.machine))
            let sequence = bind(.integer(after.sequence))
            // Written out rather than as a row value `(time, machine, sequence) > (...)`:
            // the leading `time >= ...` is what lets either engine start the
            // user or machine index's range at the cursor.
            conditions.append(
                "time >= \(time) AND (time > \(time) OR machine > \(machine) OR (machine = \(machine) AND sequence > \(sequence)))")
        }
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        // One more than the page: whether there is a next page, without a count.
        let limit = bind(.integer(Int64(query.limit) + 1))
        return ("SELECT * FROM records\(filter) ORDER BY time, machine, sequence LIMIT \(limit)", binds)
    }

    /// The condition that keeps records to `scope` (nil for the whole school):
    /// the machine's room in the scope's rooms, or the record's group in its
    /// groups. Rooms through a subquery, as the room filter does.
    static func scopeCondition(_ scope: Scope, bind: (SQLValue) -> String) -> String? {
        guard !scope.isWholeSchool else { return nil }
        var either: [String] = []
        if !scope.rooms.isEmpty {
            let rooms = scope.rooms.map { bind(.text($0)) }.joined(separator: ", ")
            either.append("machine IN (SELECT id FROM machines WHERE room IN (\(rooms)))")
        }
        if !scope.groups.isEmpty {
            either.append("group_name IN (\(scope.groups.map { bind(.text($0)) }.joined(separator: ", ")))")
        }
        return "(" + either.joined(separator: " OR ") + ")"
    }

    public func queryRecords(_ query: RecordQuery) async throws -> RecordPage {
        let statement = recordsStatement(query)
        var stored = try await engine.query(statement.sql, statement.binds).map(Self.record)
        var next: RecordCursor?
        if stored.count > query.limit {
            stored.removeLast(stored.count - query.limit)
            if let last = stored.last {
                next = RecordCursor(time: last.timeMilliseconds, machine: last.machine, sequence: last.record.sequence)
            }
        }
        // The rooms and host names of the page's machines, in one statement.
        let machineIDs = Array(Set(stored.map(\.machine))).sorted()
        var machines: [String: (room: String, hostname: String)] = [:]
        if !machineIDs.isEmpty {
            let placeholders = (1...machineIDs.count).map { "$\($0)" }.joined(separator: ", ")
            let rows = try await engine.query(
                "SELECT id, room, hostname FROM machines WHERE id IN (\(placeholders))", machineIDs.map { SQLValue($0) })
            for row in rows { machines[try row.text("id")] = (try row.text("room"), try row.text("hostname")) }
        }
        let records = stored.map {
            QueriedRecord(stored: $0, room: machines[$0.machine]?.room ?? "", hostname: machines[$0.machine]?.hostname ?? "")
        }
        return RecordPage(records: records, next: next)
    }

    /// How the engine would run `query` (EXPLAIN QUERY PLAN on SQLite,
    /// EXPLAIN on PostgreSQL), one line per step: for the tests that check
    /// the indexes serve the filters.
    func explainRecordsQuery(_ query: RecordQuery) async throws -> String {
        let statement = recordsStatement(query)
        let prefix = engine.name == "sqlite" ? "EXPLAIN QUERY PLAN " : "EXPLAIN "
        let rows = try await engine.query(prefix + statement.sql, statement.binds)
        return rows.map { row in
            (row.optionalText("detail") ?? row.optionalText("QUERY PLAN") ?? row.values.values.compactMap(\.text).joined(separator: " "))
        }.joined(separator: "\n")
    }
}
