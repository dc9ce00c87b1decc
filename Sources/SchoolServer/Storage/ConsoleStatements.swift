import Foundation

/// Blocks of one category and host in a window, as the console's dashboard
/// counts them (`SQLStorage.blockCounts`).
public struct BlockCount: Sendable, Hashable {
    /// nil: blocked by no category (a deny rule, a bypass, ...).
    public var category: String?
    public var host: String?
    public var count: Int64

    public init(category: String?, host: String?, count: Int64) {
        self.category = category
        self.host = host
        self.count = count
    }
}

/// The console's read-only queries (docs/console.md). Each is bounded by a
/// time window on the records' time index, or reads one key; none scans
/// the records table whole.
extension SQLStorage {
    /// The blocks from `since` to `until` (Unix ms) in `scope`, counted by
    /// category and host together: one pass over the window's rows gives
    /// both the dashboard's blocks by category and its top blocked names.
    func blockCountsStatement(since: Int64, until: Int64, scope: Scope) -> (sql: String, binds: [SQLValue]) {
        var binds: [SQLValue] = []
        func bind(_ value: SQLValue) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        var conditions = ["time >= \(bind(.integer(since)))", "time < \(bind(.integer(until)))", "action = \(bind(.text("block")))"]
        if let scoped = Self.scopeCondition(scope, bind: bind) { conditions.append(scoped) }
        let sql =
            "SELECT category, host, COUNT(*) AS count FROM records WHERE " + conditions.joined(separator: " AND ")
            + " GROUP BY category, host"
        return (sql, binds)
    }

    public func blockCounts(since: Int64, until: Int64, scope: Scope) async throws -> [BlockCount] {
        let statement = blockCountsStatement(since: since, until: until, scope: scope)
        return try await engine.query(statement.sql, statement.binds).map { row in
            BlockCount(category: row.optionalText("category"), host: row.optionalText("host"), count: try row.integer("count"))
        }
    }

    /// How the engine would run `blockCounts` (as `explainRecordsQuery`).
    func explainBlockCounts(since: Int64, until: Int64, scope: Scope) async throws -> String {
        let statement = blockCountsStatement(since: since, until: until, scope: scope)
        return try await explain(statement.sql, statement.binds)
    }

    /// Every user name the records hold, sorted, at most `limit`: for the
    /// console to find whose pseudonym a search names. Read as a loose index
    /// scan of the (user_name, ...) index, one step per name, so that the
    /// cost follows the number of people (thousands), not of records (millions).
    static let userNamesStatement = """
        WITH RECURSIVE names(name) AS (
            SELECT MIN(user_name) FROM records
            UNION ALL
            SELECT (SELECT MIN(user_name) FROM records WHERE user_name > names.name) FROM names WHERE names.name IS NOT NULL
        )
        SELECT name FROM names WHERE name IS NOT NULL LIMIT $1
        """

    public func recordUserNames(limit: Int) async throws -> [String] {
        try await engine.query(Self.userNamesStatement, [.integer(Int64(limit))]).compactMap { $0.optionalText("name") }
    }

    func explainRecordUserNames() async throws -> String {
        try await explain(Self.userNamesStatement, [.integer(100_000)])
    }

    /// The key of the console's pseudonyms (32 random bytes), made on first
    /// use and kept in `server_state`, so that every server instance on one
    /// database gives a person the same pseudonym. Two instances making it at
    /// once: the first insert wins, and both read what it stored.
    public func pseudonymKey() async throws -> [UInt8] {
        let name = "consolePseudonymKey"
        if let stored = try await engine.run("SELECT value FROM server_state WHERE name = $1", SQLValue(name)).first?.text("value"),
            let key = Data(base64Encoded: stored), key.count == 32
        {
            return Array(key)
        }
        var generator = SystemRandomNumberGenerator()
        let fresh = Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
        try await engine.run(
            "INSERT INTO server_state (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", SQLValue(name), SQLValue(fresh))
        guard let stored = try await engine.run("SELECT value FROM server_state WHERE name = $1", SQLValue(name)).first?.text("value"),
            let key = Data(base64Encoded: stored), key.count == 32
        else { throw StorageError.failed("the console's pseudonym key in server_state is not 32 bytes of base64") }
        return Array(key)
    }

    func explain(_ sql: String, _ binds: [SQLValue]) async throws -> String {
        let prefix = engine.name == "sqlite" ? "EXPLAIN QUERY PLAN " : "EXPLAIN "
        let rows = try await engine.query(prefix + sql, binds)
        return rows.map { row in
            (row.optionalText("detail") ?? row.optionalText("QUERY PLAN") ?? row.values.values.compactMap(\.text).joined(separator: " "))
        }.joined(separator: "\n")
    }
}
