// The TLS ClientHello (RFC 8446 section 4.1.2, RFC 5246 section 7.4.1.2)
// as the first bytes a client sends, inside TLS records (RFC 8446 section 5.1)
// or, for QUIC, as the bare handshake message of the CRYPTO stream (RFC 9001 section 4).
import HallpassWire

/// What a ClientHello says about where the client wants to go.
public struct ClientHelloInfo: Hashable, Sendable {
    /// The first `host_name` entry of the server_name extension (RFC 6066
    /// section 3), ASCII letters lower-cased; nil when absent. With ECH this is
    /// the outer (public) name.
    public var serverName: [UInt8]?
    /// An encrypted_client_hello extension (type 0xfe0d) is present.
    public var hasEncryptedClientHello: Bool
    /// The legacy draft ESNI extension (type 0xffce) is present.
    public var hasLegacyEncryptedSNI: Bool
    /// The ALPN protocol names (RFC 7301), in the client's order.
    public var alpnProtocols: [[UInt8]]
    /// `legacy_version` of the ClientHello (0x0303 for TLS 1.2 and 1.3).
    public var legacyVersion: UInt16
    /// The supported_versions extension (RFC 8446 section 4.2.1), in order; empty if absent.
    public var supportedVersions: [UInt16]
    /// The length of the handshake message, header included.
    public var handshakeLength: Int
}

/// The result of looking at a client byte stream for a ClientHello.
public enum ClientHelloOutcome: Hashable, Sendable {
    /// The prefix is a plausible start of a ClientHello but incomplete.
    /// `totalBytes` is the prefix length known to be needed, when known.
    case needMoreData(totalBytes: Int?)
    /// The bytes are not a TLS handshake.
    case notTLS
    /// TLS framing, but not a valid ClientHello; `reason` says why.
    case malformed(reason: String)
    /// A ClientHello that declares more than `maximumHandshakeLength` bytes,
    /// or whose records need more than `maximumRecordStreamLength` bytes of
    /// the stream: no browser sends one, and reading it would take unbounded
    /// memory, so its name is never read (filter-data judges it as a way
    /// around the filter). `declaredLength` is the message's own length.
    case tooLarge(declaredLength: Int)
    case clientHello(ClientHelloInfo)
}

/// Finds and parses the ClientHello at the start of a client's byte stream.
public enum ClientHelloParser {
    /// ClientHellos longer than this are refused (64 KiB, as the brief bounds
    /// the peek; a real one is a few hundred bytes, post-quantum ones about 2 KB).
    public static let maximumHandshakeLength = 65_536

    /// The most bytes of TLS records a ClientHello is read from, headers
    /// included: a message of `maximumHandshakeLength` bytes in records of
    /// 16 KiB takes 65,556; the rest leaves room for a hello split into
    /// smaller records (TLS allows any size down to one byte).
    public static let maximumRecordStreamLength = 81_920

    /// Largest TLS record fragment allowed (RFC 8446 section 5.1: 2^14; TLS 1.2 allows 2^14 + 2048 ciphertext).
    static let maximumRecordLength = 16_384 + 2_048

    // MARK: Record layer

    /// Parses a ClientHello carried in TLS records (the TCP stream prefix). The
    /// handshake message may span several records; they must all be handshake
    /// records (RFC 8446 section 5.1 forbids interleaving).
    public static func parse(recordStream bytes: Span<UInt8>) -> ClientHelloOutcome {
        // Record header: type(1) version(2) length(2).
        guard !bytes.isEmpty else { return .needMoreData(totalBytes: 5) }
        let contentType = bytes[0]
        guard contentType == 22 else { return .notTLS }
        if bytes.count >= 2, bytes[1] != 3 { return .notTLS }
        if bytes.count >= 3, bytes[2] > 4 { return .notTLS }
        guard bytes.count >= 5 else { return .needMoreData(totalBytes: 5) }
        let firstLength = Int(bytes.bigEndianU16(at: 3))
        guard firstLength > 0 else { return .malformed(reason: "empty TLS handshake record") }
        guard firstLength <= maximumRecordLength else {
            return .malformed(reason: "TLS record length \(firstLength) exceeds the protocol limit")
        }
        // Early checks on the handshake header, before the whole record is in.
        if bytes.count >= 6, bytes[5] != 1 {
            return .malformed(reason: "first handshake message is type \(bytes[5]), not ClientHello")
        }
        // Fast path: the whole message sits in the first record.
        if bytes.count >= 9, firstLength >= 4 {
            let messageLength = 4 + ((Int(bytes[6]) << 16) | (Int(bytes[7]) << 8) | Int(bytes[8]))
            guard messageLength <= maximumHandshakeLength else { return .tooLarge(declaredLength: messageLength) }
            if messageLength <= firstLength {
                guard bytes.count >= 5 + messageLength else { return .needMoreData(totalBytes: 5 + firstLength) }
                return parse(message: bytes.extracting(5..<(5 + messageLength)))
            }
        }
        // General path: gather the handshake fragments from consecutive records.
        // An incomplete stream answers the fewest bytes it certainly needs: the
        // end of the record it is in, plus a header and the message bytes no
        // record so far carries. So a hello split into many small records is
        // parsed again only a few times as it arrives, not once per record.
        var message: [UInt8] = []
        var offset = 0
        var neededMessageLength: Int? = nil
        while true {
            if let needed = neededMessageLength, message.count >= needed {
                message.removeSubrange(needed...)
                return parse(message: message.span)
            }
            guard bytes.count - offset >= 5 else {
                let missing = neededMessageLength.map { $0 - message.count } ?? 1
                return needMore(offset + 5 + missing, declared: neededMessageLength)
            }
            guard bytes[offset] == 22 else {
                return .malformed(reason: "record of type \(bytes[offset]) inside the ClientHello")
            }
            guard bytes[offset + 1] == 3 else { return .malformed(reason: "bad record version inside the ClientHello") }
            let length = Int(bytes.bigEndianU16(at: offset + 3))
            guard length > 0 else { return .malformed(reason: "empty TLS handshake record") }
            guard length <= maximumRecordLength else {
                return .malformed(reason: "TLS record length \(length) exceeds the protocol limit")
            }
            let fragmentStart = offset + 5
            // However much of the stream is in: past the stream bound nothing is read.
            guard fragmentStart + length <= maximumRecordStreamLength else {
                return .tooLarge(declaredLength: neededMessageLength ?? fragmentStart + length)
            }
            let available = min(length, bytes.count - offset - 5)
            if message.isEmpty { message.reserveCapacity(min(maximumHandshakeLength, 4 * length)) }
            for index in fragmentStart..<(fragmentStart + available) { message.append(bytes[index]) }
            if neededMessageLength == nil, message.count >= 4 {
                let declared = 4 + ((Int(message[1]) << 16) | (Int(message[2]) << 8) | Int(message[3]))
                guard declared <= maximumHandshakeLength else { return .tooLarge(declaredLength: declared) }
                neededMessageLength = declared
            }
            if available < length {
                guard let needed = neededMessageLength else { return needMore(fragmentStart + length, declared: nil) }
                if message.count >= needed { continue }
                // The rest of this record, and what it cannot hold comes in later records.
                let beyondRecord = needed - message.count - (length - available)
                return needMore(fragmentStart + length + (beyondRecord > 0 ? 5 + beyondRecord : 0), declared: needed)
            }
            offset += 5 + length
        }
    }

    /// `.needMoreData` for a stream that needs `total` bytes, or `.tooLarge`
    /// when that is past `maximumRecordStreamLength`.
    private static func needMore(_ total: Int, declared: Int?) -> ClientHelloOutcome {
        guard total <= maximumRecordStreamLength else { return .tooLarge(declaredLength: declared ?? total) }
        return .needMoreData(totalBytes: total)
    }

    /// Convenience for an array; see ``parse(recordStream:)-(Span<UInt8>)``.
    public static func parse(recordStream bytes: [UInt8]) -> ClientHelloOutcome {
        parse(recordStream: bytes.span)
    }

    /// Parses a bare handshake message (no record layer), as carried in the
    /// QUIC CRYPTO stream (RFC 9001 section 4.1.3). Incomplete input gives
    /// `.needMoreData`; a message that is not a ClientHello gives `.notTLS`.
    public static func parse(handshakeMessage bytes: Span<UInt8>) -> ClientHelloOutcome {
        guard !bytes.isEmpty else { return .needMoreData(totalBytes: 4) }
        let type = bytes[0]
        guard type == 1 else { return .notTLS }
        guard bytes.count >= 4 else { return .needMoreData(totalBytes: 4) }
        let messageLength = 4 + ((Int(bytes[1]) << 16) | (Int(bytes[2]) << 8) | Int(bytes[3]))
        guard messageLength <= maximumHandshakeLength else { return .tooLarge(declaredLength: messageLength) }
        guard bytes.count >= messageLength else { return .needMoreData(totalBytes: messageLength) }
        return parse(message: bytes.extracting(0..<messageLength))
    }

    /// Convenience for an array; see ``parse(handshakeMessage:)-(Span<UInt8>)``.
    public static func parse(handshakeMessage bytes: [UInt8]) -> ClientHelloOutcome {
        parse(handshakeMessage: bytes.span)
    }

    // MARK: The ClientHello message

    /// `bytes` is exactly one complete handshake message, header included.
    private static func parse(message bytes: Span<UInt8>) -> ClientHelloOutcome {
        var reader = WireReader(bytes)
        guard reader.readU8(in: bytes) == 1, let bodyLength = reader.readU24(in: bytes), bodyLength == reader.remaining else {
            return .malformed(reason: "handshake header does not match its length")
        }
        guard let legacyVersion = reader.readU16(in: bytes) else { return .malformed(reason: "ClientHello ends before legacy_version") }
        guard legacyVersion >> 8 == 3 else { return .malformed(reason: "ClientHello legacy_version is not 3.x") }
        guard reader.skip(32) else { return .malformed(reason: "ClientHello ends inside random") }
        guard let sessionIDLength = reader.readU8(in: bytes), sessionIDLength <= 32, reader.skip(Int(sessionIDLength)) else {
            return .malformed(reason: "bad legacy_session_id")
        }
        guard let suitesLength = reader.readU16(in: bytes), suitesLength >= 2, suitesLength % 2 == 0,
              reader.skip(Int(suitesLength)) else {
            return .malformed(reason: "bad cipher_suites")
        }
        guard let compressionLength = reader.readU8(in: bytes), compressionLength >= 1, reader.skip(Int(compressionLength)) else {
            return .malformed(reason: "bad legacy_compression_methods")
        }
        var info = ClientHelloInfo(serverName: nil, hasEncryptedClientHello: false, hasLegacyEncryptedSNI: false,
                                   alpnProtocols: [], legacyVersion: legacyVersion, supportedVersions: [],
                                   handshakeLength: bytes.count)
        // Extensions may be absent altogether in pre-TLS-1.3 ClientHellos.
        if reader.isAtEnd { return .clientHello(info) }
        guard let extensionsLength = reader.readU16(in: bytes), Int(extensionsLength) == reader.remaining else {
            return .malformed(reason: "extensions length does not match the message")
        }
        var sawServerName = false
        var sawALPN = false
        var sawSupportedVersions = false
        while !reader.isAtEnd {
            guard let type = reader.readU16(in: bytes), let length = reader.readU16(in: bytes),
                  var body = reader.readSubReader(Int(length)) else {
                return .malformed(reason: "extension runs past the end of the ClientHello")
            }
            switch type {
            case 0:  // server_name, RFC 6066 section 3
                // A second server_name is an evasion attempt (RFC 8446 section 4.2: duplicates are illegal).
                guard !sawServerName else { return .malformed(reason: "duplicate server_name extension") }
                sawServerName = true
                guard length > 0 else { continue }  // empty in a ServerHello; tolerated here
                guard let listLength = body.readU16(in: bytes), Int(listLength) == body.remaining else {
                    return .malformed(reason: "server_name list length does not match the extension")
                }
                while !body.isAtEnd {
                    guard let nameType = body.readU8(in: bytes), let nameLength = body.readU16(in: bytes),
                          let range = body.readRange(Int(nameLength)) else {
                        return .malformed(reason: "server_name entry runs past the extension")
                    }
                    if nameType == 0 && info.serverName == nil {
                        guard nameLength > 0 else { return .malformed(reason: "empty host_name in server_name") }
                        info.serverName = bytes.lowercasedASCII(range)
                    }
                }
            case 16:  // application_layer_protocol_negotiation, RFC 7301 section 3.1
                guard !sawALPN else { return .malformed(reason: "duplicate ALPN extension") }
                sawALPN = true
                guard let listLength = body.readU16(in: bytes), Int(listLength) == body.remaining else {
                    return .malformed(reason: "ALPN list length does not match the extension")
                }
                while !body.isAtEnd {
                    guard let nameLength = body.readU8(in: bytes), nameLength > 0, let name = body.readBytes(Int(nameLength), in: bytes) else {
                        return .malformed(reason: "bad ALPN protocol name")
                    }
                    info.alpnProtocols.append(name)
                }
            case 43:  // supported_versions, RFC 8446 section 4.2.1
                guard !sawSupportedVersions else { return .malformed(reason: "duplicate supported_versions extension") }
                sawSupportedVersions = true
                guard let listLength = body.readU8(in: bytes), Int(listLength) == body.remaining, listLength % 2 == 0 else {
                    return .malformed(reason: "supported_versions length does not match the extension")
                }
                while let version = body.readU16(in: bytes) { info.supportedVersions.append(version) }
            case 0xfe0d:
                info.hasEncryptedClientHello = true
            case 0xffce:
                info.hasLegacyEncryptedSNI = true
            default:
                break
            }
        }
        return .clientHello(info)
    }
}
