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
/// The records are kept in a space of fixed size allocated (and touched)
/// once at start: keeping one costs a few dozen bytes copied, and
/// filter-control's memory does not grow with the connections it has seen.
/// A record is what judging again needs of a report, in binary (`Layout`):
/// about half the size of the report's line. The records were the lines
/// themselves, in 8 MiB: a fifth of filter-control's resident memory for
/// as many connections as 4 MiB keeps now (BENCHMARKS.md, Memory). The
/// space is two halves; when the newer half is full, the older one is
/// emptied and written next, so the oldest records go, half a space at a
/// time. A record of a connection that has ended costs nothing but its
/// room (cutting it finds nothing); a record is read (decoded) only when
/// the policy changes, or to be saved.
public final class ConnectionRecords: Sendable {
    public struct Record: Sendable, Hashable {
        /// The connection as filter-data saw its first packet leave: this
        /// machine's end is the source, as the kernel's tables key it.
        public var flow: FlowKey
        public var uid: UInt32?
        public var kind: String
        public var host: String?
        public var path: String?
        /// Where the record is, to forget it after a cut.
        var place: Place? = nil

        public init(flow: FlowKey, uid: UInt32?, kind: String, host: String?, path: String?) {
            self.flow = flow
            self.uid = uid
            self.kind = kind
            self.host = host
            self.path = path
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

    /// A record's half, its offset there, and the half's generation (a half
    /// emptied since holds other records).
    struct Place: Sendable, Hashable {
        var half: Int
        var offset: Int
        var generation: UInt64
    }

    /// A record's bytes, integers little-endian:
    ///
    ///     0  the record's size (2 bytes)
    ///     2  flags (`forgotten`, `sourceIPv6`, `destinationIPv6`, `hasUID`, `hasHost`, `hasPath`)
    ///     3  the protocol number
    ///     4  the kind's size k
    ///     5  source and destination addresses (4 each, 16 with `sourceIPv6`, `destinationIPv6`)
    ///        source and destination ports (2 + 2)
    ///        the uid (4, with `hasUID`)
    ///        the kind (k)
    ///        the host's size (2) and the host (with `hasHost`)
    ///        the path's size (2) and the path (with `hasPath`)
    ///
    /// A connection of IPv4 with a name of 20 bytes takes 46 (its line about 90).
    enum Layout {
        static let forgotten: UInt8 = 1
        static let sourceIPv6: UInt8 = 2
        static let destinationIPv6: UInt8 = 4
        static let hasUID: UInt8 = 8
        static let hasHost: UInt8 = 16
        static let hasPath: UInt8 = 32

        /// Where the flags are.
        static let flagsOffset = 2

        /// The record of a report's line, as `append` writes it; nil for a line
        /// that does not read (the fields are checked here as they are copied).
        struct Fields {
            var protocolNumber: UInt8
            var source: IPAddress
            var sourcePort: UInt16
            var destination: IPAddress
            var destinationPort: UInt16
            var uid: UInt32?
            var kind: ArraySlice<UInt8>
            var host: ArraySlice<UInt8>?
            var path: ArraySlice<UInt8>?

            init?(_ fields: FlowReport.Fields) {
                func none(_ field: ArraySlice<UInt8>) -> Bool { field.count == 1 && field.first == UInt8(ascii: "-") }
                guard let protocolNumber = fields.protocolNumber, let source = IPAddress(utf8: fields[1]),
                    let sourcePort = parseDecimal(fields[2], as: UInt16.self), let destination = IPAddress(utf8: fields[3]),
                    let destinationPort = parseDecimal(fields[4], as: UInt16.self), fields.kind.count <= Int(UInt8.max)
                else { return nil }
                self.protocolNumber = protocolNumber
                self.source = source
                self.sourcePort = sourcePort
                self.destination = destination
                self.destinationPort = destinationPort
                if none(fields[5]) {
                    uid = nil
                } else {
                    guard let uid = parseDecimal(fields[5], as: UInt32.self) else { return nil }
                    self.uid = uid
                }
                kind = fields.kind
                host = none(fields[7]) ? nil : fields[7]
                path = none(fields[12]) ? nil : fields[12]
                // A field is cut to 256 bytes: its size fits in 2.
                guard (host?.count ?? 0) <= Int(UInt16.max), (path?.count ?? 0) <= Int(UInt16.max) else { return nil }
            }

            var size: Int {
                5 + (source.isIPv4 ? 4 : 16) + (destination.isIPv4 ? 4 : 16) + 4 + (uid == nil ? 0 : 4) + kind.count + (host.map { 2 + $0.count } ?? 0)
                    + (path.map { 2 + $0.count } ?? 0)
            }
        }

        /// Writes `fields` at `start` (`fields.size` bytes).
        static func write(_ fields: Fields, into bytes: inout [UInt8], at start: Int) {
            var offset = start
            func put(_ byte: UInt8) {
                bytes[offset] = byte
                offset += 1
            }
            func put<N: FixedWidthInteger>(_ value: N) {
                for shift in stride(from: 0, to: N.bitWidth, by: 8) { put(UInt8(truncatingIfNeeded: value >> shift)) }
            }
            func put(_ address: IPAddress) {
                switch address {
                case .v4(let value): put(value)
                case .v6(let high, let low):
                    put(high)
                    put(low)
                }
            }
            func put(_ field: ArraySlice<UInt8>) {
                bytes.replaceSubrange(offset..<(offset + field.count), with: field)
                offset += field.count
            }
            var flags: UInt8 = 0
            if !fields.source.isIPv4 { flags |= sourceIPv6 }
            if !fields.destination.isIPv4 { flags |= destinationIPv6 }
            if fields.uid != nil { flags |= hasUID }
            if fields.host != nil { flags |= hasHost }
            if fields.path != nil { flags |= hasPath }
            put(UInt16(fields.size))
            put(flags)
            put(fields.protocolNumber)
            put(UInt8(fields.kind.count))
            put(fields.source)
            put(fields.destination)
            put(fields.sourcePort)
            put(fields.destinationPort)
            if let uid = fields.uid { put(uid) }
            put(fields.kind)
            if let host = fields.host {
                put(UInt16(host.count))
                put(host)
            }
            if let path = fields.path {
                put(UInt16(path.count))
                put(path)
            }
        }

        /// The record at `start`, which `write` wrote.
        static func read(_ bytes: ArraySlice<UInt8>, at start: Int) -> Record {
            var offset = start + 3
            func byte() -> UInt8 {
                defer { offset += 1 }
                return bytes[offset]
            }
            func integer<N: FixedWidthInteger>(_: N.Type) -> N {
                var value: N = 0
                for shift in stride(from: 0, to: N.bitWidth, by: 8) { value |= N(byte()) << shift }
                return value
            }
            func text(_ count: Int) -> String {
                defer { offset += count }
                return String(decoding: bytes[offset..<(offset + count)], as: UTF8.self)
            }
            let flags = bytes[start + flagsOffset]
            let protocolNumber = byte()
            let kindSize = Int(byte())
            func address(_ flag: UInt8) -> IPAddress {
                if flags & flag == 0 { return .v4(integer(UInt32.self)) }
                let high = integer(UInt64.self)
                return .v6(high: high, low: integer(UInt64.self))
            }
            let source = address(sourceIPv6)
            let destination = address(destinationIPv6)
            let sourcePort = integer(UInt16.self)
            let destinationPort = integer(UInt16.self)
            let uid = flags & hasUID == 0 ? nil : integer(UInt32.self)
            let kind = text(kindSize)
            let host = flags & hasHost == 0 ? nil : text(Int(integer(UInt16.self)))
            let path = flags & hasPath == 0 ? nil : text(Int(integer(UInt16.self)))
            return Record(
                flow: FlowKey(protocolNumber: protocolNumber, source: source, sourcePort: sourcePort, destination: destination, destinationPort: destinationPort),
                uid: uid, kind: kind, host: host, path: path)
        }
    }

    /// The two halves of the space, and which is being written.
    private struct Space {
        var bytes: [UInt8]
        var used = [0, 0]
        var records = [0, 0]
        var generation: [UInt64] = [0, 0]
        var newer = 0

        init(halfSize: Int) {
            // Every byte written now: the pages are the process's from the start.
            bytes = [UInt8](repeating: 0, count: 2 * halfSize)
        }

        var halfSize: Int { bytes.count / 2 }

        mutating func append(_ fields: Layout.Fields) {
            let size = fields.size
            guard size <= halfSize else { return }
            if used[newer] + size > halfSize {
                newer = 1 - newer
                used[newer] = 0
                records[newer] = 0
                generation[newer] &+= 1
            }
            Layout.write(fields, into: &bytes, at: newer * halfSize + used[newer])
            used[newer] += size
            records[newer] += 1
        }

        /// Every kept record, oldest first, with its place (forgotten ones are skipped).
        func forEachRecord(_ body: (Record) -> Void) {
            for half in [1 - newer, newer] {
                let base = half * halfSize
                var offset = 0
                while offset < used[half] {
                    let start = base + offset
                    if bytes[start + Layout.flagsOffset] & Layout.forgotten == 0 {
                        var record = Layout.read(bytes[...], at: start)
                        record.place = Place(half: half, offset: offset, generation: generation[half])
                        body(record)
                    }
                    offset += Int(bytes[start]) | Int(bytes[start + 1]) << 8
                }
            }
        }
    }

    /// The space for records, in bytes.
    public let capacity: Int
    private let space: Mutex<Space>

    /// `capacity` bytes: the default holds about 80,000 records (a record is
    /// 40 to 60 bytes for most connections, more with an HTTP path or IPv6).
    public init(capacity: Int = 4 << 20) {
        self.capacity = max(capacity, 2) & ~1
        space = Mutex(Space(halfSize: self.capacity / 2))
    }

    /// The records kept (forgotten ones included until their half is emptied).
    public var count: Int { space.withLock { $0.records[0] + $0.records[1] } }

    /// Keeps the first decision of an allowed connection (DNS queries are judged one by one: not connections).
    public func record(_ report: FlowReport) {
        record(contentsOf: FlowReportLines(CollectionOfOne(report)))
    }

    private static let dnsKind = Array("dns".utf8)

    /// The record of a report's line, when it is one to keep: an allowed TCP or UDP connection.
    private static func kept(_ line: FlowReport.Fields) -> Layout.Fields? {
        guard line.verdict == .allow, line.kind != ConnectionRecords.dnsKind[...], let proto = line.protocolNumber, proto == 6 || proto == 17
        else { return nil }
        return Layout.Fields(line)
    }

    /// The size of `report`'s record (for tests).
    static func size(of report: FlowReport) -> Int? {
        let lines = FlowReportLines(CollectionOfOne(report))
        return lines.summary(0).flatMap(kept)?.size
    }

    /// `record(_:)` for a batch, under one lock: the allowed TCP and UDP connections are kept.
    public func record(contentsOf reports: FlowReportLines) {
        space.withLock { space in
            for index in 0..<reports.count {
                guard let fields = reports.summary(index).flatMap(ConnectionRecords.kept) else { continue }
                space.append(fields)
            }
        }
    }

    /// Every record, the newest of each connection (a connection recorded
    /// twice, its ports reused, is judged on its newer record).
    public func records() -> [Record] {
        var newest: [FlowKey: Record] = [:]
        space.withLock { $0.forEachRecord { newest[$0.flow] = $0 } }
        return Array(newest.values)
    }

    /// Forgets a record `blocked(by:)` or `records()` gave (a connection cut): a later change of policy does not cut it again.
    public func forget(_ record: Record) {
        guard let place = record.place else { return }
        space.withLock { space in
            guard space.generation[place.half] == place.generation else { return }
            space.bytes[place.half * space.halfSize + place.offset + Layout.flagsOffset] |= Layout.forgotten
        }
    }

    /// The records whose connection these engines block now, each judged
    /// as it is read: what is held meanwhile is the blocked ones, not every
    /// record decoded (tens of MB at a full space, at every change of
    /// policy, which the allocator keeps). A connection recorded twice (its
    /// ports reused) is judged on its newer record.
    public func blocked<Rules: RuleSource>(by engines: PolicyEngines<Rules>) -> [Record] {
        var blocked: [FlowKey: Record] = [:]
        space.withLock { space in
            space.forEachRecord { record in
                blocked[record.flow] = engines.decide(record.facts).verdict == .drop ? record : nil
            }
        }
        return Array(blocked.values)
    }

    /// The first line of the saved file.
    static let fileHeader = "hallpass connections 1"

    /// Kept across a restart of filter-control (in the runtime folder: gone at
    /// reboot, as the connections are): each record as a report's line,
    /// oldest first, written in parts of 64 KiB (no copy of the whole space
    /// at stop). Mode 0600: the runtime folder is readable by all
    /// (filter-data reads its policy there), and these lines say who visited what.
    public func save(to path: String) throws(AtomicFile.Failure) {
        try space.withLock { space throws(AtomicFile.Failure) in
            try AtomicFile.write(to: path, mode: 0o600) { part in
                var buffer = Array((Self.fileHeader + "\n").utf8)
                buffer.reserveCapacity(64 << 10)
                space.forEachRecord { record in
                    // The reason is not kept: a loaded line is read for what judging again needs.
                    FlowReport.appendLine(
                        to: &buffer, flow: record.flow, uid: record.uid, kind: record.kind, host: record.host.map { Array($0.utf8) },
                        path: record.path, verdict: .allow, reason: Reason(source: .unknownHost))
                    buffer.append(0x0A)
                    if buffer.count >= 60 << 10 {
                        part(buffer)
                        buffer.removeAll(keepingCapacity: true)
                    }
                }
                part(buffer)
            }
        }
    }

    /// A line of the saved file is longer than any report's line can be past this: skipped.
    static let longestLine = 1 << 16

    /// Reads what `save` wrote (or the JSON array an earlier version wrote);
    /// an unreadable file or line is skipped. The file is read in parts,
    /// each line kept as it is read: loading a full space's file costs the
    /// space it fills, not the file and its decoded lines on top. Oldest
    /// first in the file: a smaller space keeps the newest, as it would have.
    public func load(from path: String) {
        let header = Array(Self.fileHeader.utf8)
        var lineNumber = 0
        var isLines = false
        var partial: [UInt8] = []
        var skipping = false
        func take(_ line: ArraySlice<UInt8>) {
            defer { lineNumber += 1 }
            guard lineNumber > 0 else {
                isLines = line.elementsEqual(header)
                return
            }
            guard isLines, let fields = FlowReport.Fields(line: line).flatMap(ConnectionRecords.kept) else { return }
            space.withLock { $0.append(fields) }
        }
        do {
            _ = try BoundedFile.stream(path, limit: UInt64(Int.max)) { chunk in
                var start = chunk.startIndex
                while let end = chunk[start...].firstIndex(of: 0x0A) {
                    if skipping {
                        skipping = false
                    } else if partial.isEmpty {
                        take(chunk[start..<end])
                    } else {
                        partial.append(contentsOf: chunk[start..<end])
                        take(partial[...])
                    }
                    partial.removeAll(keepingCapacity: true)
                    start = end + 1
                }
                guard !skipping else { return }
                partial.append(contentsOf: chunk[start...])
                if partial.count > Self.longestLine {
                    partial = []
                    skipping = true
                    lineNumber = max(lineNumber, 1)
                }
            }
        } catch {
            return
        }
        if !partial.isEmpty { take(partial[...]) }
        guard lineNumber > 0, !isLines else { return }
        // An earlier version's JSON: small (it was given up for its size), read whole.
        guard let data = FileManager.default.contents(atPath: path), data.first == UInt8(ascii: "["),
            let old = try? JSONDecoder().decode([Record].self, from: data)
        else { return }
        var lines = FlowReportLines()
        for record in old {
            lines.append(
                FlowReport(flow: record.flow, uid: record.uid, kind: record.kind, host: record.host, path: record.path, verdict: .allow,
                           reason: Reason(source: .unknownHost)))
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
