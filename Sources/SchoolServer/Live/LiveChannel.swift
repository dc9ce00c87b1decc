import Foundation
public import Logging
public import ServiceLifecycle

/// The live channel's parts one server process shares: the live key that
/// signs each state and the hub of held requests.
public struct LiveChannel: Sendable {
    public let key: LiveKey
    public let hub: LiveHub
    /// How often a slow look at the live sequence wakes every held request
    /// when it moved: the net under PostgreSQL's notifications (a listening
    /// connection that was down for a while).
    public let recheck: Duration

    public init(key: LiveKey, hub: LiveHub = LiveHub(), recheck: Duration = .seconds(10)) {
        self.key = key
        self.hub = hub
        self.recheck = recheck
    }

    /// The live state of a machine as the contract's section 3 writes it
    /// (docs/server.md, "The live channel"): the payload's bytes, signed.
    public struct Envelope: Codable, Sendable, Hashable {
        /// Base64 of the payload's bytes.
        public var payload: String
        /// Base64 of the Ed25519 signature over the payload's bytes.
        public var signature: String
        /// `ed25519:BASE64` of the key that signed.
        public var key: String
    }

    public struct Payload: Codable, Sendable, Hashable {
        public var format: Int
        public var machine: String
        public var room: String
        public var sequence: Int64
        public var issued: Int64
        public var items: [Item]
        public var requests: [RequestDecision]
    }

    public struct Item: Codable, Sendable, Hashable {
        public struct Scope: Codable, Sendable, Hashable {
            public var kind: String
            public var value: String
        }

        public var id: String
        public var sequence: Int64
        public var action: String
        public var targets: [String]
        public var scope: Scope
        public var from: Int64
        public var until: Int64
        public var by: String
        public var reason: String
        public var request: String?

        public init(_ stored: StoredLiveItem) {
            id = stored.id
            sequence = stored.sequence
            action = stored.item.action
            targets = stored.item.targets
            scope = Scope(kind: stored.item.scope.kind.rawValue, value: stored.item.scope.value)
            from = stored.item.from
            until = stored.item.until
            by = stored.item.byName
            reason = stored.item.reason
            request = stored.item.request
        }
    }

    /// A decision on an access request made on the machine (`LiveAccessRequests.decisions`).
    public struct RequestDecision: Codable, Sendable, Hashable {
        /// The machine's own id of the request.
        public var id: String
        /// `approved` or `denied`.
        public var state: String
        public var message: String?
        /// An approval's end (Unix seconds).
        public var until: Int64?
    }

    /// Signs `view`'s state for its machine.
    public func envelope(_ view: LiveView, requests: [RequestDecision] = [], now: Int64) throws -> Envelope {
        let payload = Payload(
            format: 1, machine: view.machine, room: view.room, sequence: view.sequence, issued: now, items: view.items.map(Item.init),
            requests: requests)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let bytes = Array(try encoder.encode(payload))
        return Envelope(
            payload: Data(bytes).base64EncodedString(), signature: Data(try key.signature(over: bytes)).base64EncodedString(),
            key: key.publicText)
    }
}

/// Brings changes made by other server instances to this one's hub (LISTEN
/// hallpass_live on PostgreSQL, reconnecting after a failure), looks at the
/// live sequence every `recheck` as a net, and, at shutdown, answers every
/// held request so that none keeps the shutdown waiting for its 30 s.
public struct LiveService: Service {
    let storage: any ServerStorage
    let ready: StorageReadiness
    let channel: LiveChannel
    let logger: Logger

    public init(storage: any ServerStorage, ready: StorageReadiness, channel: LiveChannel, logger: Logger) {
        self.storage = storage
        self.ready = ready
        self.channel = channel
        self.logger = logger
    }

    public func run() async throws {
        try await ready.wait()
        let hub = channel.hub
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await listen() }
                group.addTask { await recheck() }
                await group.waitForAll()
            }
        }
        await hub.close()
    }

    private func listen() async {
        let hub = channel.hub
        var failures = 0
        while !Task.isCancelled {
            do {
                let listened = try await storage.listenForLiveChanges(
                    ready: {
                        await hub.setListening(true)
                    },
                    { room in await hub.announce(room: room) })
                if !listened {
                    // SQLite: every change is this process's own.
                    await hub.setListening(true)
                    return
                }
            } catch {
                if Task.isCancelled { break }
                failures += 1
                logger.warning(
                    "the live channel's PostgreSQL listener failed; retrying (the \(channel.recheck) re-check still wakes machines)",
                    metadata: ["hallpass.error": "\(error)"])
            }
            await hub.setListening(false)
            // What happened while it was down: every room looks again.
            await hub.announce(room: SQLStorage.everyRoom)
            try? await Task.sleep(for: .seconds(min(30, 1 << min(failures, 5))))
        }
    }

    private func recheck() async {
        var seen = (try? await storage.liveSequence()) ?? 0
        while !Task.isCancelled {
            try? await Task.sleep(for: channel.recheck)
            guard !Task.isCancelled, let now = try? await storage.liveSequence() else { continue }
            if now != seen { await channel.hub.announce(room: SQLStorage.everyRoom) }
            seen = now
        }
    }
}
