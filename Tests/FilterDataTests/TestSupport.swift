// Shared helpers for the FilterData tests: test data location, hex, builders.
import Foundation
// The byte mutations and generator every file of this target uses.
@_exported import HallpassTestSupport

enum TestData {
    /// `$HALLPASS_TESTDATA`, else `../shared/testdata` beside the package root
    /// (found from this file's path: Tests/FilterDataTests/TestSupport.swift).
    static let root: URL = {
        if let override = ProcessInfo.processInfo.environment["HALLPASS_TESTDATA"], !override.isEmpty {
            return URL(fileURLWithPath: override, isDirectory: true)
        }
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return packageRoot.deletingLastPathComponent().appendingPathComponent("shared/testdata", isDirectory: true)
    }()

    static var isAvailable: Bool { FileManager.default.fileExists(atPath: root.appendingPathComponent("ndpi/pcap").path) }

    static func bytes(_ relativePath: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: root.appendingPathComponent(relativePath)))
    }
}

extension Array where Element == UInt8 {
    /// Bytes from hex text; whitespace ignored.
    init(hex: String) {
        let digits = hex.unicodeScalars.compactMap { UInt8(String($0), radix: 16) }
        self = stride(from: 0, to: digits.count - 1, by: 2).map { digits[$0] << 4 | digits[$0 + 1] }
    }

    var hexString: String { map { String(format: "%02x", $0) }.joined() }
}

extension String {
    init(ascii bytes: [UInt8]) { self = String(decoding: bytes, as: UTF8.self) }
}

/// The Internet checksum (RFC 1071) as the tests check it: written here
/// apart from the code under test (FilterData's InternetChecksum), once.
enum Checksum {
    /// The one's complement sum of `bytes` (an odd last byte padded with a zero), folded to 16 bits.
    static func folded(_ bytes: [UInt8]) -> UInt16 {
        var sum: UInt32 = 0
        var index = 0
        while index + 1 < bytes.count {
            sum += UInt32(bytes[index]) << 8 | UInt32(bytes[index + 1])
            index += 2
        }
        if index < bytes.count { sum += UInt32(bytes[index]) << 8 }
        while sum > 0xFFFF { sum = (sum & 0xFFFF) + (sum >> 16) }
        return UInt16(sum)
    }

    /// True when the sum of `pseudo` and `bytes`, the checksum in place, folds to 0xFFFF.
    static func holds(_ bytes: [UInt8], pseudo: [UInt8] = []) -> Bool {
        folded(pseudo + bytes) == 0xFFFF
    }

    /// UDP's pseudo-header (RFC 768): the addresses, the protocol and the UDP length. IPv6's
    /// (RFC 8200 section 8.1: a 32-bit length, the next header after three zero bytes) sums the same.
    static func udpPseudoHeader(source: [UInt8], destination: [UInt8], udpLength: Int) -> [UInt8] {
        source + destination + [0, 17] + [UInt8(truncatingIfNeeded: udpLength >> 8), UInt8(truncatingIfNeeded: udpLength)]
    }
}

/// Builders for handmade packets.
enum Build {
    static func be16(_ value: Int) -> [UInt8] { [UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)] }
    static func be24(_ value: Int) -> [UInt8] { [UInt8(truncatingIfNeeded: value >> 16)] + be16(value) }
    static func be32(_ value: UInt32) -> [UInt8] { be16(Int(value >> 16)) + be16(Int(value & 0xFFFF)) }

    /// A ClientHello handshake message (type 1) with the given extensions.
    static func clientHello(extensions: [(UInt16, [UInt8])], legacyVersion: Int = 0x0303) -> [UInt8] {
        var body: [UInt8] = be16(legacyVersion) + [UInt8](repeating: 0xAB, count: 32)
        body += [32] + [UInt8](repeating: 0x11, count: 32)  // session id
        body += be16(4) + [0x13, 0x01, 0x13, 0x02]          // cipher suites
        body += [1, 0]                                       // compression: null
        var exts: [UInt8] = []
        for (type, data) in extensions { exts += be16(Int(type)) + be16(data.count) + data }
        body += be16(exts.count) + exts
        return [1] + be24(body.count) + body
    }

    static func sniExtension(_ name: String) -> (UInt16, [UInt8]) {
        let bytes = Array(name.utf8)
        let entry: [UInt8] = [0] + be16(bytes.count) + bytes
        return (0, be16(entry.count) + entry)
    }

    static func alpnExtension(_ names: [String]) -> (UInt16, [UInt8]) {
        var list: [UInt8] = []
        for name in names { list += [UInt8(name.utf8.count)] + Array(name.utf8) }
        return (16, be16(list.count) + list)
    }

    static func supportedVersions(_ versions: [Int]) -> (UInt16, [UInt8]) {
        (43, [UInt8(versions.count * 2)] + versions.flatMap { be16($0) })
    }

    /// Wraps a handshake message in TLS records of at most `recordSize` bytes.
    static func records(_ message: [UInt8], recordSize: Int = 16384) -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while index < message.count {
            let end = min(message.count, index + recordSize)
            out += [22, 3, 1] + be16(end - index) + message[index..<end]
            index = end
        }
        return out
    }

    static func ipv4(source: [UInt8] = [10, 0, 0, 1], destination: [UInt8] = [10, 0, 0, 2], protocolNumber: UInt8,
                     payload: [UInt8], flagsAndOffset: Int = 0, options: [UInt8] = [], totalLengthDelta: Int = 0) -> [UInt8] {
        let headerLength = 20 + options.count
        var header: [UInt8] = [UInt8(0x40 | headerLength / 4), 0] + be16(headerLength + payload.count + totalLengthDelta)
        header += be16(0x1234) + be16(flagsAndOffset) + [64, protocolNumber, 0, 0] + source + destination + options
        return header + payload
    }

    static func ipv6(source: [UInt8] = [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1],
                     destination: [UInt8] = [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [2],
                     nextHeader: UInt8, payload: [UInt8]) -> [UInt8] {
        [0x60, 0, 0, 0] + be16(payload.count) + [nextHeader, 64] + source + destination + payload
    }

    static func tcp(sourcePort: Int = 40000, destinationPort: Int = 443, seq: UInt32 = 1000, ack: UInt32 = 0,
                    flags: UInt8 = 0x18, options: [UInt8] = [], payload: [UInt8] = []) -> [UInt8] {
        let headerLength = 20 + options.count
        return be16(sourcePort) + be16(destinationPort) + be32(seq) + be32(ack)
            + [UInt8(headerLength / 4) << 4, flags] + be16(65535) + [0, 0, 0, 0] + options + payload
    }

    static func udp(sourcePort: Int = 40000, destinationPort: Int = 53, payload: [UInt8], lengthDelta: Int = 0) -> [UInt8] {
        be16(sourcePort) + be16(destinationPort) + be16(8 + payload.count + lengthDelta) + [0, 0] + payload
    }

    /// A DNS query for `name` (no compression).
    static func dnsQuery(_ name: String, type: Int = 1, id: Int = 0x1234) -> [UInt8] {
        var message = be16(id) + be16(0x0100) + be16(1) + be16(0) + be16(0) + be16(0)
        message += dnsName(name) + be16(type) + be16(1)
        return message
    }

    static func dnsName(_ name: String) -> [UInt8] {
        var out: [UInt8] = []
        for label in name.split(separator: ".") { out += [UInt8(label.utf8.count)] + Array(label.utf8) }
        return out + [0]
    }
}
