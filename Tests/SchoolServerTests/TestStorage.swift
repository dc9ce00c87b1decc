import Foundation
import Logging
import SchoolServer
import Testing

/// The two engines every storage test runs on.
enum Engine: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres
    var testDescription: String { rawValue }
}

let testLogger: Logger = {
    var logger = Logger(label: "hallpass-server-tests")
    logger.logLevel = .warning
    return logger
}()

/// A fresh, empty database on `engine`: an SQLite file in a temporary
/// folder, or a new database in the tests' own PostgreSQL cluster.
/// Removed after `body`, also when it throws.
func withTestDatabase<T: Sendable>(_ engine: Engine, _ body: (DatabaseLocation) async throws -> T) async throws -> T {
    switch engine {
    case .sqlite:
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-server-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        return try await body(.sqlite(path: folder + "/server.db"))
    case .postgres:
        let cluster = try await SharedPostgres.shared.acquire()
        do {
            let name = try cluster.createDatabase()
            let result = try await body(
                .postgres(PostgresLocation(socketDirectory: cluster.socketDirectory, port: cluster.port, user: "postgres", database: name)))
            await SharedPostgres.shared.release()
            return result
        } catch {
            await SharedPostgres.shared.release()
            throw error
        }
    }
}

/// Open, migrated storage on a fresh database of `engine`.
func withTestStorage<T: Sendable>(_ engine: Engine, _ body: @Sendable (SQLStorage) async throws -> T) async throws -> T {
    try await withTestDatabase(engine) { location in
        try await withServerStorage(location, logger: testLogger, body)
    }
}
