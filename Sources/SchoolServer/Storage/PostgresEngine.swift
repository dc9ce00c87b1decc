import Logging
import NIOCore
import NIOSSL
import PostgresNIO

/// The engine for districts and for several server instances: PostgreSQL
/// through postgres-nio's connection pool, which `run()` drives.
final class PostgresEngine: SQLEngine {
    let name = "postgres"
    private let client: PostgresClient
    private let logger: Logger

    init(location: PostgresLocation, logger: Logger) {
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
        self.logger = logger
    }

    func query(_ sql: String, _ binds: [SQLValue]) async throws -> [SQLRow] {
        try await PostgresEngine.rows(client.query(PostgresEngine.query(sql, binds), logger: logger))
    }

    func transaction<T: Sendable>(_ body: @Sendable (any SQLSession) async throws -> T) async throws -> T {
        try await client.withTransaction(logger: logger) { connection in
            try await body(PostgresSession(connection: connection, logger: logger))
        }
    }

    func run() async {
        await client.run()
    }

    func close() async {}

    static func query(_ sql: String, _ binds: [SQLValue]) -> PostgresQuery {
        var bindings = PostgresBindings(capacity: binds.count)
        for bind in binds {
            switch bind {
            case .integer(let value): bindings.append(value)
            case .text(let value): bindings.append(value)
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
