public import HallpassIPC
import Foundation
public import HallpassSystem
import NIOCore
import SharedStore
import Synchronization
public import VerdictCore

/// What each connection allowed while filter-control runs was judged on (its
/// name, its user), from filter-data's reports: the record that lets a
/// change of policy judge open connections again, even those long gone from
/// filter-data's flow table (their packets bypass user space).
///
/// The records are the reports' own lines, kept as bytes in a space of
/// fixed size allocated (and touched) once at start: keeping one costs a
/// copy of its line, and filter-control's memory does not grow with the
/// connections it has seen. The space is two halves; when the newer half
/// is full, the older one is emptied and written next, so the oldest
/// records go, half a space at a time. A record of a connection that has
/// ended costs nothing but its room (cutting it finds nothing); a record is
/// read (decoded) only when the policy changes, or to be saved.
public final class ConnectionRecords: Sendable {
    public struct Record: Sendable, Hashable {
        public var flow: FlowKey
        public var uid: UInt32?
        public var kind: String
        public var host: String?
        public var path: String?
        /// Where the line is, to forget it after a cut.
        var place: Place? = nil

        public init(flow: FlowKey, uid: UInt32?, kind: String, host: String?, path: String?) {
            self.flow = flow
            self.uid = uid
            self.kind = kind
            self.host = host
            self.path = path
        }

        /// The connection as the kernel's tables key it (the local end first).
        public var connection: OpenConnection {
            OpenConnection(
                protocolNumber: flow.protocolNumber, local: flow.source, localPort: flow.sourcePort, remote: flow.destination,
                remotePort: flow.destinationPort)
        }

        /// The facts to judge it on again, as filter-data judged it first.
        var facts: FlowFacts {
            let name = host.flatMap { try? HostName($0) }
            let source: FlowFacts.NameSource? =
                switch kind {
                case "tls": .tlsServerName
                case "http": .httpHost
                case "quic": .quicServerName
                default: nil
                }
            return FlowFacts(
                host: name, nameSource: name == nil ? nil : source, path: path, destination: flow.destination, destinationPort: flow.destinationPort,
                transport: flow.protocolNumber == 6 ? .tcp : .udp, uid: uid)
        }
    }

    /// A line's half, its offset there, and the half's generation (a half
    /// emptied since holds other lines).
    struct Place: Sendable, Hashable {
        var half: Int
        var offset: Int
        var generation: UInt64
    }

    /// The two halves of the space, and which is being written.
    private struct Space {
        var bytes: [UInt8]
        var used = [0, 0]
        var lines = [0, 0]
        var generation: [UInt64] = [0, 0]
        var newer = 0

        init(halfSize: Int) {
            // Every byte written now: the pages are the process's from the start.
            bytes = [UInt8](repeating: 0, count: 2 * halfSize)
        }

        var halfSize: Int { bytes.count / 2 }

        mutating func append(_ line: some Collection<UInt8>) {
            guard line.count + 1 <= halfSize else { return }
            if used[newer] + line.count + 1 > halfSize {
                newer = 1 - newer
                used[newer] = 0
                lines[newer] = 0
                generation[newer] &+= 1
            }
            let start = newer * halfSize + used[newer]
            bytes.replaceSubrange(start..<(start + line.count), with: line)
            bytes[start + line.count] = 0x0A
            used[newer] += line.count + 1
            lines[newer] += 1
        }

        /// Every kept line, oldest first, with its place (forgotten lines are skipped).
        func forEachLine(_ body: (ArraySlice<UInt8>, Place) -> Void) {
            for half in [1 - newer, newer] {
                let base = half * halfSize
                var offset = 0
                while offset < used[half] {
                    let start = base + offset
                    let end = bytes[start..<(base + used[half])].firstIndex(of: 0x0A) ?? (base + used[half])
                    if bytes[start] != ConnectionRecords.forgotten {
                        body(bytes[start..<end], Place(half: half, offset: offset, generation: generation[half]))
                    }
                    offset = end - base + 1
                }
            }
        }
    }

    /// The first byte of a forgotten line (a line starts with its protocol's digits).
    static let forgotten = UInt8(ascii: "#")

    /// The space for records, in bytes.
    public let capacity: Int
    private let space: Mutex<Space>

    /// `capacity` bytes: the default holds about 80,000 records (a line is
    /// 60 to 120 bytes for most connections).
    public init(capacity: Int = 8 << 20) {
        self.capacity = max(capacity, 2) & ~1
        space = Mutex(Space(halfSize: self.capacity / 2))
    }

    /// The records kept (forgotten ones included until their half is emptied).
    public var count: Int { space.withLock { $0.lines[0] + $0.lines[1] } }

    /// Keeps the first decision of an allowed connection (DNS queries are judged one by one: not connections).
    public func record(_ report: FlowReport) {
        record(contentsOf: FlowReportLines(CollectionOfOne(report)))
    }

    private static let dnsKind = Array("dns".utf8)

    /// `record(_:)` for a batch, under one lock: the lines of the allowed
    /// TCP and UDP connections are copied as they are.
    public func record(contentsOf reports: FlowReportLines) {
        space.withLock { space in
            for index in 0..<reports.count {
                guard let fields = reports.summary(index), fields.verdict == .allow, fields.kind != ConnectionRecords.dnsKind[...],
                    let proto = fields.protocolNumber, proto == 6 || proto == 17
                else { continue }
                space.append(fields.line)
            }
        }
    }

    /// Every record, the newest of each connection (a connection recorded
    /// twice, its ports reused, is judged on its newer record).
    public func records() -> [Record] {
        var newest: [FlowKey: Record] = [:]
        forEachRecord { newest[$0.flow] = $0 }
        return Array(newest.values)
    }

    /// Every kept record, decoded one at a time, oldest first, with its place.
    private func forEachRecord(_ body: (Record) -> Void) {
        space.withLock { space in
            space.forEachLine { line, place in
                guard let report = FlowReport(line: line) else { return }
                var record = Record(flow: report.flow, uid: report.uid, kind: report.kind, host: report.host, path: report.path)
                record.place = place
                body(record)
            }
        }
    }

    /// Forgets a record `blocked(by:)` or `records()` gave (a connection cut): a later change of policy does not cut it again.
    public func forget(_ record: Record) {
        guard let place = record.place else { return }
        space.withLock { space in
            guard space.generation[place.half] == place.generation else { return }
            space.bytes[place.half * space.halfSize + place.offset] = ConnectionRecords.forgotten
        }
    }

    /// The records whose connection these engines block now, each judged
    /// as it is read: what is held meanwhile is the blocked ones, not every
    /// record decoded (tens of MB at a full space, at every change of
    /// policy, which the allocator keeps). A connection recorded twice (its
    /// ports reused) is judged on its newer record.
    public func blocked<Rules: RuleSource>(by engines: PolicyEngines<Rules>) -> [Record] {
        var blocked: [FlowKey: Record] = [:]
        forEachRecord { record in
            blocked[record.flow] = engines.decide(record.facts).verdict == .drop ? record : nil
        }
        return Array(blocked.values)
    }

    /// The first line of the saved file.
    static let fileHeader = "hallpass connections 1"

    /// Kept across a restart of filter-control (in the runtime folder: gone at
    /// reboot, as the connections are): the lines as they are kept, oldest
    /// first, so that a few MB of records are a few MB of writing. Mode 0600:
    /// the runtime folder is readable by all (filter-data reads its policy
    /// there), and these lines say who visited what.
    public func save(to path: String) throws(AtomicFile.Failure) {
        var bytes = Array((Self.fileHeader + "\n").utf8)
        space.withLock { space in
            bytes.reserveCapacity(bytes.count + space.used[0] + space.used[1])
            space.forEachLine { line, _ in
                bytes.append(contentsOf: line)
                bytes.append(0x0A)
            }
        }
        try AtomicFile.write(bytes, to: path, mode: 0o600)
    }

    /// Reads what `save` wrote (or the JSON array an earlier version wrote);
    /// an unreadable file or line is skipped. Oldest first in the file: a
    /// smaller space keeps the newest, as it would have.
    public func load(from path: String) {
        guard let data = FileManager.default.contents(atPath: path) else { return }
        var lines = FlowReportLines()
        let bytes = [UInt8](data)
        let header = Array(Self.fileHeader.utf8)
        if bytes.starts(with: header + [0x0A]) {
            var start = header.count + 1
            while start < bytes.count {
                let end = bytes[start...].firstIndex(of: 0x0A) ?? bytes.count
                if let report = FlowReport(line: bytes[start..<end]) { lines.append(report) }
                start = end + 1
            }
        } else if let old = try? JSONDecoder().decode([Record].self, from: data) {
            for record in old {
                lines.append(
                    FlowReport(flow: record.flow, uid: record.uid, kind: record.kind, host: record.host, path: record.path, verdict: .allow,
                               reason: Reason(source: .unknownHost)))
            }
        }
        record(contentsOf: lines)
    }
}

extension ConnectionRecords.Record: Codable {
    private enum CodingKeys: String, CodingKey {
        case proto, source, sourcePort, destination, destinationPort, uid, kind, host, path
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard let source = IPAddress(try container.decode(String.self, forKey: .source)),
            let destination = IPAddress(try container.decode(String.self, forKey: .destination))
        else { throw DecodingError.dataCorruptedError(forKey: .source, in: container, debugDescription: "not an address") }
        flow = FlowKey(
            protocolNumber: try container.decode(UInt8.self, forKey: .proto), source: source, sourcePort: try container.decode(UInt16.self, forKey: .sourcePort),
            destination: destination, destinationPort: try container.decode(UInt16.self, forKey: .destinationPort))
        uid = try container.decodeIfPresent(UInt32.self, forKey: .uid)
        kind = try container.decode(String.self, forKey: .kind)
        host = try container.decodeIfPresent(String.self, forKey: .host)
        path = try container.decodeIfPresent(String.self, forKey: .path)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(flow.protocolNumber, forKey: .proto)
        try container.encode(flow.source.description, forKey: .source)
        try container.encode(flow.sourcePort, forKey: .sourcePort)
        try container.encode(flow.destination.description, forKey: .destination)
        try container.encode(flow.destinationPort, forKey: .destinationPort)
        try container.encodeIfPresent(uid, forKey: .uid)
        try container.encode(kind, forKey: .kind)
        try container.encodeIfPresent(host, forKey: .host)
        try container.encodeIfPresent(path, forKey: .path)
    }
}
