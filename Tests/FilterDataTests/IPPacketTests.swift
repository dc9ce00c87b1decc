import Testing
import VerdictCore
@testable import FilterData
import HallpassWire
import HallpassIPC

@Suite struct IPPacketTests {
    @Test func ipv4TCPWithOptions() throws {
        let segment = Build.tcp(seq: 0x0102_0304, ack: 0x0A0B_0C0D, flags: 0x12, options: [2, 4, 5, 0xB4, 1, 1, 1, 0], payload: [9, 9, 9])
        let bytes = Build.ipv4(protocolNumber: 6, payload: segment, options: [1, 1, 1, 0])
        let packet = try IPPacketParser.parse(bytes)
        #expect(packet.version == 4)
        #expect(packet.source == IPAddress("10.0.0.1"))
        #expect(packet.destination == IPAddress("10.0.0.2"))
        #expect(packet.protocolNumber == 6)
        #expect(packet.sourcePort == 40000 && packet.destinationPort == 443)
        #expect(packet.tcp?.sequenceNumber == 0x0102_0304)
        #expect(packet.tcp?.acknowledgmentNumber == 0x0A0B_0C0D)
        #expect(packet.tcp?.flags == [.syn, .ack])
        #expect(packet.tcp?.headerLength == 28)
        #expect(Array(bytes[packet.payload]) == [9, 9, 9])
        #expect(packet.fragmentation == .unfragmented)
    }

    @Test func totalLengthSmallerThanBufferWins() throws {
        // Ethernet padding after the packet must not count as payload.
        let bytes = Build.ipv4(protocolNumber: 17, payload: Build.udp(payload: [1, 2])) + [0, 0, 0, 0]
        let packet = try IPPacketParser.parse(bytes)
        #expect(Array(bytes[packet.payload]) == [1, 2])
        // Total length larger than the buffer: the buffer wins.
        let cut = Build.ipv4(protocolNumber: 17, payload: Build.udp(payload: [1, 2, 3, 4]), totalLengthDelta: 100)
        #expect(try IPPacketParser.parse(cut).payload.count == 4)
    }

    @Test func fragments() throws {
        let first = try IPPacketParser.parse(Build.ipv4(protocolNumber: 17, payload: Build.udp(payload: [1, 2, 3]), flagsAndOffset: 0x2000))
        #expect(first.fragmentation == .firstFragment(identification: 0x1234))
        #expect(first.destinationPort == 53)
        let later = try IPPacketParser.parse(Build.ipv4(protocolNumber: 17, payload: [1, 2, 3, 4], flagsAndOffset: 0x0003))
        #expect(later.fragmentation == .laterFragment(identification: 0x1234, offset: 24, moreFragments: false))
        #expect(later.sourcePort == nil)
        #expect(later.flowKey == nil)
        #expect(later.payload.count == 4)
    }

    @Test func ipv6ExtensionHeaders() throws {
        let udp = Build.udp(sourcePort: 5353, destinationPort: 5353, payload: [7])
        // Hop-by-hop (8 bytes) -> destination options (16 bytes) -> AH (12 bytes: length field 1) -> UDP.
        let hopByHop: [UInt8] = [60, 0, 1, 4, 0, 0, 0, 0]
        let destination: [UInt8] = [51, 1] + [UInt8](repeating: 0, count: 14)
        let ah: [UInt8] = [17, 1, 0, 0] + [UInt8](repeating: 0, count: 8)
        let bytes = Build.ipv6(nextHeader: 0, payload: hopByHop + destination + ah + udp)
        let packet = try IPPacketParser.parse(bytes)
        #expect(packet.version == 6)
        #expect(packet.protocolNumber == 17)
        #expect(packet.sourcePort == 5353)
        #expect(Array(bytes[packet.payload]) == [7])
        #expect(packet.source == IPAddress("2001:db8::1"))
    }

    @Test func ipv6FragmentsAndStops() throws {
        let firstFragment = try IPPacketParser.parse(Build.ipv6(nextHeader: 44, payload: [6, 0, 0, 1, 0, 0, 0, 9] + Build.tcp()))
        #expect(firstFragment.fragmentation == .firstFragment(identification: 9))
        #expect(firstFragment.protocolNumber == 6)
        #expect(firstFragment.destinationPort == 443)
        let laterFragment = try IPPacketParser.parse(Build.ipv6(nextHeader: 44, payload: [6, 0, 0, 0x10, 0, 0, 0, 9, 1, 2, 3]))
        #expect(laterFragment.fragmentation == .laterFragment(identification: 9, offset: 16, moreFragments: false))
        #expect(laterFragment.tcp == nil)
        let noNext = try IPPacketParser.parse(Build.ipv6(nextHeader: 59, payload: []))
        #expect(noNext.protocolNumber == 59)
        let esp = try IPPacketParser.parse(Build.ipv6(nextHeader: 50, payload: [1, 2, 3, 4, 5, 6, 7, 8]))
        #expect(esp.protocolNumber == 50 && esp.payload.count == 8)
        // A chain of 9 destination-options headers is refused.
        var chain: [UInt8] = []
        for _ in 0..<9 { chain += [60, 0, 1, 4, 0, 0, 0, 0] }
        #expect(throws: IPPacketError.tooManyExtensionHeaders(8)) { try IPPacketParser.parse(Build.ipv6(nextHeader: 60, payload: chain)) }
    }

    @Test func errors() {
        #expect(throws: IPPacketError.empty) { try IPPacketParser.parse([UInt8]()) }
        #expect(throws: IPPacketError.unknownVersion(5)) { try IPPacketParser.parse([0x50, 0, 0, 0]) }
        #expect(throws: IPPacketError.badHeaderLength(16)) { try IPPacketParser.parse([0x44] + [UInt8](repeating: 0, count: 30)) }
        var badData = Build.ipv4(protocolNumber: 6, payload: Build.tcp())
        badData[20 + 12] = 0x40  // data offset 16
        #expect(throws: IPPacketError.self) { try IPPacketParser.parse(badData) }
    }

    @Test func everyPrefixAndFlipIsSafe() {
        let samples = [
            Build.ipv4(protocolNumber: 6, payload: Build.tcp(options: [1, 1, 1, 1], payload: [1, 2, 3])),
            Build.ipv6(nextHeader: 0, payload: [44, 0, 1, 4, 0, 0, 0, 0] + [17, 0, 0, 1, 0, 0, 0, 1] + Build.udp(payload: [1])),
        ]
        for sample in samples {
            for length in 0...sample.count { _ = try? IPPacketParser.parse(Array(sample.prefix(length))) }
            forEachMutation(of: sample, rounds: 2000) { _ = try? IPPacketParser.parse($0) }
        }
    }

    @Test func flowKeys() {
        let key = FlowKey(protocolNumber: 6, source: .v4(0x0A00_0002), sourcePort: 40000, destination: .v4(0x0A00_0001), destinationPort: 443)
        #expect(key.reversed.reversed == key)
        #expect(key.directionIndependent == key.reversed.directionIndependent)
        #expect(key.directionIndependent.source == .v4(0x0A00_0001))
        let mixed = FlowKey(protocolNumber: 17, source: .v6(high: 0, low: 1), sourcePort: 1, destination: .v4(1), destinationPort: 2)
        #expect(mixed.directionIndependent == mixed.reversed.directionIndependent)
    }
}
