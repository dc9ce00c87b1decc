public import FilterData
import Foundation
import NIOCore
import Synchronization
public import VerdictCore

/// What each connection allowed while filter-control runs was judged on (its
/// name, its user), from filter-data's reports: the record that lets a
/// change of policy judge open connections again, even those long gone from
/// filter-data's flow table (their packets bypass user space). Bounded: the
/// oldest records go first; a record of a connection that has ended costs
/// nothing but its room (cutting it finds nothing).
public final class ConnectionRecords: Sendable {
    public struct Record: Sendable, Hashable {
        public var flow: FlowKey
        public var uid: UInt32?
        public var kind: String
        public var host: String?
        public var path: String?

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

    /// Records kept, at most.
    public let capacity: Int
    /// The records, and their keys oldest first (a ring: the oldest go from its front in constant time).
    private let state: Mutex<(records: [FlowKey: Record], order: CircularBuffer<FlowKey>)>

    public init(capacity: Int = 65_536) {
        self.capacity = capacity
        state = Mutex(([:], CircularBuffer()))
    }

    public var count: Int { state.withLock { $0.records.count } }

    /// Keeps the first decision of an allowed connection (DNS queries are judged one by one: not connections).
    public func record(_ report: FlowReport) {
        record(contentsOf: CollectionOfOne(report))
    }

    /// `record(_:)` for a batch, under one lock.
    public func record(contentsOf reports: some Collection<FlowReport>) {
        let kept = reports.lazy.filter { report in
            report.verdict == .allow && report.kind != "dns" && (report.flow.protocolNumber == 6 || report.flow.protocolNumber == 17)
        }
        guard !kept.isEmpty else { return }
        state.withLock { state in
            for report in kept {
                let record = Record(flow: report.flow, uid: report.uid, kind: report.kind, host: report.host, path: report.path)
                if state.records.updateValue(record, forKey: report.flow) == nil { state.order.append(report.flow) }
            }
            while state.records.count > capacity, let oldest = state.order.popFirst() {
                state.records[oldest] = nil
            }
            // The order list only grows with new keys; compact it when forgotten keys pile up.
            if state.order.count > 2 * capacity { state.order = CircularBuffer(state.order.filter { state.records[$0] != nil }) }
        }
    }

    public func forget(_ flow: FlowKey) {
        state.withLock { _ = $0.records.removeValue(forKey: flow) }
    }

    /// The records whose connection these engines block now.
    public func blocked<Rules: RuleSource>(by engines: PolicyEngines<Rules>) -> [Record] {
        let records = state.withLock { Array($0.records.values) }
        return records.filter { record in engines.decide(record.facts).verdict == .drop }
    }

    /// The first line of the saved file.
    static let fileHeader = "hallpass connections 1"

    /// Kept across a restart of filter-control (in the runtime folder: gone at
    /// reboot, as the connections are): a line per record in the reports'
    /// format, oldest first, so that 65,536 records cost a few MB of writing
    /// and no tree of JSON values.
    public func save(to path: String) {
        var bytes = Array((Self.fileHeader + "\n").utf8)
        state.withLock { state in
            bytes.reserveCapacity(bytes.count + state.records.count * 96)
            var written = Set<FlowKey>(minimumCapacity: state.records.count)
            for key in state.order {
                // A key forgotten and recorded again is in the order twice: written once.
                guard let record = state.records[key], written.insert(key).inserted else { continue }
                FlowReport(flow: record.flow, uid: record.uid, kind: record.kind, host: record.host, path: record.path, verdict: .allow,
                           reason: Reason(source: .unknownHost)).appendLine(to: &bytes)
                bytes.append(0x0A)
            }
        }
        try? Data(bytes).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// Reads what `save` wrote (or the JSON array an earlier version wrote); an unreadable file or line is skipped.
    public func load(from path: String) {
        guard let data = FileManager.default.contents(atPath: path) else { return }
        var records: [Record] = []
        let bytes = [UInt8](data)
        let header = Array(Self.fileHeader.utf8)
        if bytes.starts(with: header + [0x0A]) {
            var start = header.count + 1
            while start < bytes.count {
                let end = bytes[start...].firstIndex(of: 0x0A) ?? bytes.count
                if let report = FlowReport(line: bytes[start..<end]) {
                    records.append(Record(flow: report.flow, uid: report.uid, kind: report.kind, host: report.host, path: report.path))
                }
                start = end + 1
            }
            // Oldest first in the file: a smaller store keeps the newest, as it would have.
            if records.count > capacity { records.removeFirst(records.count - capacity) }
        } else if let old = try? JSONDecoder().decode([Record].self, from: data) {
            records = Array(old.suffix(capacity))
        }
        state.withLock { state in
            for record in records where state.records.updateValue(record, forKey: record.flow) == nil {
                state.order.append(record.flow)
            }
        }
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
