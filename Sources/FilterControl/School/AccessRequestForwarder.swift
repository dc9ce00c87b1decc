import Foundation
public import Logging
public import NIOCore
public import NIOPosix
import Synchronization

/// Sends the block page's access requests to the school's server
/// (`POST /api/v1/machine/requests`, signed like every machine route), so
/// that the room's teachers see them in the console.
///
/// A request is marked sent (`AccessRequest.sentAt`, in the store's file)
/// only when the server answered 2xx; until then it waits in the store,
/// across restarts, and is sent again: after a failure (no connection, a
/// refusal) the next try waits `backoff` (1 s doubling to 5 min, ±20 %).
/// With nothing to send it sleeps until the block page records a request
/// (or a minute, for requests made before the machine was enrolled). The
/// server takes a request it has already (by the machine and the
/// request's id), so sending one twice does no harm.
public final class AccessRequestForwarder: Sendable {
    /// At most this many requests in one post (the server's bound).
    public static let maxRequests = 100

    /// What `filterctl status` could show; the tests read it.
    public struct Status: Sendable, Hashable {
        public var sent: UInt64 = 0
        /// The latest failure, nil once a post succeeds.
        public var error: String?
    }

    private let transport: any SchoolTransport
    private let store: AccessRequestStore
    private let personName: @Sendable (String) -> String?
    private let backoff: SchoolReporter.Backoff
    private let logger: Logger
    private let loop: any EventLoop
    private let shared = Mutex(Status())

    /// - Parameter personName: how the school is to name a local user (as
    ///   `log.users` names people in the records: the name, a pseudonym, or nil).
    public init(
        transport: any SchoolTransport, store: AccessRequestStore, personName: @escaping @Sendable (String) -> String?,
        backoff: SchoolReporter.Backoff = .init(), logger: Logger, loop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any()
    ) {
        self.transport = transport
        self.store = store
        self.personName = personName
        self.backoff = backoff
        self.logger = logger
        self.loop = loop
    }

    public var status: Status { shared.withLock { $0 } }

    /// Sends until the calling task is cancelled.
    public func run() async {
        var failures = 0
        while !Task.isCancelled {
            let waiting = store.unsent()
            guard !waiting.isEmpty else {
                await store.submitted.wait(timeout: .seconds(60), loop: loop)
                continue
            }
            if let error = await send(Array(waiting.prefix(Self.maxRequests))) {
                failures += 1
                let first = shared.withLock { status in
                    defer { status.error = error }
                    return status.error == nil
                }
                if first {
                    logger.warning(
                        "school: cannot send access requests; they wait and are sent again",
                        metadata: ["hallpass.error": "\(error)", "hallpass.requests.waiting": "\(waiting.count)"])
                }
                await Wakeup.sleep(backoff.delay(afterFailures: failures), loop: loop)
            } else {
                if failures > 0 { logger.notice("school: access requests reach the server again") }
                failures = 0
            }
        }
    }

    /// One post of `requests`; nil when the server took them (and they are marked sent).
    func send(_ requests: [AccessRequest]) async -> String? {
        let body: [UInt8]
        do {
            body = try encode(requests)
        } catch {
            return "cannot encode the requests: \(error)"
        }
        let answer: (status: Int, body: [UInt8])
        do {
            answer = try await transport.post("/api/v1/machine/requests", body: body)
        } catch {
            return "\(error) [\(error.code)]"
        }
        guard (200..<300).contains(answer.status) else {
            let error = SchoolConnection.refusal(status: answer.status, body: answer.body)
            return "\(error) [\(error.code)]"
        }
        do {
            try store.markSent(Set(requests.map(\.id)))
        } catch {
            // The server has them; the next post sends them again, and the server keeps one of each.
            return "the server took the requests, but the store cannot note it: \(error.message)"
        }
        shared.withLock { status in
            status.sent += UInt64(requests.count)
            status.error = nil
        }
        logger.info("school: sent \(requests.count) access request(s)", metadata: ["hallpass.requests": "\(requests.map(\.id).joined(separator: ","))"])
        return nil
    }

    /// The body of the post: `{"requests": [{id, user, group, host, url, category, reason, created}]}`.
    func encode(_ requests: [AccessRequest]) throws -> [UInt8] {
        struct Body: Encodable {
            struct Item: Encodable {
                let id: String
                let user: String?
                let group: String?
                let host: String
                let url: String
                let category: String?
                let reason: String
                let created: String
            }
            let requests: [Item]
        }
        let items = requests.map { request in
            Body.Item(
                id: request.id, user: request.user.flatMap(personName), group: request.group, host: request.host, url: request.url,
                category: request.category, reason: request.reason, created: AuditTime.format(request.createdAt))
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(Body(requests: items)))
    }
}
