import HallpassSystem
import HallpassWire
import Foundation
import NIOCore
import NIOPosix
import SharedStore
import Synchronization
import VerdictCore

/// The addresses of the SafeSearch enforcement hosts (forcesafesearch.google.com,
/// restrict.youtube.com, ...), which filter-data needs and cannot look up
/// itself (it has no network). filter-control asks the machine's resolvers
/// (`/etc/resolv.conf`) from a socket with the exemption mark, first before
/// filter-data starts (a few seconds at most), then whenever an answer is
/// due: at its time to live (at least 30 s, at most an hour), and after a
/// failed lookup again after 1, 2, 4, ... s (at most 30 s). It keeps every
/// address it saw within the last hour in the target it hands filter-data:
/// a browser holding an older answer still reaches the service, through an
/// address that enforces it. A lookup where A or AAAA got no reply counts
/// only when it brought IPv4 addresses, and is asked again soon; so an A
/// question never gets a CNAME without an address because the A query was
/// lost.
///
/// While an enforcement host has never been resolved (no network yet at
/// boot, a resolver that does not answer), the target is the addresses its
/// provider publishes for it, where hallpass knows them
/// (`publishedAddresses`), with a short time to live; the first resolved
/// answer replaces them. An engine without published addresses has no
/// target then, and filter-data keeps its names blocked (their flows reset).
final class SafeSearchResolver: Sendable {
    /// What a lookup of one host brought.
    struct Answer: Sendable, Equatable {
        var addresses: [IPAddress]
        /// The smallest time to live of the records.
        var timeToLive: UInt32
        /// Both questions (A and AAAA) were answered; false when one got no reply.
        var complete: Bool

        init(addresses: [IPAddress], timeToLive: UInt32, complete: Bool = true) {
            self.addresses = addresses
            self.timeToLive = timeToLive
            self.complete = complete
        }
    }

    struct Entry: Sendable {
        /// Each address and when an answer last named it.
        var seen: [IPAddress: Date] = [:]
        var timeToLive: UInt32 = 300
        var refreshAt: Date = .distantPast
        /// Lookups that failed (or came back incomplete) in a row: the retry delay grows with them.
        var failuresInARow = 0
        /// A failure was reported and no success since (it is reported once, not at every retry).
        var failing = false
    }

    /// What a refresh changed, for the log and for the hand-over to filter-data.
    struct Outcome: Sendable, Equatable {
        /// The targets of the engines asked about differ from before the refresh.
        var changed = false
        /// Log lines, each said once: when an enforcement host stops being
        /// resolvable, and when it is resolved again.
        var events: [Event] = []
    }

    enum Event: Sendable, Equatable {
        /// The first failure of a run of them, and what filter-data gets meanwhile.
        case unresolvable(SafeSearchEngine, reason: String, meanwhile: Meanwhile)
        /// The first success after a reported failure.
        case resolved(SafeSearchEngine, [IPAddress])
    }

    enum Meanwhile: Sendable, Equatable {
        /// The addresses of earlier answers (seen within the hour) stay.
        case known([IPAddress])
        /// The addresses the provider publishes for the host.
        case published([IPAddress])
        /// Nothing: the engine's names stay blocked.
        case blocked
    }

    private let state = Mutex<[SafeSearchEngine: Entry]>([:])
    private let lookUp: @Sendable (String) async -> Answer?
    private let published: [SafeSearchEngine: [IPAddress]]

    /// How long an address stays in the target after the last answer that named it.
    static let keepSeen: TimeInterval = 3600
    /// The first retry after a failed lookup, doubling up to `retryAtMost`.
    static let firstRetry: TimeInterval = 1
    static let retryAtMost: TimeInterval = 30
    /// The time to live of answers that carry published addresses: the
    /// resolved ones, when they come, reach browsers soon.
    static let publishedTimeToLive: UInt32 = 30

    /// The addresses the providers publish for their enforcement hosts, used
    /// while a host cannot be resolved. Google's, from its help page "Lock
    /// SafeSearch for devices & networks you manage" (support.google.com/websearch,
    /// answer 186669): forcesafesearch.google.com is 216.239.38.120 and
    /// 2001:4860:4802:32::78. No other provider's are listed here: hallpass
    /// takes only addresses the provider itself publishes, and the other
    /// engines stay blocked until their hosts resolve.
    static let publishedAddresses: [SafeSearchEngine: [IPAddress]] = [
        .google: [IPAddress("216.239.38.120")!, IPAddress("2001:4860:4802:32::78")!]
    ]

    init(published: [SafeSearchEngine: [IPAddress]] = SafeSearchResolver.publishedAddresses, lookUp: @escaping @Sendable (String) async -> Answer?) {
        self.published = published
        self.lookUp = lookUp
    }

    /// The resolver filter-control uses: the machine's name servers, asked from a marked socket.
    convenience init(socketMark: UInt32?) {
        self.init { host in
            await MarkedDNSClient(nameservers: MarkedDNSClient.systemNameservers(), socketMark: socketMark).addresses(of: host)
        }
    }

    /// The targets of `engines` at `now`: the addresses seen within the hour,
    /// or the published ones of an engine none was seen for; engines with
    /// neither are left out.
    func targets(for engines: Set<SafeSearchEngine>, now: Date) -> [SafeSearchEngine: SafeSearchTarget] {
        state.withLock { entries in
            var targets: [SafeSearchEngine: SafeSearchTarget] = [:]
            for engine in engines {
                if let entry = entries[engine] {
                    let addresses = Self.recent(entry, now: now)
                    if !addresses.isEmpty {
                        targets[engine] = SafeSearchTarget(addresses: addresses, timeToLive: entry.timeToLive)
                        continue
                    }
                }
                if let published = published[engine], !published.isEmpty {
                    targets[engine] = SafeSearchTarget(addresses: published, timeToLive: Self.publishedTimeToLive)
                }
            }
            return targets
        }
    }

    /// One line per engine for the log: where its names go now.
    func describe(_ engines: Set<SafeSearchEngine>, now: Date) -> String {
        let targets = targets(for: engines, now: now)
        let resolved = state.withLock { entries in Set(engines.filter { entries[$0].map { !Self.recent($0, now: now).isEmpty } ?? false }) }
        return engines.sorted { $0.rawValue < $1.rawValue }.map { engine in
            guard let target = targets[engine] else { return "\(engine.rawValue) blocked until \(engine.enforcementHost) resolves" }
            let addresses = target.addresses.map(\.description).joined(separator: " ")
            return "\(engine.rawValue) -> \(engine.enforcementHost) \(addresses)" + (resolved.contains(engine) ? "" : " (published; not resolved yet)")
        }.joined(separator: "; ")
    }

    private static func recent(_ entry: Entry, now: Date) -> [IPAddress] {
        entry.seen.filter { now.timeIntervalSince($0.value) <= keepSeen }.keys.sorted { $0.description < $1.description }
    }

    /// Looks up the enforcement hosts of `engines` that are due, all at once.
    /// `within` bounds the whole refresh (at start: filter-data waits for it);
    /// a lookup not done by then counts as failed and is tried again later.
    func refresh(engines: Set<SafeSearchEngine>, now: Date, within bound: Duration? = nil) async -> Outcome {
        let due = state.withLock { entries in engines.filter { (entries[$0]?.refreshAt ?? .distantPast) <= now } }
        guard !due.isEmpty else { return Outcome() }
        let before = targets(for: engines, now: now)
        let lookUp = self.lookUp
        var answers: [SafeSearchEngine: Answer] = [:]
        await withTaskGroup(of: (SafeSearchEngine, Answer?).self) { group in
            for engine in due {
                group.addTask {
                    guard let bound else { return (engine, await lookUp(engine.enforcementHost)) }
                    return (engine, await Self.first(of: { await lookUp(engine.enforcementHost) }, orNilAfter: bound))
                }
            }
            for await (engine, answer) in group {
                if let answer { answers[engine] = answer }
            }
        }
        var outcome = Outcome()
        for engine in due.sorted(by: { $0.rawValue < $1.rawValue }) {
            if let event = record(answers[engine], for: engine, now: now) { outcome.events.append(event) }
        }
        outcome.changed = targets(for: engines, now: now) != before
        return outcome
    }

    /// Keeps what one lookup brought; returns the event to log, if any.
    private func record(_ answer: Answer?, for engine: SafeSearchEngine, now: Date) -> Event? {
        state.withLock { entries in
            var entry = entries[engine] ?? Entry()
            defer {
                entry.seen = entry.seen.filter { now.timeIntervalSince($0.value) <= Self.keepSeen }
                entries[engine] = entry
            }
            // An answer counts when both questions were answered, or when the IPv4 one was:
            // an IPv6 answer alone could come from a lost A query.
            let usable = answer.map { !$0.addresses.isEmpty && ($0.complete || $0.addresses.contains(where: \.isIPv4)) } ?? false
            if let answer, usable {
                for address in answer.addresses { entry.seen[address] = now }
                let ttl = min(max(answer.timeToLive, 30), 3600)
                entry.timeToLive = min(ttl, 300)
                if answer.complete {
                    entry.failuresInARow = 0
                    entry.refreshAt = now.addingTimeInterval(TimeInterval(ttl))
                } else {
                    // The AAAA question is asked again soon, the addresses in hand used meanwhile.
                    entry.failuresInARow += 1
                    entry.refreshAt = now.addingTimeInterval(min(TimeInterval(ttl), Self.retryDelay(after: entry.failuresInARow)))
                }
                guard entry.failing else { return nil }
                entry.failing = false
                return .resolved(engine, answer.addresses)
            }
            entry.failuresInARow += 1
            entry.refreshAt = now.addingTimeInterval(Self.retryDelay(after: entry.failuresInARow))
            guard !entry.failing else { return nil }
            entry.failing = true
            let reason =
                switch answer {
                case nil: "no name server answered"
                case .some(let answer) where answer.addresses.isEmpty: "no addresses in the answer"
                case .some: "no reply to the A question"
                }
            let known = Self.recent(entry, now: now)
            let meanwhile: Meanwhile =
                !known.isEmpty ? .known(known) : (published[engine].map { $0.isEmpty ? .blocked : .published($0) } ?? .blocked)
            return .unresolvable(engine, reason: reason, meanwhile: meanwhile)
        }
    }

    /// The delay before the next lookup after `failures` failed ones in a row: 1, 2, 4, ... s, at most 30 s.
    static func retryDelay(after failures: Int) -> TimeInterval {
        min(firstRetry * pow(2, Double(max(failures - 1, 0))), retryAtMost)
    }

    /// `body`'s result, or nil when it takes longer than `bound` (then it is cancelled).
    private static func first(of body: @escaping @Sendable () async -> Answer?, orNilAfter bound: Duration) async -> Answer? {
        await withTaskGroup(of: Answer??.self) { group in
            group.addTask { .some(await body()) }
            group.addTask {
                try? await Task.sleep(for: bound)
                return .none
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? nil
        }
    }
}

extension SafeSearchResolver.Event: CustomStringConvertible {
    /// The log line.
    var description: String {
        switch self {
        case .unresolvable(let engine, let reason, let meanwhile):
            let host = engine.enforcementHost
            let rest =
                switch meanwhile {
                case .known(let addresses):
                    "its addresses of the last hour stay (\(addresses.map(\.description).joined(separator: " ")))"
                case .published(let addresses):
                    "\(engine.rawValue)'s names go to the addresses its provider publishes for it (\(addresses.map(\.description).joined(separator: " "))) until it resolves"
                case .blocked:
                    "\(engine.rawValue)'s names stay blocked until it resolves"
                }
            return "SafeSearch: cannot resolve \(host) (\(reason)); \(rest); asking again every few seconds (at most 30 s), logged again when it resolves"
        case .resolved(let engine, let addresses):
            return "SafeSearch: \(engine.enforcementHost) resolved (\(addresses.map(\.description).joined(separator: " "))); \(engine.rawValue)'s names go there now"
        }
    }
}

/// A stub resolver for a handful of questions: A and AAAA over UDP to the
/// given name servers (the first that answers), from a socket with
/// `SO_MARK`, two seconds per server.
struct MarkedDNSClient: Sendable {
    var nameservers: [IPAddress]
    var socketMark: UInt32?

    /// The `nameserver` lines of /etc/resolv.conf (at most three, as glibc reads).
    static func systemNameservers(path: String = "/etc/resolv.conf") -> [IPAddress] {
        // Read again for each lookup: BoundedFile, not Foundation (which leaks 4 KiB on each read of an empty file).
        guard let bytes = try? BoundedFile.read(path, limit: 64 * 1024, followingLinks: true) else { return [] }
        let text = String(decoding: bytes, as: UTF8.self)
        return Array(
            text.split(separator: "\n").compactMap { line -> IPAddress? in
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard fields.count >= 2, fields[0] == "nameserver" else { return nil }
                return IPAddress(String(fields[1].split(separator: "%").first ?? fields[1]))
            }.prefix(3))
    }

    /// The addresses of `host` (A and AAAA, asked at once, following what
    /// the server answers) and the smallest time to live among them: the
    /// first server that answers both questions, else the first that
    /// answered one (`complete` false); nil when no server answered.
    func addresses(of host: String) async -> SafeSearchResolver.Answer? {
        var partial: SafeSearchResolver.Answer? = nil
        for server in nameservers {
            async let v4 = ask(server, host: host, type: 1)
            async let v6 = ask(server, host: host, type: 28)
            let answers = await [v4, v6]
            let records = answers.compactMap { $0 }.flatMap { $0 }
            guard answers.contains(where: { $0 != nil }) else { continue }
            let answer = SafeSearchResolver.Answer(
                addresses: records.map(\.address), timeToLive: records.map(\.timeToLive).min() ?? 0, complete: !answers.contains { $0 == nil })
            if answer.complete { return answer }
            if partial == nil { partial = answer }
        }
        return partial
    }

    /// One question; nil on no answer in time or an answer that is not one.
    private func ask(_ server: IPAddress, host: String, type: UInt16) async -> [DNSAddressRecord]? {
        let id = UInt16.random(in: 0...UInt16.max)
        guard let query = Self.query(id: id, host: host, type: type),
            let address = try? SocketAddress(ipAddress: server.description, port: 53)
        else { return nil }
        let mark = socketMark
        do {
            var bootstrap = DatagramBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            if let mark { bootstrap = bootstrap.channelOption(.socketOption(.init(rawValue: SO_MARK)), value: SocketOptionValue(mark)) }
            let channel = try await bootstrap.bind(host: server.isIPv4 ? "0.0.0.0" : "::", port: 0) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<AddressedEnvelope<ByteBuffer>, AddressedEnvelope<ByteBuffer>>(wrappingChannelSynchronously: channel)
                }
            }
            return try await channel.executeThenClose { inbound, outbound in
                try await outbound.write(AddressedEnvelope(remoteAddress: address, data: ByteBuffer(bytes: query)))
                return try await withThrowingTaskGroup(of: [DNSAddressRecord]?.self) { group in
                    group.addTask {
                        for try await envelope in inbound {
                            let bytes = Array(envelope.data.readableBytesView)
                            guard case .success(let message) = DNSMessageParser.parse(bytes), message.header.isResponse, message.header.id == id
                            else { continue }
                            // NXDOMAIN is an answer (no addresses); SERVFAIL or REFUSED is none: the next server is asked.
                            guard message.header.responseCode == 0 || message.header.responseCode == 3 else { return nil }
                            guard message.header.responseCode == 0 else { return [] }
                            guard case .success(let records) = DNSMessageParser.addressRecords(in: bytes) else { return nil }
                            return records.filter { $0.type == type }
                        }
                        return nil
                    }
                    group.addTask {
                        try await Task.sleep(for: .seconds(2))
                        return nil
                    }
                    let first = try await group.next() ?? nil
                    group.cancelAll()
                    return first
                }
            }
        } catch {
            return nil
        }
    }

    /// A query with recursion desired for `host` (dotted, ASCII), or nil for a name that is not one.
    static func query(id: UInt16, host: String, type: UInt16) -> [UInt8]? {
        var bytes: [UInt8] = [UInt8(id >> 8), UInt8(id & 0xFF), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        guard !labels.isEmpty, host.utf8.count <= 253 else { return nil }
        for label in labels {
            let utf8 = Array(label.utf8)
            guard (1...63).contains(utf8.count), utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
            bytes.append(UInt8(utf8.count))
            bytes += utf8
        }
        bytes += [0, UInt8(type >> 8), UInt8(type & 0xFF), 0, 1]
        return bytes
    }
}
