import FilterControl
import Foundation
import Logging
import Synchronization
import Testing

/// The server's request route in memory: it keeps each request once by id,
/// and can be down or refuse.
final class FakeRequestServer: SchoolTransport {
    enum Mode: Sendable { case up, down, refusing }

    struct State {
        var mode = Mode.up
        var endpoints: [String] = []
        /// Every request received, by id, the last copy (its text fields).
        var requests: [String: [String: String]] = [:]
        var posts = 0
    }

    let state = Mutex(State())

    func post(_ endpoint: String, body: [UInt8]) async throws(SchoolError) -> (status: Int, body: [UInt8]) {
        let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        let received = ((object["requests"] as? [[String: Any]]) ?? []).map { $0.compactMapValues { $0 as? String } }
        return try state.withLock { state throws(SchoolError) in
            state.endpoints.append(endpoint)
            switch state.mode {
            case .down: throw .unreachable(server: "fake", reason: "connection refused")
            case .refusing: return (503, Array(#"{"error":"unavailable","message":"the database is down"}"#.utf8))
            case .up: break
            }
            state.posts += 1
            for request in received {
                if let id = request["id"] { state.requests[id] = request }
            }
            return (200, Array(#"{"stored":1}"#.utf8))
        }
    }

    func set(_ mode: Mode) { state.withLock { $0.mode = mode } }
    var ids: Set<String> { state.withLock { Set($0.requests.keys) } }
}

@Suite struct AccessRequestForwarderTests {
    let folder: String
    var path: String { folder + "/requests.json" }

    init() throws { folder = try temporaryFolder() }

    func forwarder(_ server: FakeRequestServer, store: AccessRequestStore) -> AccessRequestForwarder {
        AccessRequestForwarder(
            transport: server, store: store, personName: { $0 == "kim" ? "kim" : "p-\($0)" },
            backoff: .init(initial: .milliseconds(10), maximum: .milliseconds(50)), logger: Logger(label: "test"))
    }

    @Test func requestsWaitWhileTheServerIsDownAndAreSentOnceItAnswers() async throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let server = FakeRequestServer()
        server.set(.down)
        let made = Date(timeIntervalSince1970: 1_800_000_000)
        do {
            let store = AccessRequestStore(path: path)
            _ = try store.submit(
                host: "games.example", url: "http://games.example/x", category: "games", reason: "for the project", user: "kim", group: "year9",
                now: made)
            let running = Task { await forwarder(server, store: store).run() }
            #expect(await eventually(within: 30) { server.state.withLock { $0.endpoints.count } >= 3 }, "tried again, with backoff")
            #expect(store.unsent().count == 1, "not sent while the server is down")
            running.cancel()
            await running.value
        }
        // filter-control starts again; the request is still to send; the server comes back.
        let store = AccessRequestStore(path: path)
        #expect(store.unsent().count == 1)
        server.set(.refusing)
        let running = Task { await forwarder(server, store: store).run() }
        try await Task.sleep(for: .milliseconds(100))
        #expect(store.unsent().count == 1, "a refusal is no delivery")
        server.set(.up)
        #expect(await eventually(within: 30) { store.unsent().isEmpty })
        // A request made while it runs goes at once (the store signals it).
        let second = try store.submit(host: "video.example", url: "https://video.example/", category: nil, reason: "film", user: "lee")
        #expect(await eventually(within: 30) { server.ids.contains(second.id) })
        running.cancel()
        await running.value

        let sent = try #require(server.state.withLock { $0.requests.values.first { $0["host"] == "games.example" } })
        #expect(server.state.withLock { Set($0.endpoints) } == ["/api/v1/machine/requests"])
        #expect(sent["user"] == "kim" && sent["group"] == "year9")
        #expect(sent["url"] == "http://games.example/x" && sent["category"] == "games")
        #expect(sent["reason"] == "for the project" && sent["created"] == "2027-01-15T08:00:00.000Z")
        #expect(server.state.withLock { $0.requests[second.id]?["user"] } == "p-lee", "named as log.users names people")
        #expect(AccessRequestStore(path: path).unsent().isEmpty, "marked sent in the file")
    }
}
