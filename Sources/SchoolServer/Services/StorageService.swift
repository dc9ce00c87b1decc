public import ServiceLifecycle

/// The storage's engine as a service: it brings the schema up to date
/// (while the engine runs: PostgreSQL's pool needs its `run()`), then says
/// so to whoever waits (the HTTP listener, retention), and runs until
/// shutdown. Started before the HTTP server and, services stopping in
/// reverse order, stopped after it, so that no request finds the database
/// closed.
public struct StorageService: Service {
    let storage: any ServerStorage
    let ready: StorageReadiness

    public init(storage: any ServerStorage, ready: StorageReadiness) {
        self.storage = storage
        self.ready = ready
    }

    public func run() async throws {
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await storage.run() }
                do {
                    _ = try await storage.migrate()
                } catch {
                    await ready.fail(error)
                    throw error
                }
                await ready.succeed()
                try? await gracefulShutdown()
                group.cancelAll()
            }
        } catch {
            await storage.close()
            throw error
        }
        await storage.close()
    }
}

/// Whether the storage's schema is in place: waited for once, by several.
public actor StorageReadiness {
    private var outcome: Result<Void, any Error>?
    private var waiting: [CheckedContinuation<Void, any Error>] = []

    public init() {}

    func succeed() { finish(.success(())) }
    func fail(_ error: any Error) { finish(.failure(error)) }

    private func finish(_ result: Result<Void, any Error>) {
        outcome = result
        for continuation in waiting { continuation.resume(with: result) }
        waiting = []
    }

    /// Returns once the schema is in place; throws what stopped it.
    public func wait() async throws {
        if let outcome { return try outcome.get() }
        try await withCheckedThrowingContinuation { waiting.append($0) }
    }
}
