// Fuzz targets for the packet parsers of filter-data.
import FilterData
import HallpassWire
import HallpassIPC
import SharedStore
import VerdictCore

/// A small store and the default policy (every category blocked), shared by the targets.
enum Engines {
    static let storeBytes: [UInt8] = {
        var builder = RuleStoreBuilder()
        do {
            let category = try builder.category(named: "demo")
            for text in ["blocked.test", "*.example.com", "http://blocked.test/path", "192.0.2.0/24", "2001:db8::/32"] {
                if let pattern = try? RulePattern(text) { builder.add(pattern, category: category) }
            }
            return try builder.build(version: 1).bytes
        } catch {
            fatalError("the fuzz targets' own store does not build: \(error)")
        }
    }()

    static let store: RuleStore = {
        do {
            return try RuleStore(bytes: storeBytes, verification: .full)
        } catch {
            fatalError("the fuzz targets' own store does not open: \(error)")
        }
    }()

    static let engine = VerdictEngine(rules: store, policy: Policy())
}

enum Wire {
    static func ip(_ input: [UInt8]) {
        if let packet = try? IPPacketParser.parse(input) {
            require(packet.payload.lowerBound <= packet.payload.upperBound && packet.payload.upperBound <= input.count,
                    "payload \(packet.payload) outside the \(input.count)-byte packet")
            require(packet.transportOffset <= input.count && packet.length <= input.count, "transport offset or length past the packet")
        }
        // The whole inspector, twice (a new flow, then a known one), then the end of inspection.
        var inspector = FlowInspector(engine: Engines.engine)
        _ = inspector.inspect(input, uid: 1000, gid: 1000, now: 1)
        _ = inspector.inspect(input, uid: 1000, gid: 1000, now: 2)
        _ = inspector.finishInspections(now: 3)
    }

    static func tls(_ input: [UInt8]) {
        if case .clientHello(let info) = ClientHelloParser.parse(recordStream: input) {
            require(info.handshakeLength <= input.count, "handshake longer than the stream")
        }
        let bare = ClientHelloParser.parse(handshakeMessage: input)
        guard case .clientHello(let info) = bare else { return }
        require(info.handshakeLength <= input.count, "handshake longer than the message")
        // The same message in one record reads the same.
        if input.count <= 16_384 {
            let record: [UInt8] = [22, 3, 1, UInt8(input.count >> 8), UInt8(input.count & 0xFF)] + input
            require(ClientHelloParser.parse(recordStream: record) == bare, "a ClientHello reads differently inside a record")
        }
        // And in records of any size (one chosen by the input), within the stream bound; every
        // prefix of those records is incomplete and asks for no more than the whole stream.
        let message = input[0..<info.handshakeLength]
        let size = 1 + Int(input[input.count / 2]) * 64
        var stream: [UInt8] = []
        var start = 0
        while start < message.count {
            let end = min(message.count, start + size)
            stream += [22, 3, 1, UInt8((end - start) >> 8), UInt8((end - start) & 0xFF)] + message[start..<end]
            start = end
        }
        guard stream.count <= ClientHelloParser.maximumRecordStreamLength else {
            require(ClientHelloParser.parse(recordStream: stream) == .tooLarge(declaredLength: message.count), "records past the stream bound")
            return
        }
        require(ClientHelloParser.parse(recordStream: stream) == bare, "a ClientHello reads differently in records of \(size)")
        let cut = Int(input[0]) * stream.count / 256
        if case .needMoreData(let total) = ClientHelloParser.parse(recordStream: Array(stream[0..<cut])) {
            require(total.map { $0 > cut && $0 <= stream.count } ?? true, "a prefix of \(cut) asks for \(total ?? -1) of \(stream.count) bytes")
        } else {
            require(false, "a prefix of \(cut) of \(stream.count) bytes is not incomplete")
        }
    }

    static func http(_ input: [UInt8]) {
        let outcome = HTTPRequestHeadParser.parse(input)
        guard case .request(let head) = outcome else { return }
        require(head.headLength <= input.count, "head longer than the input")
        // Bytes after a complete head change nothing.
        require(HTTPRequestHeadParser.parse(input + Array("GET / HTTP/1.1\r\n".utf8)) == outcome, "bytes after the head changed it")
    }

    /// Input: flags, segment count, one size byte per segment, then the stream.
    static func stream(_ input: [UInt8]) {
        var splitter = InputSplitter(input)
        let flags = splitter.byte()
        let segmentCount = Int(splitter.byte() % 16) + 1
        let sizes = (0..<segmentCount).map { _ in Int(splitter.byte()) + 1 }
        let content = splitter.rest()
        // Cut the content into segments by the sizes (the last takes the rest).
        var segments: [(offset: Int, bytes: [UInt8])] = []
        var offset = 0
        for (index, size) in sizes.enumerated() where offset < content.count {
            let end = index == sizes.count - 1 ? content.count : min(content.count, offset + size)
            segments.append((offset, Array(content[offset..<end])))
            offset = end
        }
        // Order: as sent, reversed, or odd ones first; optionally every segment twice.
        switch flags & 0x03 {
        case 1: segments.reverse()
        case 2: segments = segments.enumerated().sorted { ($0.offset % 2, $0.offset) > ($1.offset % 2, $1.offset) }.map(\.element)
        default: break
        }
        if flags & 0x04 != 0 { segments += segments }
        let initialSequence = UInt32(flags) << 24 | 0x00FF_FFF0  // near a wrap of the sequence space for some inputs

        var peek = StreamPeek(capacity: 4096)
        peek.add(sequenceNumber: initialSequence, isSYN: true, payload: [])
        for segment in segments {
            peek.add(sequenceNumber: initialSequence &+ 1 &+ UInt32(segment.offset), isSYN: false, payload: segment.bytes)
        }
        let expected = content.prefix(peek.capacity)
        require(peek.contiguousPrefix.elementsEqual(expected), "reassembly differs from the stream sent")

        // The same segments as IP packets through the inspector (port 53 for DNS over TCP).
        let port: UInt16 = flags & 0x08 != 0 ? 53 : 443
        var inspector = FlowInspector(engine: Engines.engine, settings: FlowInspectorSettings(limits: FlowLimits(streamPeekBound: 4096)))
        var now: UInt64 = 1
        _ = inspector.inspect(Packets.tcp4(destinationPort: port, sequence: initialSequence, flags: 0x02, payload: []), now: now)
        for segment in segments {
            now += 1
            let packet = Packets.tcp4(destinationPort: port, sequence: initialSequence &+ 1 &+ UInt32(segment.offset), flags: 0x18,
                                      payload: segment.bytes)
            _ = inspector.inspect(packet, now: now)
        }
        _ = inspector.finishInspections(now: now + 1)
    }

    static func dns(_ input: [UInt8]) {
        _ = DNSMessageParser.parse(input)
        _ = DNSMessageParser.parse(tcpStream: input)
        if case .success(let records) = DNSMessageParser.addressRecords(in: input) {
            for record in records {
                require(record.addressOffset + record.addressLength <= input.count && record.timeToLiveOffset + 4 <= input.count,
                        "a record's offsets point past the message")
            }
        }
        // The answer rewrite, on the message as a UDP response from port 53 over IPv4 and IPv6.
        let rewrite = Policy.DNSRewrite(ipv4: .v4(0x7F00_0001), ipv6: .v6(high: 0, low: 1), timeToLive: 10)
        for packet in [Packets.udp4(sourcePort: 53, payload: input), Packets.udp6(sourcePort: 53, payload: input)] {
            guard let packet, let response = DNSResponsePacket(packet.span) else { continue }
            guard let rewritten = DNSAnswerRewrite.rewrite(packet.span, response: response, to: rewrite) else { continue }
            require(rewritten.count == packet.count, "the rewrite changed the packet's length")
            require(Packets.udpChecksumIsValid(rewritten, ipv6: packet[0] >> 4 == 6), "the rewritten packet's UDP checksum is wrong")
            guard case .success(let records) = DNSMessageParser.addressRecords(in: Array(rewritten[response.ip.payload])) else {
                require(false, "the rewritten answer no longer reads")
                return
            }
            for record in records {
                require(record.address == (record.type == 1 ? rewrite.ipv4 : rewrite.ipv6), "an address was not rewritten")
                require(record.timeToLive <= rewrite.timeToLive, "a TTL was not cut")
            }
        }
    }
}

/// Packets built around a fuzzed payload.
enum Packets {
    /// An IPv4 TCP segment from 10.0.0.1:40000 (checksums are not checked by the inspector).
    static func tcp4(destinationPort: UInt16, sequence: UInt32, flags: UInt8, payload: [UInt8]) -> [UInt8] {
        let length = min(65_535, 40 + payload.count)
        var packet: [UInt8] = [0x45, 0, UInt8(length >> 8), UInt8(length & 0xFF), 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]
        packet += [0x9c, 0x40, UInt8(destinationPort >> 8), UInt8(destinationPort & 0xFF)]
        packet += [UInt8(sequence >> 24), UInt8((sequence >> 16) & 0xFF), UInt8((sequence >> 8) & 0xFF), UInt8(sequence & 0xFF)]
        packet += [0, 0, 0, 0, 0x50, flags, 0xFF, 0xFF, 0, 0, 0, 0]
        packet += payload.prefix(length - 40)
        return packet
    }

    static func udp4(sourcePort: UInt16, destinationPort: UInt16 = 40_000, payload: [UInt8]) -> [UInt8]? {
        let length = 28 + payload.count
        guard length <= 65_535 else { return nil }
        var packet: [UInt8] = [0x45, 0, UInt8(length >> 8), UInt8(length & 0xFF), 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]
        packet += udpHeader(sourcePort: sourcePort, destinationPort: destinationPort, length: 8 + payload.count)
        packet += payload
        setChecksum(&packet, pseudoHeader: [10, 0, 0, 1, 10, 0, 0, 2], udpStart: 20)
        return packet
    }

    static func udp6(sourcePort: UInt16, destinationPort: UInt16 = 40_000, payload: [UInt8]) -> [UInt8]? {
        let length = 8 + payload.count
        guard length <= 65_535 else { return nil }
        let source: [UInt8] = [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1]
        let destination: [UInt8] = [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [2]
        var packet: [UInt8] = [0x60, 0, 0, 0, UInt8(length >> 8), UInt8(length & 0xFF), 17, 64] + source + destination
        packet += udpHeader(sourcePort: sourcePort, destinationPort: destinationPort, length: length)
        packet += payload
        setChecksum(&packet, pseudoHeader: source + destination, udpStart: 40)
        return packet
    }

    private static func udpHeader(sourcePort: UInt16, destinationPort: UInt16, length: Int) -> [UInt8] {
        [UInt8(sourcePort >> 8), UInt8(sourcePort & 0xFF), UInt8(destinationPort >> 8), UInt8(destinationPort & 0xFF), UInt8(length >> 8),
         UInt8(length & 0xFF), 0, 0]
    }

    private static func setChecksum(_ packet: inout [UInt8], pseudoHeader: [UInt8], udpStart: Int) {
        var checksum = ~sum(packet, pseudoHeader: pseudoHeader, udpStart: udpStart)
        if checksum == 0 { checksum = 0xFFFF }
        packet[udpStart + 6] = UInt8(checksum >> 8)
        packet[udpStart + 7] = UInt8(checksum & 0xFF)
    }

    /// The ones' complement sum of the pseudo-header and the UDP datagram (RFC 768).
    private static func sum(_ packet: [UInt8], pseudoHeader: [UInt8], udpStart: Int) -> UInt16 {
        var total: UInt32 = 17 + UInt32(packet.count - udpStart)
        for (index, byte) in (pseudoHeader + packet[udpStart...]).enumerated() {
            total &+= index % 2 == 0 ? UInt32(byte) << 8 : UInt32(byte)
        }
        while total > 0xFFFF { total = (total & 0xFFFF) + (total >> 16) }
        return UInt16(total)
    }

    /// The IPv4 header's checksum verifies (RFC 791 section 3.1).
    static func ipv4HeaderChecksumIsValid(_ packet: [UInt8]) -> Bool {
        let headerLength = Int(packet[0] & 0x0F) * 4
        guard headerLength >= 20, packet.count >= headerLength else { return false }
        var total: UInt32 = 0
        for index in stride(from: 0, to: headerLength, by: 2) { total &+= UInt32(packet[index]) << 8 | UInt32(packet[index + 1]) }
        while total > 0xFFFF { total = (total & 0xFFFF) + (total >> 16) }
        return total == 0xFFFF
    }

    static func udpChecksumIsValid(_ packet: [UInt8], ipv6: Bool) -> Bool {
        let udpStart = ipv6 ? 40 : 20
        let pseudoHeader = ipv6 ? Array(packet[8..<40]) : Array(packet[12..<20])
        return sum(packet, pseudoHeader: pseudoHeader, udpStart: udpStart) == 0xFFFF
    }
}
