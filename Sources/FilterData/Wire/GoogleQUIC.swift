// Google QUIC (gQUIC): the server name in a client's first packets, for the
// versions Chrome and Google's apps sent before IETF QUIC v1.
//
// Three wire generations (Chromium's net/third_party/quiche, quic_framer.cc
// and quic_versions.cc; "QUIC Wire Layout Specification" and "QUIC Crypto"
// design documents, both linked from chromium.org/quic):
//
// - Q024 ... Q043: the public header (flags byte: 0x01 version present,
//   0x08 eight-byte connection ID, 0x30 packet number length 1/2/4/6 bytes;
//   0x04 is the diversification nonce, sent by servers only), the connection
//   ID, the version tag, the packet number, then in the clear a 12-byte
//   message authentication hash (truncated FNV-1a-128), a private flags byte
//   up to Q033, and frames. The client's CHLO handshake message travels in
//   STREAM frames of stream 1, with little-endian fields before Q039.
// - Q046: a long header (0x80 set, packet number length in the two low
//   bits, connection ID lengths as two nibbles of one byte, 0 or n + 3), then
//   the same clear hash and frames as Q043.
// - Q050, T050, T051: the long header of the IETF drafts (one-byte
//   connection ID lengths, a token and a length as variable-length integers)
//   with Initial packets protected like RFC 9001 sections 5.2-5.4 (HKDF with
//   a per-version salt, AES-128-GCM, header protection) and gQUIC frames
//   inside: the handshake goes in CRYPTO frames (type 0x08, offset and length
//   as variable-length integers). Q050 carries a CHLO, T050 and T051 a TLS
//   1.3 ClientHello (Chromium's "QUIC with TLS" versions).
//
// A CHLO (the QUIC crypto handshake message) is: the tag "CHLO", the number
// of entries (16 bits, little-endian), two bytes of padding, then per entry a
// four-byte tag and the little-endian 32-bit offset where its value ends,
// then the values back to back. The server name is the value of tag "SNI\0".
//
// Protected Initials are opened by `QUICInitialProtection`, as IETF QUIC's
// are, with QUIC v1's labels and the gQUIC version's salt; nothing here opens
// IETF QUIC, which stays with `QUICInitialParser`.
import HallpassWire

/// A Google QUIC version tag: 'Q' or 'T' and three decimal digits, as sent on the wire ("Q046" is 0x51303436).
public struct GoogleQUICVersion: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32

    /// Nil unless `rawValue` reads 'Q' or 'T' and three ASCII digits.
    public init?(rawValue: UInt32) {
        let letter = UInt8(truncatingIfNeeded: rawValue >> 24)
        guard letter == 0x51 || letter == 0x54 else { return nil }
        for shift in [16, 8, 0] {
            let digit = UInt8(truncatingIfNeeded: rawValue >> UInt32(shift))
            guard digit >= 0x30, digit <= 0x39 else { return nil }
        }
        self.rawValue = rawValue
    }

    public static let q046 = GoogleQUICVersion(rawValue: 0x5130_3436)!
    public static let q050 = GoogleQUICVersion(rawValue: 0x5130_3530)!
    public static let t050 = GoogleQUICVersion(rawValue: 0x5430_3530)!
    public static let t051 = GoogleQUICVersion(rawValue: 0x5430_3531)!

    /// The version number (46 for Q046).
    public var number: Int {
        (0..<3).reduce(0) { $0 * 10 + Int(UInt8(truncatingIfNeeded: rawValue >> UInt32(16 - 8 * $1)) - 0x30) }
    }

    /// 'T' versions carry a TLS 1.3 ClientHello instead of a CHLO.
    public var usesTLS: Bool { rawValue >> 24 == 0x54 }

    /// How this parser reads the version's first packets, or nil when it cannot.
    var layout: GoogleQUICParser.Layout? {
        switch (usesTLS, number) {
        case (false, 24...43): return .publicHeader
        case (false, 46): return .longHeaderInClear
        case (false, 50), (true, 50), (true, 51): return .protectedInitial
        default: return nil
        }
    }

    /// True when the server name can be read from this version's first packets.
    public var isReadable: Bool { layout != nil }

    public var description: String {
        String(decoding: [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: rawValue >> UInt32($0)) }, as: UTF8.self)
    }
}

/// What a Google QUIC client said about where it goes.
public struct GoogleQUICHello: Hashable, Sendable {
    public var version: GoogleQUICVersion
    /// The SNI tag of the CHLO, or the server_name of the TLS ClientHello
    /// (T050, T051), ASCII letters lower-cased; nil when absent.
    public var serverName: [UInt8]?
    /// The ALPN protocols of a TLS ClientHello (empty for a CHLO).
    public var alpnProtocols: [[UInt8]]
    /// The TLS ClientHello offered Encrypted Client Hello (never for a CHLO).
    public var encryptedClientHello: Bool
}

/// The result of adding a client datagram to a flow's gQUIC handshake.
public enum GoogleQUICOutcome: Hashable, Sendable {
    /// Not a Google QUIC client packet (no gQUIC version tag where one belongs).
    case notGoogleQUIC
    /// A Google QUIC version whose first packets this parser cannot read (Q044, Q048, ...).
    case unreadableVersion(GoogleQUICVersion)
    /// The handshake message is not complete yet.
    case needMoreData
    case hello(GoogleQUICHello)
    /// A gQUIC packet whose handshake cannot be read; `reason` says why.
    case malformed(reason: String)
}

/// What one client datagram holds.
public enum GoogleQUICPacket: Hashable, Sendable {
    case notGoogleQUIC
    case unreadableVersion(GoogleQUICVersion)
    /// A packet without a version tag (a later packet of a gQUIC connection, or no gQUIC at all).
    case withoutVersion
    case malformed(GoogleQUICVersion, reason: String)
    /// Pieces of the handshake stream (stream 1, or CRYPTO frames), with the
    /// Destination Connection ID whose keys opened a protected Initial.
    case handshake(GoogleQUICVersion, pieces: [QUICCryptoFrame], keyConnectionID: [UInt8]?)
}

/// Reads Google QUIC client packets. Pure functions over spans.
public enum GoogleQUICParser {
    enum Layout { case publicHeader, longHeaderInClear, protectedInitial }

    /// The clear message authentication hash of unencrypted gQUIC packets (truncated FNV-1a-128).
    static let clearHashLength = 12
    /// Frames read per packet, at most (real first packets have one or two).
    static let maximumFrames = 64

    /// Initial salts (Chromium quic_versions.cc, `InitialSaltForVersion`).
    static let saltQ050: [UInt8] = [0x50, 0x45, 0x74, 0xef, 0xd0, 0x66, 0xfe, 0x2f, 0x9d, 0x94, 0x5c, 0xfc, 0xdb, 0xd3, 0xa7, 0xf0, 0xd3, 0xb5, 0x6b, 0x45]
    static let saltT050: [UInt8] = [0x7f, 0xf5, 0x79, 0xe5, 0xac, 0xd0, 0x72, 0x91, 0x55, 0x80, 0x30, 0x4c, 0x43, 0xa2, 0x36, 0x7c, 0x60, 0x48, 0x83, 0x10]
    static let saltT051: [UInt8] = [0x7a, 0x4e, 0xde, 0xf4, 0xe7, 0xcc, 0xee, 0x5f, 0xa4, 0x50, 0x6c, 0x19, 0x12, 0x4f, 0xc8, 0xcc, 0xda, 0x6e, 0x03, 0x3d]

    static func salt(for version: GoogleQUICVersion) -> [UInt8]? {
        switch version.rawValue {
        case GoogleQUICVersion.q050.rawValue: saltQ050
        case GoogleQUICVersion.t050.rawValue: saltT050
        case GoogleQUICVersion.t051.rawValue: saltT051
        default: nil
        }
    }

    /// The gQUIC version tag a client datagram carries, if any: after the
    /// flags and an 8-byte connection ID of a public header (Q043 and
    /// earlier), or after the first byte of a long header (Q046 and later).
    public static func version(ofClientDatagram bytes: Span<UInt8>) -> GoogleQUICVersion? {
        guard bytes.count >= 5 else { return nil }
        let flags = bytes[0]
        if flags & 0x80 != 0 {
            return GoogleQUICVersion(rawValue: bytes.bigEndianU32(at: 1))
        }
        // Public header: the version flag, an 8-byte connection ID (0x08; 0x0C in old clients), no reset flag.
        guard flags & 0x01 != 0, flags & 0x02 == 0, flags & 0x08 != 0, bytes.count >= 13 else { return nil }
        return GoogleQUICVersion(rawValue: bytes.bigEndianU32(at: 9))
    }

    /// Convenience for an array.
    public static func version(ofClientDatagram bytes: [UInt8]) -> GoogleQUICVersion? {
        version(ofClientDatagram: bytes.span)
    }

    /// Reads the handshake pieces of one client datagram. `keyConnectionIDs`
    /// are the DCIDs whose keys opened earlier protected Initials of the flow
    /// (tried when the packet's own DCID does not open it).
    public static func parse(datagram bytes: Span<UInt8>, keyConnectionIDs: [[UInt8]] = []) -> GoogleQUICPacket {
        guard bytes.count >= 5 else { return .notGoogleQUIC }
        let longHeader = bytes[0] & 0x80 != 0
        guard let version = Self.version(ofClientDatagram: bytes) else {
            // A public header without a version: a later packet of a connection (or not gQUIC).
            if !longHeader, bytes[0] & 0x01 == 0, bytes[0] & 0x08 != 0, bytes[0] & 0x02 == 0 { return .withoutVersion }
            return .notGoogleQUIC
        }
        guard let layout = version.layout else { return .unreadableVersion(version) }
        switch (layout, longHeader) {
        case (.publicHeader, false): return parsePublicHeader(bytes, version: version)
        case (.longHeaderInClear, true): return parseClearLongHeader(bytes, version: version)
        case (.protectedInitial, true): return parseProtectedInitial(bytes, version: version, keyConnectionIDs: keyConnectionIDs)
        default: return .malformed(version, reason: "\(version) in a header of the wrong generation")
        }
    }

    /// Convenience for an array.
    public static func parse(datagram bytes: [UInt8], keyConnectionIDs: [[UInt8]] = []) -> GoogleQUICPacket {
        parse(datagram: bytes.span, keyConnectionIDs: keyConnectionIDs)
    }

    // MARK: Q024-Q043: the public header

    private static func parsePublicHeader(_ bytes: Span<UInt8>, version: GoogleQUICVersion) -> GoogleQUICPacket {
        let flags = bytes[0]
        let packetNumberLength = [1, 2, 4, 6][Int((flags >> 4) & 0x03)]
        // flags(1) connection ID(8) version(4) packet number, then the clear hash.
        var cursor = WireReader(bytes, from: 13)
        guard cursor.skip(packetNumberLength), cursor.skip(clearHashLength) else {
            return .malformed(version, reason: "public header ends before the frames")
        }
        // Up to Q033 a private flags byte (entropy, FEC group) precedes the frames.
        if version.number <= 33 {
            guard let privateFlags = cursor.readU8(in: bytes), privateFlags & 0xF8 == 0 else {
                return .malformed(version, reason: "bad private flags")
            }
        }
        return frames(bytes, from: cursor, version: version, keyConnectionID: nil)
    }

    // MARK: Q046: the gQUIC long header, payload in the clear

    private static func parseClearLongHeader(_ bytes: Span<UInt8>, version: GoogleQUICVersion) -> GoogleQUICPacket {
        let first = bytes[0]
        guard (first >> 4) & 0x03 == 0 else { return .malformed(version, reason: "not an Initial packet") }
        var cursor = WireReader(bytes, from: 5)
        guard let lengths = cursor.readU8(in: bytes) else { return .malformed(version, reason: "header ends before the connection ID lengths") }
        let destinationLength = lengths >> 4 == 0 ? 0 : Int(lengths >> 4) + 3
        let sourceLength = lengths & 0x0F == 0 ? 0 : Int(lengths & 0x0F) + 3
        let packetNumberLength = Int(first & 0x03) + 1
        guard cursor.skip(destinationLength + sourceLength), cursor.skip(packetNumberLength), cursor.skip(clearHashLength) else {
            return .malformed(version, reason: "long header ends before the frames")
        }
        return frames(bytes, from: cursor, version: version, keyConnectionID: nil)
    }

    // MARK: Q050, T050, T051: protected Initial packets

    private static func parseProtectedInitial(_ bytes: Span<UInt8>, version: GoogleQUICVersion, keyConnectionIDs: [[UInt8]]) -> GoogleQUICPacket {
        guard let salt = salt(for: version) else { return .unreadableVersion(version) }
        let first = bytes[0]
        guard (first >> 4) & 0x03 == 0 else { return .malformed(version, reason: "not an Initial packet") }
        var cursor = WireReader(bytes, from: 5)
        guard let destinationLength = cursor.readU8(in: bytes), destinationLength <= 20,
              let destination = cursor.readBytes(Int(destinationLength), in: bytes),
              let sourceLength = cursor.readU8(in: bytes), sourceLength <= 20, cursor.skip(Int(sourceLength)) else {
            return .malformed(version, reason: "bad connection IDs")
        }
        guard let tokenLength = cursor.readQUICVarInt(in: bytes), tokenLength <= UInt64(cursor.remaining),
              cursor.skip(Int(tokenLength)) else {
            return .malformed(version, reason: "bad token length")
        }
        guard let length = cursor.readQUICVarInt(in: bytes), length <= UInt64(cursor.remaining) else {
            return .malformed(version, reason: "packet length runs past the datagram")
        }
        let packetNumberOffset = cursor.offset
        let end = packetNumberOffset + Int(length)
        // The header protection sample starts 4 bytes after the packet number offset (RFC 9001 section 5.4.2).
        guard end - packetNumberOffset >= 4 + QUICInitialProtection.sampleLength else {
            return .malformed(version, reason: "Initial too short for the header protection sample")
        }
        guard let opened = QUICInitialProtection.open(
            bytes, packetStart: 0, packetNumberOffset: packetNumberOffset, end: end, destinationConnectionID: destination,
            keyConnectionIDs: keyConnectionIDs, parameters: .version1Labels(salt: salt))
        else {
            return .malformed(version, reason: "Initial failed authentication (not a client Initial, or corrupted)")
        }
        return frames(opened.plaintext.span, from: WireReader(opened.plaintext.span), version: version, keyConnectionID: opened.keyConnectionID)
    }

    // MARK: Frames

    /// Collects the handshake pieces among the frames from `start`: STREAM
    /// frames of stream 1 (gQUIC's crypto stream) and CRYPTO frames. Walks
    /// PADDING and PING; stops at any other frame (ACK, STOP_WAITING, ...),
    /// which a client's first packets put after the handshake if at all.
    static func frames(_ bytes: Span<UInt8>, from start: WireReader, version: GoogleQUICVersion,
                       keyConnectionID: [UInt8]?) -> GoogleQUICPacket {
        var cursor = start
        var pieces: [QUICCryptoFrame] = []
        let littleEndian = version.number < 39 && !version.usesTLS
        var count = 0
        while let type = cursor.readU8(in: bytes), count < maximumFrames {
            count += 1
            switch type {
            case 0x00:
                // PADDING. Up to Q046 it fills the rest of the packet; later it is one byte per
                // frame, and a run of them (which may come first) counts as one.
                if version.layout != .protectedInitial { return .handshake(version, pieces: pieces, keyConnectionID: keyConnectionID) }
                while cursor.peekU8(in: bytes) == 0 { _ = cursor.skip(1) }
            case 0x07:
                continue  // PING
            case 0x08 where version.layout == .protectedInitial:
                // CRYPTO (v48 and later): offset, length, data.
                guard let offset = cursor.readQUICVarInt(in: bytes), let length = cursor.readQUICVarInt(in: bytes),
                      length <= UInt64(cursor.remaining), let data = cursor.readBytes(Int(length), in: bytes) else {
                    return .malformed(version, reason: "CRYPTO frame runs past the packet")
                }
                pieces.append(QUICCryptoFrame(offset: offset, data: data))
            case 0x80...0xFF:
                // STREAM: 1 F D OOO SS (fin, data length present, offset length, stream ID length).
                let offsetCode = Int((type >> 2) & 0x07)
                let offsetLength = offsetCode == 0 ? 0 : offsetCode + 1
                let streamLength = Int(type & 0x03) + 1
                guard let stream = cursor.readUInt(streamLength, littleEndian: littleEndian, in: bytes),
                      let offset = offsetLength == 0 ? 0 : cursor.readUInt(offsetLength, littleEndian: littleEndian, in: bytes) else {
                    return .malformed(version, reason: "STREAM frame header runs past the packet")
                }
                let dataLength: Int
                if type & 0x20 != 0 {
                    guard let declared = cursor.readUInt(2, littleEndian: littleEndian, in: bytes) else {
                        return .malformed(version, reason: "STREAM frame header runs past the packet")
                    }
                    dataLength = Int(declared)
                } else {
                    dataLength = cursor.remaining
                }
                guard let data = cursor.readBytes(dataLength, in: bytes) else {
                    return .malformed(version, reason: "STREAM frame data runs past the packet")
                }
                if stream == 1 { pieces.append(QUICCryptoFrame(offset: offset, data: data)) }
            default:
                return .handshake(version, pieces: pieces, keyConnectionID: keyConnectionID)
            }
        }
        return .handshake(version, pieces: pieces, keyConnectionID: keyConnectionID)
    }

    // MARK: CHLO

    /// Entries of a CHLO read, at most.
    static let maximumTags = 128
    /// The message tag and the tag of the server name's entry.
    static let chloTag = Array("CHLO".utf8)
    static let serverNameTag = Array("SNI\u{0}".utf8)

    enum CHLOOutcome: Hashable {
        case needMoreData(totalBytes: Int)
        case notCHLO
        case malformed(String)
        /// The SNI value (lower-cased), if the CHLO has one.
        case hello(serverName: [UInt8]?)
    }

    /// Reads a CHLO message at the start of `bytes` (the handshake stream).
    static func parseCHLO(_ bytes: Span<UInt8>) -> CHLOOutcome {
        guard bytes.count >= 8 else {
            // Four bytes decide whether this can be a CHLO at all.
            if bytes.count >= 4, !bytes.matches(chloTag) { return .notCHLO }
            return .needMoreData(totalBytes: 8)
        }
        guard bytes.matches(chloTag) else { return .notCHLO }
        let tagCount = Int(bytes[4]) | Int(bytes[5]) << 8
        guard tagCount <= maximumTags else { return .malformed("CHLO with \(tagCount) tags") }
        let valuesStart = 8 + 8 * tagCount
        guard bytes.count >= valuesStart else { return .needMoreData(totalBytes: valuesStart) }
        var previousEnd = 0
        var serverName: Range<Int>? = nil
        for index in 0..<tagCount {
            let entry = 8 + 8 * index
            let end = Int(bytes.littleEndianU32(at: entry + 4))
            guard end >= previousEnd, end <= ClientHelloParser.maximumHandshakeLength else {
                return .malformed("CHLO tag offsets out of order")
            }
            if bytes.matches(serverNameTag, at: entry) {
                serverName = (valuesStart + previousEnd)..<(valuesStart + end)
            }
            previousEnd = end
        }
        guard bytes.count >= valuesStart + previousEnd else { return .needMoreData(totalBytes: valuesStart + previousEnd) }
        guard let serverName else { return .hello(serverName: nil) }
        guard !serverName.isEmpty else { return .malformed("empty SNI tag") }
        var name = bytes.copied(serverName)
        for index in name.indices where name[index] >= 0x41 && name[index] <= 0x5A { name[index] |= 0x20 }
        return .hello(serverName: name)
    }
}

/// A flow's Google QUIC handshake, assembled from its client datagrams (first
/// copy of each byte wins, bounded), and read once complete.
public struct GoogleQUICHandshake: Sendable {
    public static let defaultCapacity = 16_384

    /// The version of the flow's first gQUIC packet.
    public private(set) var version: GoogleQUICVersion?
    /// Datagrams added.
    public private(set) var datagrams = 0
    /// The handshake stream's first `capacity` bytes (first copy of each byte wins).
    private var stream: ReassemblyBuffer
    private var keyConnectionIDs: [[UInt8]] = []

    public init(capacity: Int = GoogleQUICHandshake.defaultCapacity) {
        stream = ReassemblyBuffer(capacity: capacity)
    }

    /// Adds one client datagram of the flow and says what is known now.
    public mutating func add(datagram bytes: Span<UInt8>) -> GoogleQUICOutcome {
        datagrams += 1
        switch GoogleQUICParser.parse(datagram: bytes, keyConnectionIDs: keyConnectionIDs) {
        case .notGoogleQUIC:
            return version == nil ? .notGoogleQUIC : .needMoreData
        case .withoutVersion:
            return version == nil ? .notGoogleQUIC : .needMoreData
        case .unreadableVersion(let found):
            return .unreadableVersion(found)
        case .malformed(let found, let reason):
            if version == nil { version = found }
            return .malformed(reason: reason)
        case .handshake(let found, let pieces, let keyID):
            if let version, version != found {
                // Another version after version negotiation: start again.
                stream.reset()
            }
            version = found
            if let keyID, !keyConnectionIDs.contains(keyID) {
                if keyConnectionIDs.count == 4 { keyConnectionIDs.removeFirst() }
                keyConnectionIDs.append(keyID)
            }
            for piece in pieces where piece.offset < UInt64(stream.capacity) {
                stream.write(piece.data.span, at: Int(piece.offset))
            }
            return examine(found)
        }
    }

    /// Convenience for an array.
    public mutating func add(datagram bytes: [UInt8]) -> GoogleQUICOutcome {
        add(datagram: bytes.span)
    }

    private func examine(_ version: GoogleQUICVersion) -> GoogleQUICOutcome {
        guard stream.contiguousCount > 0 else { return .needMoreData }
        if version.usesTLS {
            switch stream.withContiguousPrefix({ ClientHelloParser.parse(handshakeMessage: $0) }) {
            case .clientHello(let info):
                return .hello(GoogleQUICHello(version: version, serverName: info.serverName, alpnProtocols: info.alpnProtocols,
                                              encryptedClientHello: info.hasEncryptedClientHello))
            case .needMoreData(let total):
                if let total, total > stream.capacity { return .malformed(reason: "ClientHello larger than the \(stream.capacity)-byte bound") }
                return .needMoreData
            case .notTLS:
                return .malformed(reason: "handshake stream holds no ClientHello")
            case .malformed(let reason):
                return .malformed(reason: reason)
            case .tooLarge(let declared):
                return .malformed(reason: "ClientHello of \(declared) bytes is past the \(ClientHelloParser.maximumHandshakeLength)-byte bound")
            }
        }
        switch stream.withContiguousPrefix({ GoogleQUICParser.parseCHLO($0) }) {
        case .hello(let name):
            return .hello(GoogleQUICHello(version: version, serverName: name, alpnProtocols: [], encryptedClientHello: false))
        case .needMoreData(let total):
            return total > stream.capacity ? .malformed(reason: "CHLO larger than the \(stream.capacity)-byte bound") : .needMoreData
        case .notCHLO:
            return .malformed(reason: "handshake stream holds no CHLO")
        case .malformed(let reason):
            return .malformed(reason: reason)
        }
    }
}

/// Whether hallpass can read the server name of a QUIC version (issue 14's `unreadableQUIC`).
public enum QUICVersionReadability: Hashable, Sendable {
    /// IETF QUIC that `QUICInitialParser` opens (v1, v2, the late drafts, mvfst).
    case ietf
    /// Google QUIC that `GoogleQUICParser` reads (Q024-Q043, Q046, Q050, T050, T051).
    case googleQUIC
    /// 0x?a?a?a?a (RFC 9000 section 15): a client forcing version negotiation, which then
    /// sends a version it speaks on the same flow; wait for that one.
    case forcingNegotiation
    /// Version negotiation (version 0), sent by servers.
    case negotiation
    /// Anything else: a version hallpass cannot read (gQUIC Q044/Q048, T048, private versions).
    case unreadable

    public init(version: UInt32) {
        if version == 0 {
            self = .negotiation
        } else if version & 0x0F0F_0F0F == 0x0A0A_0A0A {
            self = .forcingNegotiation
        } else if QUICVersion(rawValue: version).isSupported {
            self = .ietf
        } else if let google = GoogleQUICVersion(rawValue: version), google.isReadable {
            self = .googleQUIC
        } else {
            self = .unreadable
        }
    }
}
