import Foundation
import Logging
import SchoolServer
import Synchronization
import Testing

/// Starting on PostgreSQL: quietly when the database is there, and with a
/// clear error at once when it is not (rather than the pool's retries for
/// a minute and a tripped circuit breaker).
@Suite struct PostgresStartTests {
    /// The schema is made as the server and the commands make it (the
    /// engine's run and the migration started together), three times on
    /// fresh databases: nothing is logged at warning or above. postgres-nio
    /// warned when a query reached its pool before the pool's run.
    @Test func aCleanStartLogsNoWarning() async throws {
        let logs = CollectedLogs()
        var logger = Logger(label: "hallpass-server-tests") { _ in CollectingLogHandler(logs: logs) }
        logger.logLevel = .info
        for _ in 0..<3 {
            try await withTestDatabase(.postgres) { location async throws in
                let applied = try await withServerStorage(location, logger: logger) { storage async throws in
                    try await storage.appliedMigrations()
                }
                #expect(!applied.isEmpty)
            }
        }
        #expect(logs.atWarningOrAbove == [])
    }

    /// No server at the socket: open says so and names the database.
    @Test func aServerThatIsDownIsReportedAtOpen() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-no-postgres-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let location = PostgresLocation(socketDirectory: folder, port: 5432, user: "postgres", database: "hallpass")
        let message = try await openingFails(.postgres(location))
        #expect(message.contains("cannot open the database \(location)"), "\(message)")
        #expect(message.contains("cannot connect"), "\(message)")
    }

    /// A login the server refuses (here a role it does not know; the tests'
    /// cluster trusts every local login, so a wrong password cannot be
    /// refused there): open gives the server's own words.
    @Test func aRefusedLoginIsReportedAtOpen() async throws {
        try await withTestDatabase(.postgres) { location async throws in
            guard case .postgres(var postgres) = location else { return }
            postgres.user = "nobody_\(UUID().uuidString.prefix(8).lowercased())"
            let message = try await openingFails(.postgres(postgres))
            #expect(message.contains("the server refused"), "\(message)")
            #expect(message.contains(postgres.user), "\(message)")
        }
    }

    /// The description of the error `SQLStorage.open` throws; records an
    /// issue when it opens instead.
    func openingFails(_ location: DatabaseLocation) async throws -> String {
        do {
            let storage = try await SQLStorage.open(location, logger: testLogger)
            await storage.close()
            Issue.record("\(location) opened")
            return ""
        } catch let error as StorageError {
            return error.description
        }
    }
}

/// What was logged, kept for a test to read.
final class CollectedLogs: Sendable {
    private let lines = Mutex<[(level: Logger.Level, message: String)]>([])

    func append(_ level: Logger.Level, _ message: String) { lines.withLock { $0.append((level, message)) } }

    var atWarningOrAbove: [String] { lines.withLock { $0.filter { $0.level >= .warning }.map(\.message) } }
}

struct CollectingLogHandler: LogHandler {
    let logs: CollectedLogs
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        logs.append(event.level, "\(event.message) \(event.metadata ?? [:])")
    }
}
