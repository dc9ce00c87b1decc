import FilterData
import Foundation
import NIOCore
import NIOPosix
import SharedStore
import Synchronization
import VerdictCore

/// The addresses of the SafeSearch enforcement hosts (forcesafesearch.google.com,
/// restrict.youtube.com, ...), which filter-data needs and cannot look up
/// itself (it has no network). filter-control asks the machine's resolvers
/// (`/etc/resolv.conf`) from a socket with the exemption mark, so its own
/// questions skip the queue, keeps each answer for its time to live (at
/// least 30 s, at most an hour), and keeps every address it saw within the
/// last hour in the target it hands filter-data: a browser holding an older
/// answer still reaches the service, through an address that enforces it.
/// A failed lookup is tried again after 30 s; the addresses known so far stay.
final class SafeSearchResolver: Sendable {
    struct Entry: Sendable {
        /// Each address and when an answer last named it.
        var seen: [IPAddress: Date]
        var timeToLive: UInt32
        var refreshAt: Date
    }

    private let state = Mutex<[SafeSearchEngine: Entry]>([:])
    private let lookUp: @Sendable (String) async -> (addresses: [IPAddress], timeToLive: UInt32)?

    /// How long an address stays in the target after the last answer that named it.
    static let keepSeen: TimeInterval = 3600
    static let retryAfterFailure: TimeInterval = 30

    init(lookUp: @escaping @Sendable (String) async -> (addresses: [IPAddress], timeToLive: UInt32)?) {
        self.lookUp = lookUp
    }

    /// The resolver filter-control uses: the machine's name servers, asked from a marked socket.
    convenience init(socketMark: UInt32?) {
        self.init { host in
            await MarkedDNSClient(nameservers: MarkedDNSClient.systemNameservers(), socketMark: socketMark).addresses(of: host)
        }
    }

    /// The targets of `engines` at `now` (engines without any address yet are left out).
    func targets(for engines: Set<SafeSearchEngine>, now: Date) -> [SafeSearchEngine: SafeSearchTarget] {
        state.withLock { entries in
            var targets: [SafeSearchEngine: SafeSearchTarget] = [:]
            for engine in engines {
                guard let entry = entries[engine] else { continue }
                let addresses = entry.seen.filter { now.timeIntervalSince($0.value) <= Self.keepSeen }.keys.sorted { $0.description < $1.description }
                guard !addresses.isEmpty else { continue }
                targets[engine] = SafeSearchTarget(addresses: addresses, timeToLive: entry.timeToLive)
            }
            return targets
        }
    }

    /// Looks up the enforcement hosts of `engines` that are due. Returns the
    /// reasons of failed lookups (for the log).
    func refresh(engines: Set<SafeSearchEngine>, now: Date) async -> [String] {
        let due = state.withLock { entries in engines.filter { (entries[$0]?.refreshAt ?? .distantPast) <= now } }
        var failures: [String] = []
        for engine in due.sorted(by: { $0.rawValue < $1.rawValue }) {
            let host = engine.enforcementHost
            let answer = await lookUp(host)
            state.withLock { entries in
                var entry = entries[engine] ?? Entry(seen: [:], timeToLive: 300, refreshAt: now)
                if let answer, !answer.addresses.isEmpty {
                    for address in answer.addresses { entry.seen[address] = now }
                    let ttl = min(max(answer.timeToLive, 30), 3600)
                    entry.timeToLive = min(ttl, 300)
                    entry.refreshAt = now.addingTimeInterval(TimeInterval(ttl))
                } else {
                    entry.refreshAt = now.addingTimeInterval(Self.retryAfterFailure)
                }
                entry.seen = entry.seen.filter { now.timeIntervalSince($0.value) <= Self.keepSeen }
                entries[engine] = entry
            }
            if answer?.addresses.isEmpty ?? true { failures.append("\(host): no addresses (SafeSearch for \(engine.rawValue) waits)") }
        }
        return failures
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

    /// The addresses of `host` (A and AAAA, following what the server
    /// answers) and the smallest time to live among them; nil when no
    /// server answered.
    func addresses(of host: String) async -> (addresses: [IPAddress], timeToLive: UInt32)? {
        for server in nameservers {
            var addresses: [IPAddress] = []
            var timeToLive = UInt32.max
            var answered = false
            for type: UInt16 in [1, 28] {
                guard let records = await ask(server, host: host, type: type) else { continue }
                answered = true
                for record in records {
                    addresses.append(record.address)
                    timeToLive = min(timeToLive, record.timeToLive)
                }
            }
            if answered { return (addresses, addresses.isEmpty ? 0 : timeToLive) }
        }
        return nil
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
