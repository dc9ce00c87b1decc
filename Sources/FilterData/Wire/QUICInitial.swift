// QUIC client Initial packets: long header (RFC 9000 section 17.2), Initial
// keys and header protection (RFC 9001 sections 5.2 and 5.4), AEAD
// (RFC 9001 section 5.3), frames (RFC 9000 section 19), for QUIC v1, QUIC v2
// (RFC 9369) and the late drafts. The CRYPTO stream of the Initials carries
// the TLS ClientHello as a bare handshake message.
// Keys, header protection and AEAD are QUICInitialProtection's, shared with
// Google QUIC's protected Initials.
import HallpassWire

/// The QUIC versions whose Initial packets can be opened.
public struct QUICVersion: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// RFC 9000.
    public static let version1 = QUICVersion(rawValue: 0x0000_0001)
    /// RFC 9369.
    public static let version2 = QUICVersion(rawValue: 0x6b33_43cf)
    /// draft-ietf-quic-transport-29.
    public static let draft29 = QUICVersion(rawValue: 0xff00_001d)

    /// True when this parser knows the version's Initial salt and labels.
    public var isSupported: Bool { QUICInitialParser.initialParameters(for: rawValue) != nil }

    public var description: String {
        let hex = String(rawValue, radix: 16)
        return "0x" + String(repeating: "0", count: max(0, 8 - hex.count)) + hex
    }
}

/// A CRYPTO frame (RFC 9000 section 19.6).
public struct QUICCryptoFrame: Hashable, Sendable {
    public var offset: UInt64
    public var data: [UInt8]
    public init(offset: UInt64, data: [UInt8]) {
        self.offset = offset
        self.data = data
    }
}

/// A decrypted client Initial packet.
public struct QUICInitialPacket: Hashable, Sendable {
    public var version: QUICVersion
    public var destinationConnectionID: [UInt8]
    public var sourceConnectionID: [UInt8]
    /// The DCID whose Initial keys opened the packet (its own, or the flow's original one).
    public var keyConnectionID: [UInt8]
    public var tokenLength: Int
    /// The packet number as sent (truncated to its encoded length).
    public var packetNumber: UInt64
    /// The CRYPTO frames, in packet order.
    public var cryptoFrames: [QUICCryptoFrame]
    /// Where the packet lies in the datagram.
    public var packetRange: Range<Int>
}

/// What was found in a UDP datagram.
public struct QUICDatagramSummary: Hashable, Sendable {
    /// The Initial packets that decrypted, in datagram order.
    public var initials: [QUICInitialPacket]
    /// 0-RTT and Handshake packets passed over.
    public var skippedPacketCount: Int
    /// Why parsing stopped before the end of the datagram, if it did.
    public var problem: String?
}

public enum QUICDatagramOutcome: Hashable, Sendable {
    /// The datagram does not start with a long header (a short-header packet, or not QUIC).
    case notLongHeader
    /// A Version Negotiation packet (version 0).
    case versionNegotiation
    /// A long header with a version whose Initial keys are unknown (greased or private versions).
    case unsupportedVersion(QUICVersion)
    /// A Retry packet (sent by servers).
    case retry
    /// The first packet cannot be read; `reason` says why.
    case malformed(reason: String)
    case packets(QUICDatagramSummary)
}

/// Opens client Initial packets.
public enum QUICInitialParser {
    /// Long header packet kinds (RFC 9000 section 17.2; RFC 9369 section 3.2 for v2's different bits).
    enum PacketKind { case initial, zeroRTT, handshake, retry }

    /// How a version's Initials are protected, and whether its long header types are v2's.
    struct InitialParameters {
        var protection: QUICInitialProtection.Parameters
        var isVersion2: Bool
    }

    private static let saltV1: [UInt8] = [0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a]
    private static let saltV2: [UInt8] = [0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9]
    private static let saltDraft29: [UInt8] = [0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11, 0xe0, 0x43, 0x90, 0xa8, 0x99]
    private static let saltDraft23: [UInt8] = [0xc3, 0xee, 0xf7, 0x12, 0xc7, 0x2e, 0xbb, 0x5a, 0x11, 0xa7, 0xd2, 0x43, 0x2b, 0xb4, 0x63, 0x65, 0xbe, 0xf9, 0xf5, 0x02]
    private static let saltDraft22: [UInt8] = [0x7f, 0xbc, 0xdb, 0x0e, 0x7c, 0x66, 0xbb, 0xe9, 0x19, 0x3a, 0x96, 0xcd, 0x21, 0x51, 0x9e, 0xbd, 0x7a, 0x02, 0x64, 0x4a]

    static func initialParameters(for version: UInt32) -> InitialParameters? {
        let salt: [UInt8]
        switch version {
        case 0x0000_0001: salt = saltV1
        case 0x6b33_43cf:
            return InitialParameters(protection: .version2Labels(salt: saltV2), isVersion2: true)
        case 0xff00_001d...0xff00_0022: salt = saltDraft29  // drafts 29-34
        case 0xff00_0017...0xff00_001c, 0xface_b002, 0xface_b00e: salt = saltDraft23  // drafts 23-28; mvfst draft-27 and experimental
        case 0xff00_0016, 0xface_b001: salt = saltDraft22                // draft 22; mvfst draft-22
        default: return nil
        }
        return InitialParameters(protection: .version1Labels(salt: salt), isVersion2: false)
    }

    static func packetKind(typeBits: UInt8, isVersion2: Bool) -> PacketKind {
        if isVersion2 {
            switch typeBits { case 1: return .initial; case 2: return .zeroRTT; case 3: return .handshake; default: return .retry }
        }
        switch typeBits { case 0: return .initial; case 1: return .zeroRTT; case 2: return .handshake; default: return .retry }
    }

    // MARK: Datagrams

    /// Parses a client UDP datagram: every coalesced long-header packet is
    /// read; Initials are decrypted, 0-RTT and Handshake packets skipped.
    /// Keys come from each packet's own Destination Connection ID, so
    /// Initials sent after a Retry (new DCID) open as well; when that fails,
    /// each of `keyConnectionIDs` (the DCIDs whose keys opened earlier
    /// Initials of the flow) is tried, for clients that switched to the
    /// server's connection ID without a Retry.
    public static func parse(datagram bytes: Span<UInt8>, keyConnectionIDs: [[UInt8]] = []) -> QUICDatagramOutcome {
        guard !bytes.isEmpty else { return .malformed(reason: "empty datagram") }
        var summary = QUICDatagramSummary(initials: [], skippedPacketCount: 0, problem: nil)
        var offset = 0
        var first = true
        while offset < bytes.count {
            let outcome = parsePacket(bytes, at: offset, keyConnectionIDs: keyConnectionIDs)
            switch outcome {
            case .initial(let packet):
                summary.initials.append(packet)
                offset = packet.packetRange.upperBound
            case .skipped(let end):
                summary.skippedPacketCount += 1
                offset = end
            case .stop(let result, let reason):
                if first, let result { return result }
                if let reason, !(reason == "padding" && !first) { summary.problem = reason }
                return .packets(summary)
            }
            first = false
        }
        return .packets(summary)
    }

    /// Convenience for an array.
    public static func parse(datagram bytes: [UInt8], keyConnectionIDs: [[UInt8]] = []) -> QUICDatagramOutcome {
        parse(datagram: bytes.span, keyConnectionIDs: keyConnectionIDs)
    }

    private enum PacketOutcome {
        case initial(QUICInitialPacket)
        case skipped(end: Int)
        /// `result` is what to report if this is the datagram's first packet.
        case stop(QUICDatagramOutcome?, reason: String?)
    }

    private static func parsePacket(_ bytes: Span<UInt8>, at start: Int, keyConnectionIDs: [[UInt8]]) -> PacketOutcome {
        var reader = WireReader(bytes, from: start)
        guard let firstByte = reader.readU8(in: bytes) else { return .stop(.malformed(reason: "empty datagram"), reason: nil) }
        guard firstByte & 0x80 != 0 else {
            // Trailing zero bytes after coalesced packets are padding.
            return .stop(.notLongHeader, reason: firstByte == 0 ? "padding" : "short-header packet follows")
        }
        guard let version = reader.readU32(in: bytes) else { return .stop(.malformed(reason: "long header ends before version"), reason: "truncated long header") }
        if version == 0 { return .stop(.versionNegotiation, reason: "version negotiation") }
        guard let parameters = initialParameters(for: version) else {
            return .stop(.unsupportedVersion(QUICVersion(rawValue: version)), reason: "unsupported version \(QUICVersion(rawValue: version))")
        }
        guard let dcidLength = reader.readU8(in: bytes), dcidLength <= 20, let dcid = reader.readBytes(Int(dcidLength), in: bytes),
              let scidLength = reader.readU8(in: bytes), scidLength <= 20, let scid = reader.readBytes(Int(scidLength), in: bytes) else {
            return .stop(.malformed(reason: "bad connection IDs"), reason: "bad connection IDs")
        }
        let kind = packetKind(typeBits: (firstByte >> 4) & 0x03, isVersion2: parameters.isVersion2)
        if kind == .retry { return .stop(.retry, reason: "retry") }
        var tokenLength = 0
        if kind == .initial {
            guard let length = reader.readQUICVarInt(in: bytes), length <= UInt64(reader.remaining) else {
                return .stop(.malformed(reason: "bad token length"), reason: "bad token length")
            }
            tokenLength = Int(length)
            _ = reader.skip(tokenLength)
        }
        guard let length = reader.readQUICVarInt(in: bytes), length <= UInt64(reader.remaining) else {
            return .stop(.malformed(reason: "packet length runs past the datagram"), reason: "packet length runs past the datagram")
        }
        let packetNumberOffset = reader.offset
        let end = packetNumberOffset + Int(length)
        guard kind == .initial else { return .skipped(end: end) }

        // Header protection (RFC 9001 section 5.4): the sample starts 4 bytes after the packet number offset.
        guard end - packetNumberOffset >= 4 + QUICInitialProtection.sampleLength else {
            return .stop(.malformed(reason: "Initial too short for the header protection sample"), reason: "short Initial")
        }
        guard let opened = QUICInitialProtection.open(
            bytes, packetStart: start, packetNumberOffset: packetNumberOffset, end: end, destinationConnectionID: dcid,
            keyConnectionIDs: keyConnectionIDs, parameters: parameters.protection)
        else {
            return .stop(.malformed(reason: "Initial failed authentication (not a client Initial, or corrupted)"),
                         reason: "Initial failed authentication")
        }
        var packet = QUICInitialPacket(version: QUICVersion(rawValue: version), destinationConnectionID: dcid,
                                       sourceConnectionID: scid, keyConnectionID: opened.keyConnectionID, tokenLength: tokenLength,
                                       packetNumber: opened.packetNumber, cryptoFrames: [], packetRange: start..<end)
        packet.cryptoFrames = cryptoFrames(in: opened.plaintext.span)
        return .initial(packet)
    }

    // MARK: Frames (RFC 9000 section 19)

    /// Collects the CRYPTO frames of a decrypted payload. Walks PADDING, PING,
    /// ACK, CRYPTO and CONNECTION_CLOSE; stops quietly at anything else.
    static func cryptoFrames(in payload: Span<UInt8>) -> [QUICCryptoFrame] {
        var reader = WireReader(payload)
        var frames: [QUICCryptoFrame] = []
        while let type = reader.readQUICVarInt(in: payload) {
            switch type {
            case 0x00, 0x01:  // PADDING, PING
                continue
            case 0x02, 0x03:  // ACK (section 19.3)
                guard reader.readQUICVarInt(in: payload) != nil, reader.readQUICVarInt(in: payload) != nil,
                      let rangeCount = reader.readQUICVarInt(in: payload), reader.readQUICVarInt(in: payload) != nil,
                      rangeCount <= UInt64(reader.remaining) else { return frames }
                for _ in 0..<Int(rangeCount) {
                    guard reader.readQUICVarInt(in: payload) != nil, reader.readQUICVarInt(in: payload) != nil else { return frames }
                }
                if type == 0x03 {
                    for _ in 0..<3 where reader.readQUICVarInt(in: payload) == nil { return frames }
                }
            case 0x06:  // CRYPTO (section 19.6)
                guard let offset = reader.readQUICVarInt(in: payload), let length = reader.readQUICVarInt(in: payload),
                      length <= UInt64(reader.remaining), let data = reader.readBytes(Int(length), in: payload) else { return frames }
                frames.append(QUICCryptoFrame(offset: offset, data: data))
            case 0x1c:  // CONNECTION_CLOSE (section 19.19)
                guard reader.readQUICVarInt(in: payload) != nil, reader.readQUICVarInt(in: payload) != nil,
                      let reasonLength = reader.readQUICVarInt(in: payload), reasonLength <= UInt64(reader.remaining),
                      reader.skip(Int(reasonLength)) else { return frames }
            default:
                return frames
            }
        }
        return frames
    }
}

/// Reassembles the CRYPTO stream of one QUIC flow's client Initials, across
/// packets and out of order (first copy wins), up to a bound.
public struct QUICCryptoAssembler: Sendable {
    public static let defaultCapacity = 65_536

    private var buffer: ReassemblyBuffer
    /// The version of the Initials seen; a packet of another version (after
    /// version negotiation) starts the stream again.
    public private(set) var version: QUICVersion?
    /// The DCIDs whose keys opened this flow's Initials (at most 4, newest last).
    public private(set) var keyConnectionIDs: [[UInt8]] = []

    public init(capacity: Int = QUICCryptoAssembler.defaultCapacity) {
        buffer = ReassemblyBuffer(capacity: capacity)
    }

    /// Bytes of the CRYPTO stream present from offset 0 without a gap.
    public var contiguousCount: Int { buffer.contiguousCount }

    /// Adds the CRYPTO frames of a decrypted Initial. Returns true when the contiguous prefix grew.
    @discardableResult
    public mutating func add(_ packet: QUICInitialPacket) -> Bool {
        if let version, version != packet.version { buffer.reset() }
        version = packet.version
        if !keyConnectionIDs.contains(packet.keyConnectionID) {
            if keyConnectionIDs.count == 4 { keyConnectionIDs.removeFirst() }
            keyConnectionIDs.append(packet.keyConnectionID)
        }
        var grew = false
        for frame in packet.cryptoFrames where add(frame) { grew = true }
        return grew
    }

    /// Parses a client datagram of this flow with the flow's known Initial
    /// keys, and adds the CRYPTO frames of its Initials.
    public mutating func add(datagram bytes: Span<UInt8>) -> QUICDatagramOutcome {
        let outcome = QUICInitialParser.parse(datagram: bytes, keyConnectionIDs: keyConnectionIDs)
        if case .packets(let summary) = outcome {
            for packet in summary.initials { add(packet) }
        }
        return outcome
    }

    /// Convenience for an array.
    public mutating func add(datagram bytes: [UInt8]) -> QUICDatagramOutcome {
        add(datagram: bytes.span)
    }

    /// Adds one CRYPTO frame. Data beyond the bound is dropped.
    @discardableResult
    public mutating func add(_ frame: QUICCryptoFrame) -> Bool {
        guard frame.offset < UInt64(buffer.capacity) else { return false }
        return buffer.write(frame.data.span, at: Int(frame.offset))
    }

    /// The ClientHello in the contiguous CRYPTO prefix (a bare handshake message).
    public func clientHello() -> ClientHelloOutcome {
        buffer.withContiguousPrefix { ClientHelloParser.parse(handshakeMessage: $0) }
    }

    /// Calls `body` with the contiguous CRYPTO prefix.
    public func withContiguousPrefix<Result>(_ body: (Span<UInt8>) throws -> Result) rethrows -> Result {
        try buffer.withContiguousPrefix(body)
    }
}
