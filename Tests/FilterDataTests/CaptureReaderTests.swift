import Testing
@testable import FilterData
import HallpassWire
import HallpassIPC

@Suite struct CaptureReaderTests {
    let ip = Build.ipv4(protocolNumber: 17, payload: Build.udp(payload: [1, 2, 3]))

    func le32(_ v: UInt32) -> [UInt8] { Build.be32(v).reversed() }
    func le16(_ v: Int) -> [UInt8] { Build.be16(v).reversed() }

    func pcap(bigEndian: Bool, nanoseconds: Bool, linkType: UInt32, frames: [[UInt8]]) -> [UInt8] {
        let w32 = { (value: UInt32) -> [UInt8] in bigEndian ? Build.be32(value) : self.le32(value) }
        let w16 = { (value: Int) -> [UInt8] in bigEndian ? Build.be16(value) : self.le16(value) }
        var out = w32(nanoseconds ? 0xa1b2_3c4d : 0xa1b2_c3d4) + w16(2) + w16(4) + w32(0) + w32(0) + w32(65535) + w32(linkType)
        for (index, frame) in frames.enumerated() {
            out += w32(1_700_000_000 + UInt32(index)) + w32(500) + w32(UInt32(frame.count)) + w32(UInt32(frame.count)) + frame
        }
        return out
    }

    func ipPacket(_ record: CaptureRecord?) -> [UInt8]? {
        if case .ip(let bytes) = record?.payload { return Array(bytes) }
        return nil
    }

    @Test func pcapBothByteOrdersAndResolutions() throws {
        for bigEndian in [true, false] {
            for nanoseconds in [true, false] {
                var reader = try CaptureReader(bytes: pcap(bigEndian: bigEndian, nanoseconds: nanoseconds, linkType: 101, frames: [ip, ip]))
                #expect(reader.format == .pcap(bigEndian: bigEndian, nanosecondResolution: nanoseconds))
                let records = try reader.readAll()
                #expect(records.count == 2)
                #expect(ipPacket(records.first) == ip)
                #expect(records[1].timestamp == CaptureTimestamp(seconds: 1_700_000_001, nanoseconds: nanoseconds ? 500 : 500_000))
            }
        }
    }

    @Test func linkTypes() {
        let ether = [UInt8](repeating: 0xAA, count: 12)
        let v6 = Build.ipv6(nextHeader: 59, payload: [])
        let cases: [(UInt32, [UInt8], [UInt8])] = [
            (1, ether + [0x08, 0x00] + ip, ip),
            (1, ether + [0x81, 0x00, 0, 5, 0x88, 0xa8, 0, 6, 0x86, 0xDD] + v6, v6),  // stacked tags
            (1, ether + [0x88, 0x64, 0x11, 0, 0, 1, 0, 0, 0x00, 0x21] + ip, ip),     // PPPoE
            (113, [UInt8](repeating: 0, count: 14) + [0x08, 0x00] + ip, ip),
            (276, [0x86, 0xDD] + [UInt8](repeating: 0, count: 18) + v6, v6),
            (0, [2, 0, 0, 0] + ip, ip),
            (0, [0, 0, 0, 2] + ip, ip),
            (0, [30, 0, 0, 0] + v6, v6),
            (9, [0xFF, 0x03, 0x00, 0x21] + ip, ip),
            (9, [0x00, 0x57] + v6, v6),
            (228, ip, ip), (229, v6, v6), (12, ip, ip), (14, v6, v6), (101, v6, v6),
        ]
        for (linkType, frame, expected) in cases {
            guard case .ip(let packet) = LinkLayer.payload(of: frame[...], linkType: linkType) else {
                Issue.record("link type \(linkType) frame not decoded")
                continue
            }
            #expect(Array(packet) == expected, "link type \(linkType)")
        }
        let notIP: [(UInt32, [UInt8])] = [
            (1, ether + [0x08, 0x06] + [0, 1]),
            (1, ether + [0x00, 0x40]),
            (1, ether + [0x81, 0x00]),
            (1, ether + Array(repeating: [0x81, 0x00, 0, 1], count: 10).flatMap { $0 } + [0x08, 0x00] + ip),
            (0, [99, 0, 0, 0] + ip),
            (228, Build.ipv6(nextHeader: 59, payload: [])),
            (147, ip),
            (113, [1, 2]),
        ]
        for (linkType, frame) in notIP {
            if case .ip = LinkLayer.payload(of: frame[...], linkType: linkType) { Issue.record("link type \(linkType) wrongly decoded") }
        }
    }

    func pcapng(bigEndian: Bool) -> [UInt8] {
        let w32 = { (value: UInt32) -> [UInt8] in bigEndian ? Build.be32(value) : self.le32(value) }
        let w16 = { (value: Int) -> [UInt8] in bigEndian ? Build.be16(value) : self.le16(value) }
        func block(_ type: UInt32, _ body: [UInt8]) -> [UInt8] {
            var padded = body
            while padded.count % 4 != 0 { padded.append(0) }
            let length = UInt32(12 + padded.count)
            return w32(type) + w32(length) + padded + w32(length)
        }
        var out = block(0x0a0d_0d0a, w32(0x1a2b_3c4d) + w16(1) + w16(0) + [UInt8](repeating: 0xFF, count: 8))
        // Interface 0: Ethernet, nanosecond resolution (if_tsresol = 9).
        out += block(1, w16(1) + w16(0) + w32(0) + w16(9) + w16(1) + [9, 0, 0, 0] + w16(0) + w16(0))
        // Interface 1: raw IP, default microseconds.
        out += block(1, w16(101) + w16(0) + w32(0))
        let frame = [UInt8](repeating: 0xAA, count: 12) + [0x08, 0x00] + ip
        let ticks: UInt64 = 1_700_000_000_123_456_789
        out += block(6, w32(0) + w32(UInt32(ticks >> 32)) + w32(UInt32(ticks & 0xFFFF_FFFF)) + w32(UInt32(frame.count)) + w32(UInt32(frame.count)) + frame)
        out += block(0x0BAD, [1, 2, 3, 4])  // unknown block: skipped
        out += block(3, w32(UInt32(frame.count)) + frame)  // simple packet block: interface 0
        out += block(2, w16(1) + w16(0) + w32(0) + w32(2_000_000) + w32(UInt32(ip.count)) + w32(UInt32(ip.count)) + ip)  // obsolete packet block
        return out
    }

    @Test func pcapngBothByteOrders() throws {
        for bigEndian in [false, true] {
            var reader = try CaptureReader(bytes: pcapng(bigEndian: bigEndian))
            #expect(reader.format == .pcapng)
            let records = try reader.readAll()
            #expect(records.count == 3)
            #expect(records.allSatisfy { ipPacket($0) == ip })
            #expect(records[0].timestamp == CaptureTimestamp(seconds: 1_700_000_000, nanoseconds: 123_456_789))
            #expect(records[1].timestamp == nil)
            #expect(records[2].linkType == 101)
            #expect(records[2].timestamp == CaptureTimestamp(seconds: 2, nanoseconds: 0))
        }
    }

    @Test func errorsNameTheOffset() throws {
        #expect(throws: CaptureError.self) { try CaptureReader(bytes: [1, 2]) }
        #expect(throws: CaptureError(offset: 0, reason: "unknown magic number 0x7f454c46: neither pcap nor pcapng")) {
            try CaptureReader(bytes: [0x7f, 0x45, 0x4c, 0x46, 0, 0])
        }
        let good = pcap(bigEndian: false, nanoseconds: false, linkType: 101, frames: [ip, ip])
        var reader = try CaptureReader(bytes: Array(good.dropLast(5)))
        _ = try reader.next()
        do {
            _ = try reader.next()
            Issue.record("truncated record accepted")
        } catch {
            #expect(error.offset == 24 + 16 + ip.count)
        }
        var ng = try CaptureReader(bytes: Array(pcapng(bigEndian: false).dropLast(3)))
        #expect(throws: CaptureError.self) { _ = try ng.readAll() }
    }

    @Test func prefixesAndFlipsNeverCrash() {
        for sample in [pcapng(bigEndian: false), pcapng(bigEndian: true), pcap(bigEndian: true, nanoseconds: false, linkType: 1, frames: [ip])] {
            for length in 0...sample.count {
                if var reader = try? CaptureReader(bytes: Array(sample.prefix(length))) { _ = try? reader.readAll() }
            }
            forEachMutation(of: sample, rounds: 1500) {
                if var reader = try? CaptureReader(bytes: $0) { _ = try? reader.readAll() }
            }
        }
    }

    @Test func realFilesAreRecognisedByMagicNotName() throws {
        guard TestData.isAvailable else { return }
        // Extensions that lie (see the testdata README).
        let cases: [(String, CaptureFormat)] = [
            ("ndpi/pcap/dns.pcap", .pcapng),
            ("ndpi/pcap/bets.pcapng", .pcap(bigEndian: false, nanosecondResolution: false)),
        ]
        for (file, format) in cases {
            var reader = try CaptureReader(bytes: TestData.bytes(file))
            #expect(reader.format == format, "\(file)")
            #expect(try reader.readAll().count > 0)
        }
        // Linux SLL, PPP and BSD null link types.
        for file in ["ndpi/pcap/quic-v2.pcapng", "ndpi/pcap/dlt_ppp.pcap", "suricata-verify/tests/quic-v2/input.pcap"] {
            var reader = try CaptureReader(bytes: TestData.bytes(file))
            let records = try reader.readAll()
            #expect(records.contains { if case .ip = $0.payload { return true } else { return false } }, "\(file)")
        }
    }
}
