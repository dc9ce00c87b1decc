import Logging
import NIOCore
import SQLiteNIO

/// The embedded engine: one SQLite file (sqlite-nio), one connection.
/// Every query and transaction goes through one gate, so that a transaction's
/// statements are never interleaved with another task's on the shared
/// connection. WAL mode and a busy timeout let `hallpass-server token create`
/// write while the server runs.
final class SQLiteEngine: SQLEngine {
    let name = "sqlite"
    private let connection: SQLiteConnection
    private let gate = SerialGate()

    private init(connection: SQLiteConnection) {
        self.connection = connection
    }

    static func open(path: String, logger: Logger) async throws -> SQLiteEngine {
        let connection: SQLiteConnection
        do {
            connection = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
        } catch {
            throw StorageError.cannotOpen(location: path, reason: "\(error)")
        }
        let engine = SQLiteEngine(connection: connection)
        let session = SQLiteSession(connection: connection)
        do {
            _ = try await session.query("PRAGMA busy_timeout = 10000", [])
            _ = try await session.query("PRAGMA journal_mode = WAL", [])
            _ = try await session.query("PRAGMA foreign_keys = ON", [])
        } catch {
            await engine.close()
            throw StorageError.cannotOpen(location: path, reason: "\(error)")
        }
        return engine
    }

    func query(_ sql: String, _ binds: [SQLValue]) async throws -> [SQLRow] {
        await gate.enter()
        do {
            let rows = try await SQLiteSession(connection: connection).query(sql, binds)
            await gate.leave()
            return rows
        } catch {
            await gate.leave()
            throw error
        }
    }

    func transaction<T: Sendable>(_ body: @Sendable (any SQLSession) async throws -> T) async throws -> T {
        await gate.enter()
        let session = SQLiteSession(connection: connection)
        do {
            // IMMEDIATE: take the write lock at the start, so that two processes
            // on one file wait for each other instead of failing at the first write.
            _ = try await session.query("BEGIN IMMEDIATE", [])
        } catch {
            await gate.leave()
            throw error
        }
        do {
            let result = try await body(session)
            _ = try await session.query("COMMIT", [])
            await gate.leave()
            return result
        } catch {
            _ = try? await session.query("ROLLBACK", [])
            await gate.leave()
            throw error
        }
    }

    func run() async {
        // Nothing runs beside the connection; wait until the owner stops.
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(3600))
        }
    }

    func close() async {
        await gate.enter()
        // In a task of its own: closing must happen also when the caller's
        // task is being cancelled (a stopping server), or the file stays open.
        let connection = connection
        await Task { try? await connection.close() }.value
        await gate.leave()
    }
}

/// Statements on the SQLite connection as they are (the gate is the engine's).
private struct SQLiteSession: SQLSession {
    let connection: SQLiteConnection

    func query(_ sql: String, _ binds: [SQLValue]) async throws -> [SQLRow] {
        // `$1` in the shared statements is SQLite's `?1`: the same numbered parameter.
        let text = sql.replacingOccurrences(of: "$", with: "?")
        let data: [SQLiteData] = binds.map {
            switch $0 {
            case .integer(let value): return .integer(SQLiteInt64(value))
            case .text(let value): return .text(value)
            case .bytes(let value): return .blob(ByteBuffer(bytes: value))
            case .null: return .null
            }
        }
        let rows = try await connection.query(text, data)
        return rows.map { row in
            var values: [String: SQLValue] = [:]
            for column in row.columns {
                switch column.data {
                case .integer(let value): values[column.name] = .integer(Int64(value))
                case .text(let value): values[column.name] = .text(value)
                case .float(let value): values[column.name] = .integer(Int64(value))
                case .blob(let buffer): values[column.name] = .bytes(Array(buffer: buffer))
                case .null: values[column.name] = .null
                }
            }
            return SQLRow(values: values)
        }
    }
}

/// One task at a time, in the order they came (an async mutex).
actor SerialGate {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func enter() async {
        if !busy {
            busy = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func leave() {
        if waiting.isEmpty {
            busy = false
        } else {
            // Handed over directly: `busy` stays true for the next one.
            waiting.removeFirst().resume()
        }
    }
}
