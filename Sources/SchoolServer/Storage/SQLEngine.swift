import Logging

/// A value bound to a query's parameter or read from a row. The server's
/// tables hold whole numbers, text (times are Unix seconds or milliseconds)
/// and, for the lists and bundle files of publishing, bytes (SQLite's BLOB,
/// PostgreSQL's BYTEA), so both engines read and write the same values.
public enum SQLValue: Sendable, Hashable {
    case integer(Int64)
    case text(String)
    case bytes([UInt8])
    case null

    public var integer: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    public var text: String? {
        if case .text(let value) = self { return value }
        return nil
    }

    public var bytes: [UInt8]? {
        if case .bytes(let value) = self { return value }
        return nil
    }
}

extension SQLValue {
    init(_ value: Int) { self = .integer(Int64(value)) }
    init(_ value: Int64) { self = .integer(value) }
    init(_ value: String) { self = .text(value) }
    init(_ value: Int?) { self = value.map { .integer(Int64($0)) } ?? .null }
    init(_ value: Int64?) { self = value.map { .integer($0) } ?? .null }
    init(_ value: String?) { self = value.map { .text($0) } ?? .null }
    init(_ value: [UInt8]) { self = .bytes(value) }
    init(_ value: [UInt8]?) { self = value.map { .bytes($0) } ?? .null }
}

/// One row of a result, by column name.
public struct SQLRow: Sendable {
    public var values: [String: SQLValue]

    public init(values: [String: SQLValue]) {
        self.values = values
    }

    func integer(_ column: String) throws(StorageError) -> Int64 {
        guard let value = values[column]?.integer else { throw StorageError.unexpectedRow(column: column) }
        return value
    }

    func optionalInteger(_ column: String) -> Int64? { values[column]?.integer }

    func text(_ column: String) throws(StorageError) -> String {
        guard let value = values[column]?.text else { throw StorageError.unexpectedRow(column: column) }
        return value
    }

    func optionalText(_ column: String) -> String? { values[column]?.text }

    func bytes(_ column: String) throws(StorageError) -> [UInt8] {
        guard let value = values[column]?.bytes else { throw StorageError.unexpectedRow(column: column) }
        return value
    }

    func optionalBytes(_ column: String) -> [UInt8]? { values[column]?.bytes }
}

/// Where queries run: the connection itself, or one transaction on it.
/// Statements are written once, with PostgreSQL's `$1, $2, ...` parameters
/// (SQLite reads them as `?1, ?2, ...`); values are always bound, never
/// written into the text.
public protocol SQLSession: Sendable {
    func query(_ sql: String, _ binds: [SQLValue]) async throws -> [SQLRow]
}

extension SQLSession {
    @discardableResult
    func run(_ sql: String, _ binds: SQLValue...) async throws -> [SQLRow] {
        try await query(sql, binds)
    }
}

/// A database engine under `SQLStorage`: SQLite (sqlite-nio) or PostgreSQL (postgres-nio).
public protocol SQLEngine: SQLSession {
    /// `sqlite` or `postgres`, for logs, metrics and tests.
    var name: String { get }
    /// Runs `body` in one transaction: committed when it returns, rolled back when it throws.
    func transaction<T: Sendable>(_ body: @Sendable (any SQLSession) async throws -> T) async throws -> T
    /// Runs what the engine needs while it is used (PostgreSQL's connection pool);
    /// returns when the task is cancelled.
    func run() async
    /// Closes the connections; nothing may be asked after.
    func close() async
}

/// What went wrong with the server's storage, with a message an admin can act on.
public enum StorageError: Error, Sendable, CustomStringConvertible {
    case cannotOpen(location: String, reason: String)
    case unexpectedRow(column: String)
    case newerSchema(found: Int, known: Int)
    case failed(String)

    public var description: String {
        switch self {
        case .cannotOpen(let location, let reason):
            return "cannot open the database \(location): \(reason)"
        case .unexpectedRow(let column):
            return "the database answered a row without the expected column '\(column)'; is the schema the server's?"
        case .newerSchema(let found, let known):
            return "the database's schema is at version \(found), newer than this hallpass-server knows (\(known)); run the newer server"
        case .failed(let reason):
            return "database: \(reason)"
        }
    }
}
