import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import Synchronization

/// The engine for districts and for several server instances: PostgreSQL
/// through postgres-nio's connection pool, which `run()` drives.
final class PostgresEngine: SQLEngine {
    let name = "postgres"
    private let client: PostgresClient
    private let location: PostgresLocation
    private let logger: Logger
    /// Open once `run()` has started the pool: a query asked before waits
    /// here rather than at the pool, which would log a warning for each.
    private let started = StartGate()
    /// The queries and transactions under way, which the pool outlives.
    private let work = WorkInFlight()

    /// The engine for `location`, once one connection of its own has reached
    /// the database and logged in. The pool would retry a server that is
    /// down or a refused password for a minute and then report only that
    /// its circuit breaker tripped; this says what the server answered, or
    /// that it could not be reached, within a few seconds.
    static func open(location: PostgresLocation, logger: Logger) async throws -> PostgresEngine {
        try await check(location, logger: logger)
        return PostgresEngine(location: location, logger: logger)
    }

    private init(location: PostgresLocation, logger: Logger) {
        var configuration: PostgresClient.Configuration
        if let socketDirectory = location.socketDirectory {
            configuration = PostgresClient.Configuration(
                unixSocketPath: socketDirectory + "/.s.PGSQL.\(location.port)",
                username: location.user, password: location.password, database: location.database)
        } else {
            let tls: PostgresClient.Configuration.TLS
            switch location.tls {
            case .disable: tls = .disable
            case .prefer: tls = .prefer(.makeClientConfiguration())
            case .require: tls = .require(.makeClientConfiguration())
            }
            configuration = PostgresClient.Configuration(
                host: location.host ?? "localhost", port: location.port,
                username: location.user, password: location.password, database: location.database, tls: tls)
        }
        configuration.options.maximumConnections = 10
        client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.location = location
        self.logger = logger
    }

    /// Listens on `channel` on a connection of its own (a connection of the
    /// pool would go back to it with the LISTEN still on), calling `changed`
    /// with each notification's payload; `ready` once the LISTEN is in place.
    /// Returns when the task is cancelled; throws when the connection fails.
    func listen(
        channel: String, ready: @Sendable () async -> Void, _ changed: @escaping @Sendable (String) async -> Void
    ) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: try Self.connectionConfiguration(location), id: 1, logger: logger)
        do {
            // Closing the connection is what ends the wait for notifications: a
            // cancelled task (the server stopping, a test's server cancelled as
            // it starts) must not wait on a LISTEN that nothing will ever answer.
            try await withTaskCancellationHandler {
                try Task.checkCancellation()
                try await connection.listen(on: channel) { notifications in
                    await ready()
                    for try await notification in notifications { await changed(notification.payload) }
                }
            } onCancel: {
                let _: EventLoopFuture<Void> = connection.close()
            }
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }

    func query(_ sql: String, _ binds: [SQLValue]) async throws -> [SQLRow] {
        try work.begin()
        defer { work.end() }
        await started.wait()
        return try await PostgresEngine.rows(client.query(PostgresEngine.query(sql, binds), logger: logger))
    }

    func transaction<T: Sendable>(_ body: @Sendable (any SQLSession) async throws -> T) async throws -> T {
        try work.begin()
        defer { work.end() }
        await started.wait()
        return try await client.withTransaction(logger: logger) { connection in
            try await body(PostgresSession(connection: connection, logger: logger))
        }
    }

    /// Runs the pool until the task is cancelled, then stops it only once
    /// the queries under way have ended (or `drainSeconds` have passed).
    ///
    /// A server's services are all cancelled at once when its run is
    /// cancelled (a service that failed, a test's server). postgres-nio
    /// 1.33's pool, cancelled while it was still opening a connection for
    /// a waiting query, left that query waiting for ever, and sometimes its
    /// own `run()` with it ("Connection creation failed: CancellationError"):
    /// the server never stopped. With the pool still running, each query's
    /// own cancellation ends it as postgres-nio means it to, and the pool
    /// stops with nothing waiting on it. A pool that still does not end
    /// within `drainSeconds` of that is left behind, logged, rather than
    /// keeping the server from stopping (the process ends next).
    func run() async {
        let client = client
        let started = started
        let pool = Task {
            // Opened just before the client's run, which marks itself running at
            // its first step: no suspension lies between, while a waiting query
            // has to be scheduled again before it reaches the pool.
            started.open()
            await client.run()
        }
        let ended = EndSignal()
        Task {
            await pool.value
            ended.fire()
        }
        await withTaskCancellationHandler {
            await ended.wait()
        } onCancel: {
            let work = work
            let logger = logger
            Task {
                work.close()
                if await !work.drained(within: .seconds(Self.drainSeconds)) {
                    logger.warning("stopping the PostgreSQL pool with queries still under way after \(Self.drainSeconds) s")
                }
                pool.cancel()
                try? await Task.sleep(for: .seconds(Self.drainSeconds))
                if !ended.hasFired {
                    logger.error("the PostgreSQL pool did not stop within \(Self.drainSeconds) s of being asked; left behind")
                    ended.fire()
                }
            }
        }
    }

    static let drainSeconds: Int64 = 10

    /// Connects once, logs in, and closes: a clear error for a server that
    /// is down, does not answer, or refuses the login.
    static func check(_ location: PostgresLocation, logger: Logger) async throws {
        var configuration = try connectionConfiguration(location)
        configuration.options.connectTimeout = .seconds(checkTimeoutSeconds)
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
        } catch {
            throw StorageError.cannotOpen(location: location.description, reason: reason(error))
        }
        try? await connection.close()
    }

    /// The configuration of one connection of its own to `location`.
    static func connectionConfiguration(_ location: PostgresLocation) throws -> PostgresConnection.Configuration {
        var configuration: PostgresConnection.Configuration
        do {
            if let socketDirectory = location.socketDirectory {
                configuration = PostgresConnection.Configuration(
                    unixSocketPath: socketDirectory + "/.s.PGSQL.\(location.port)",
                    username: location.user, password: location.password, database: location.database)
            } else {
                let tls: PostgresConnection.Configuration.TLS
                switch location.tls {
                case .disable: tls = .disable
                case .prefer: tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
                case .require: tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
                }
                configuration = PostgresConnection.Configuration(
                    host: location.host ?? "localhost", port: location.port,
                    username: location.user, password: location.password, database: location.database, tls: tls)
            }
        } catch {
            throw StorageError.cannotOpen(location: location.description, reason: "TLS: \(error)")
        }
        return configuration
    }

    static let checkTimeoutSeconds: Int64 = 5

    /// What went wrong, in words: PSQLError's own description hides every
    /// detail (it could hold a query's values); a login refused or a
    /// connection failed holds none.
    static func reason(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return "\(error)" }
        if let message = error.serverInfo?[.message] {
            let code = error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? ""
            return "the server refused: \(message)\(code)"
        }
        if let underlying = error.underlying {
            if case ChannelError.connectTimeout = underlying {
                return "no answer within \(checkTimeoutSeconds) s"
            }
            return "cannot connect: \(underlying)"
        }
        return "\(error.code)"
    }

    func close() async {}

    static func query(_ sql: String, _ binds: [SQLValue]) -> PostgresQuery {
        var bindings = PostgresBindings(capacity: binds.count)
        for bind in binds {
            switch bind {
            case .integer(let value): bindings.append(value)
            case .text(let value): bindings.append(value)
            case .bytes(let value): bindings.append(ByteBuffer(bytes: value))
            case .null: bindings.appendNull()
            }
        }
        // The text is the server's own statement; every value travels as a bound parameter.
        return PostgresQuery(unsafeSQL: sql, binds: bindings)
    }

    static func rows(_ sequence: PostgresRowSequence) async throws -> [SQLRow] {
        var result: [SQLRow] = []
        for try await row in sequence {
            var values: [String: SQLValue] = [:]
            for cell in row {
                guard cell.bytes != nil else {
                    values[cell.columnName] = .null
                    continue
                }
                switch cell.dataType {
                case .int2, .int4, .int8:
                    values[cell.columnName] = .integer(try cell.decode(Int64.self))
                case .bool:
                    values[cell.columnName] = .integer(try cell.decode(Bool.self) ? 1 : 0)
                case .bytea:
                    values[cell.columnName] = .bytes(Array(buffer: try cell.decode(ByteBuffer.self)))
                default:
                    values[cell.columnName] = .text(try cell.decode(String.self))
                }
            }
            result.append(SQLRow(values: values))
        }
        return result
    }
}

private struct PostgresSession: SQLSession {
    let connection: PostgresConnection
    let logger: Logger

    func query(_ sql: String, _ binds: [SQLValue]) async throws -> [SQLRow] {
        try await PostgresEngine.rows(connection.query(PostgresEngine.query(sql, binds), logger: logger))
    }
}

/// A gate that opens once and lets every waiter through from then on.
final class StartGate: Sendable {
    private let state = Mutex<(isOpen: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    func open() {
        let waiting = state.withLock { state in
            state.isOpen = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    func wait() async {
        if state.withLock({ $0.isOpen }) { return }
        await withCheckedContinuation { continuation in
            let isOpen = state.withLock { state in
                if !state.isOpen { state.waiting.append(continuation) }
                return state.isOpen
            }
            if isOpen { continuation.resume() }
        }
    }
}

/// The engine's queries under way: counted so that the pool stops after
/// them, and refused once the engine is closing (a query asked then would
/// wait on a pool that is about to stop).
final class WorkInFlight: Sendable {
    private let state = Mutex<(count: Int, closing: Bool)>((0, false))

    func begin() throws(CancellationError) {
        let refused = state.withLock { state in
            if state.closing { return true }
            state.count += 1
            return false
        }
        if refused { throw CancellationError() }
    }

    func end() {
        state.withLock { $0.count -= 1 }
    }

    func close() {
        state.withLock { $0.closing = true }
    }

    /// Whether every query under way ended within `limit` (looked at every
    /// 100 ms: this is a stop, once, not a path that needs waking).
    func drained(within limit: Duration) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while state.withLock({ $0.count }) > 0 {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return true
    }
}

/// Fired once; `wait()` returns from then on.
final class EndSignal: Sendable {
    private let state = Mutex<(fired: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    var hasFired: Bool { state.withLock { $0.fired } }

    func fire() {
        let waiting = state.withLock { state in
            if state.fired { return [CheckedContinuation<Void, Never>]() }
            state.fired = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                if state.fired { return true }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
