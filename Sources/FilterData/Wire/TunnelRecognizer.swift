// Ways around a name filter, recognized from what a client sends first:
// VPN tunnels (WireGuard, OpenVPN, IKE/IPsec), proxies (SOCKS, HTTP
// CONNECT), SSH and encrypted DNS (DNS over TLS, DNS over QUIC). Pure functions
// over the bytes the filter sees before its verdict: the first client
// datagrams of a UDP flow, the reassembled prefix of a TCP client stream, and
// the ports. Nothing here needs the server's answers, which filter-data does
// not see.
//
// What cannot be recognized from those bytes, and why:
// - Tor: its TLS looks like any TLS; relays are known by address (the
//   school's `tor` list, from the Tor Project's relay list).
// - Shadowsocks, obfs4 and other obfuscated tunnels: random bytes by design.
// - OpenVPN scrambled with an XOR key (NordVPN's obfuscated servers): the
//   opcode and session ID are masked; it shows only its lengths.
// - Cloudflare WARP: a WireGuard variant with changed message types (0xC1 to
//   0xC4) and handshake sizes, told apart by Cloudflare's published endpoint
//   addresses and ports (2408, 500, 1701, 4500), not by its bytes.
// - Psiphon, Ultrasurf, SoftEther over HTTPS: TLS with a name, judged by it.

// The kinds of bypass a flow can be recognized as: VerdictCore's BypassKind.

import HallpassWire
public import VerdictCore

/// Where a proxy request asks to go (SOCKS, HTTP CONNECT).
public struct ProxyTarget: Sendable, Hashable, CustomStringConvertible {
    /// A host name (as sent) or an address in text form.
    public var host: String
    public var port: UInt16

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A flow recognized as a bypass, with what gave it away.
public struct BypassRecognition: Sendable, Hashable {
    public var kind: BypassKind
    /// The variant seen (`socks5`, `tls-auth HMAC-SHA1`, `handshake initiation`, ...).
    public var detail: String
    /// The target of a proxy request, when the bytes name it.
    public var target: ProxyTarget?

    public init(_ kind: BypassKind, _ detail: String, target: ProxyTarget? = nil) {
        self.kind = kind
        self.detail = detail
        self.target = target
    }
}

/// What the bytes seen so far say.
public enum BypassOutcome: Sendable, Hashable {
    case recognized(BypassRecognition)
    /// A recognizer needs more bytes (a TCP prefix too short to tell).
    case needMoreData
    /// None of the recognizers matches.
    case notRecognized
}

public enum TunnelRecognizer {
    /// Ports with a fixed meaning here.
    public enum Ports {
        /// DNS over TLS (RFC 7858 section 3.1) and DNS over QUIC (RFC 9250 section 4.1.1).
        public static let encryptedDNS: UInt16 = 853
        /// IKE (RFC 7296 section 2) and IKE with NAT traversal (RFC 3948 section 2).
        public static let ike: UInt16 = 500
        public static let ikeNATTraversal: UInt16 = 4500
    }

    /// TCP stream prefixes longer than this are not examined further (a SOCKS
    /// request or a CONNECT line longer than this is not a real one).
    public static let maximumStreamPrefix = 4_096

    // MARK: TCP

    /// Examines the contiguous prefix of a TCP client stream. Call again when
    /// it grows; the answer depends only on the prefix and the ports.
    public static func examine(stream bytes: Span<UInt8>, serverPort: UInt16) -> BypassOutcome {
        // SSH first, on every port: on 853 it is SSH, not DNS over TLS (whose
        // first byte is a TLS record's, 0x16), so `ssh`, not `encryptedDNS`, judges it.
        let ssh = ssh(bytes)
        if case .recognized = ssh { return ssh }
        if serverPort == Ports.encryptedDNS {
            // Known by the port before any byte; the first bytes only wait when they may still be SSH's.
            if ssh == .needMoreData, !bytes.isEmpty { return .needMoreData }
            return .recognized(BypassRecognition(.dot, "TCP port 853"))
        }
        guard !bytes.isEmpty else { return .needMoreData }
        var waiting = ssh == .needMoreData
        for outcome in [openVPNOverTCP(bytes), socks5(bytes), socks4(bytes), httpConnect(bytes)] {
            switch outcome {
            case .recognized: return outcome
            case .needMoreData: waiting = true
            case .notRecognized: continue
            }
        }
        return waiting && bytes.count < maximumStreamPrefix ? .needMoreData : .notRecognized
    }

    /// Convenience for an array.
    public static func examine(stream bytes: [UInt8], serverPort: UInt16) -> BypassOutcome {
        examine(stream: bytes.span, serverPort: serverPort)
    }

    // MARK: UDP, one datagram

    /// Examines one client datagram on its own. `DatagramTunnelRecognizer`
    /// adds what several datagrams of a flow show together.
    public static func examine(datagram bytes: Span<UInt8>, serverPort: UInt16) -> BypassOutcome {
        if serverPort == Ports.encryptedDNS {
            return .recognized(BypassRecognition(.doq, "UDP port 853"))
        }
        if let wireGuard = wireGuard(bytes) { return .recognized(wireGuard) }
        if serverPort == Ports.ike || serverPort == Ports.ikeNATTraversal, let ike = ike(bytes, natTraversal: serverPort == Ports.ikeNATTraversal) {
            return .recognized(ike)
        }
        if let openVPN = openVPNPacket(bytes, from: 0, count: bytes.count)?.recognition { return .recognized(openVPN) }
        return .notRecognized
    }

    /// Convenience for an array.
    public static func examine(datagram bytes: [UInt8], serverPort: UInt16) -> BypassOutcome {
        examine(datagram: bytes.span, serverPort: serverPort)
    }

    // MARK: Encrypted DNS by ALPN

    /// DNS over QUIC by its ALPN protocol ID "doq" (RFC 9250 section 4.1.1)
    /// or a draft's "doq-iNN"; DNS over TLS by "dot" (the IANA TLS ALPN
    /// registry). `quic` says which transport the ClientHello came on.
    public static func encryptedDNS(alpnProtocols: [[UInt8]], quic: Bool) -> BypassRecognition? {
        // Compared as bytes: this runs on every ClientHello, and h2 or h3 should cost no String.
        for name in alpnProtocols {
            if quic, name.elementsEqual("doq".utf8) || name.starts(with: "doq-i".utf8) {
                return BypassRecognition(.doq, "ALPN " + String(decoding: name, as: UTF8.self))
            }
            if !quic, name.elementsEqual("dot".utf8) { return BypassRecognition(.dot, "ALPN dot") }
        }
        return nil
    }

    // MARK: SSH

    /// SSH's identification string (RFC 4253 section 4.2), which a client sends
    /// first on any port: "SSH-" protoversion "-" softwareversion, ending in CR LF.
    /// Recognized on "SSH-" alone: no other client protocol starts so, and
    /// OpenSSH's server reads the version with `sscanf("SSH-%d.%d-")`, which
    /// also takes "SSH- 2.0-" or "SSH-+2.0-"; a stricter check would let those
    /// through. The detail keeps the version's digits and dots (at most 8), not
    /// the software version or comments, which are the user's to write.
    /// A client that waits for the server's line sends its own next: still first.
    static func ssh(_ bytes: Span<UInt8>) -> BypassOutcome {
        let prefix = "SSH-".utf8
        for (offset, expected) in prefix.enumerated() {
            guard offset < bytes.count else { return .needMoreData }
            guard bytes[offset] == expected else { return .notRecognized }
        }
        var version = ""
        var index = prefix.count
        while index < bytes.count, version.utf8.count < 8 {
            let byte = bytes[index]
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: ".") else { break }
            version.unicodeScalars.append(Unicode.Scalar(byte))
            index += 1
        }
        return .recognized(BypassRecognition(.ssh, "identification SSH-" + version))
    }

    // MARK: WireGuard

    /// WireGuard messages ("WireGuard: Next Generation Kernel Network Tunnel",
    /// section 5.4): a type byte, three reserved zero bytes, then fixed sizes:
    /// handshake initiation (1) 148 bytes, response (2) 92, cookie reply (3)
    /// 64; transport data (4) a 16-byte header and the ciphertext, whose
    /// plaintext is padded to 16 bytes and carries a 16-byte tag, so at least
    /// 32 bytes and 16 more than a multiple of 16. Tailscale's discovery
    /// messages ("TS" and U+1F4AC, then a 32-byte key and a 24-byte nonce) go
    /// on the same socket as its WireGuard.
    static let tailscaleDiscoveryMagic = Array("TS\u{1F4AC}".utf8)

    static func wireGuard(_ bytes: Span<UInt8>) -> BypassRecognition? {
        let count = bytes.count
        if count >= 62, bytes.matches(tailscaleDiscoveryMagic) {
            return BypassRecognition(.wireguard, "Tailscale discovery message")
        }
        guard count >= 32, bytes[1] == 0, bytes[2] == 0, bytes[3] == 0 else { return nil }
        switch bytes[0] {
        case 1 where count == 148: return BypassRecognition(.wireguard, "handshake initiation")
        case 2 where count == 92: return BypassRecognition(.wireguard, "handshake response")
        case 3 where count == 64: return BypassRecognition(.wireguard, "cookie reply")
        case 4 where (count - 16) % 16 == 0:
            // The receiver index is the peer's choice: zero would be a coincidence of a random sender.
            guard !bytes.allZero(in: 4..<8) else { return nil }
            return BypassRecognition(.wireguard, count == 32 ? "keepalive" : "transport data")
        default: return nil
        }
    }

    // MARK: IKE

    /// The IKE header (RFC 7296 section 3.1; RFC 2408 section 3.1 for IKEv1):
    /// initiator SPI (8, never zero), responder SPI (8, zero in IKE_SA_INIT),
    /// next payload, version (0x20 IKEv2, 0x10 IKEv1), exchange type, flags,
    /// message ID, and the length of the whole message, which must be the
    /// datagram's. On port 4500 IKE follows a four-byte zero non-ESP marker
    /// (RFC 3948 section 2.2); anything else there is ESP.
    static func ike(_ bytes: Span<UInt8>, natTraversal: Bool) -> BypassRecognition? {
        var start = 0
        if natTraversal {
            guard bytes.count >= 4 + 28, bytes.allZero(in: 0..<4) else { return nil }
            start = 4
        }
        guard bytes.count - start >= 28, !bytes.allZero(in: start..<(start + 8)) else { return nil }
        let nextPayload = bytes[start + 16]
        let version = bytes[start + 17]
        let exchange = bytes[start + 18]
        let flags = bytes[start + 19]
        let messageID = bytes.bigEndianU32(at: start + 20)
        let length = Int(bytes.bigEndianU32(at: start + 24))
        guard length == bytes.count - start else { return nil }
        let responderSPIZero = bytes.allZero(in: (start + 8)..<(start + 16))
        switch version {
        case 0x20:
            // Exchange types 34-37 (RFC 7296 section 3.1), 43 IKE_SESSION_RESUME (RFC 5723), 44 IKE_INTERMEDIATE (RFC 9242).
            guard [34, 35, 36, 37, 43, 44].contains(exchange), flags & 0xC7 == 0,
                  nextPayload == 0 || (33...55).contains(nextPayload) else { return nil }
            // A request to open an IKE SA names no responder SPI yet and is message 0.
            if exchange == 34, flags & 0x20 == 0, !(responderSPIZero && messageID == 0) { return nil }
            return BypassRecognition(.ike, exchange == 34 ? "IKEv2 IKE_SA_INIT" : "IKEv2 exchange \(exchange)")
        case 0x10:
            // Exchange types 1-5 (RFC 2408 section 3.1), 32 Quick Mode, 33 New Group Mode (RFC 2409).
            guard [1, 2, 3, 4, 5, 32, 33].contains(exchange), flags & 0xF8 == 0,
                  (1...13).contains(nextPayload) || nextPayload >= 128 else { return nil }
            return BypassRecognition(.ike, "IKEv1 exchange \(exchange)")
        default:
            return nil
        }
    }

    // MARK: OpenVPN

    /// An OpenVPN control packet (OpenVPN's "Protocol overview" and
    /// doc/tls-crypt-v2.txt in its sources): opcode in the high five bits,
    /// key ID in the low three, an 8-byte session ID, then by configuration:
    ///
    /// - plain: ack count, acked IDs, message packet ID (4 bytes), payload;
    /// - tls-auth: an HMAC (16 to 64 bytes), a replay packet ID (4) and a
    ///   timestamp (4) before the ack count;
    /// - tls-crypt: the packet ID and timestamp, a 32-byte tag, and the rest
    ///   encrypted;
    /// - tls-crypt-v2 (opcode 10): as tls-crypt, followed by the wrapped client
    ///   key whose last two bytes give its own length.
    ///
    /// A client's first packet is P_CONTROL_HARD_RESET_CLIENT_V2 (7) or V3
    /// (10) with key ID 0, the first of its packet IDs (replay ID 1, message
    /// ID 0) and no acks; OpenVPN 2.6 may add TLVs (type, length, value) as
    /// its payload. Those fixed values are what is checked here.
    struct OpenVPNPacket {
        var opcode: UInt8
        var sessionID: [UInt8]
        var recognition: BypassRecognition
    }

    /// HMAC lengths of tls-auth: MD5, SHA-1, SHA-224, SHA-256, SHA-384, SHA-512.
    static let hmacLengths = [16, 20, 28, 32, 48, 64]

    static func openVPNPacket(_ bytes: Span<UInt8>, from start: Int, count: Int) -> OpenVPNPacket? {
        guard count >= 14, start >= 0, start + count <= bytes.count else { return nil }
        let opcode = bytes[start] >> 3
        let keyID = bytes[start] & 0x07
        guard keyID == 0, opcode == 7 || opcode == 10 else { return nil }
        let session = bytes.copied((start + 1)..<(start + 9))
        let end = start + count

        func packetID(at offset: Int) -> UInt32? { offset + 4 <= end ? bytes.bigEndianU32(at: offset) : nil }
        /// Ack count 0 and message ID 0 at `offset`, then nothing or well-formed TLVs.
        func firstMessage(at offset: Int) -> Bool {
            guard offset + 5 <= end, bytes[offset] == 0, packetID(at: offset + 1) == 0 else { return false }
            return tlvs(bytes, from: offset + 5, to: end)
        }

        if opcode == 10 {
            // tls-crypt-v2: packet ID, timestamp, tag, encrypted part (at least ack count and message ID), WKc.
            // The first packet ID is 1 in its low bits; OpenVPN 2.6 sets the high byte (EARLY_NEG_START,
            // 0x0f000000) to announce early negotiation, and development versions set other high bits.
            guard count >= 9 + 8 + 32 + 5 + 2, let firstID = packetID(at: start + 9), firstID & 0xFFFF == 1 else { return nil }
            let wrappedKeyLength = Int(bytes.bigEndianU16(at: end - 2))
            // The wrapped key: a 32-byte tag, the 256-byte client key (and metadata), its 2-byte length.
            guard wrappedKeyLength >= 32 + 256 + 2, wrappedKeyLength <= count - (9 + 8 + 32 + 5) else { return nil }
            return OpenVPNPacket(opcode: opcode, sessionID: session, recognition: BypassRecognition(.openvpn, "tls-crypt-v2 hard reset"))
        }
        if firstMessage(at: start + 9) {
            return OpenVPNPacket(opcode: opcode, sessionID: session, recognition: BypassRecognition(.openvpn, "hard reset, no HMAC"))
        }
        for length in hmacLengths where packetID(at: start + 9 + length) == 1 && firstMessage(at: start + 9 + length + 8) {
            let name = [16: "MD5", 20: "SHA-1", 28: "SHA-224", 32: "SHA-256", 48: "SHA-384", 64: "SHA-512"][length] ?? "\(length)-byte"
            return OpenVPNPacket(opcode: opcode, sessionID: session, recognition: BypassRecognition(.openvpn, "tls-auth hard reset (HMAC-\(name))"))
        }
        // tls-crypt: packet ID 1 and timestamp in the clear, a 32-byte tag, ack count and message ID (and TLVs) encrypted.
        if packetID(at: start + 9) == 1, count == 9 + 8 + 32 + 5 || count == 9 + 8 + 32 + 5 + 6 {
            return OpenVPNPacket(opcode: opcode, sessionID: session, recognition: BypassRecognition(.openvpn, "tls-crypt hard reset"))
        }
        return nil
    }

    /// A run of OpenVPN 2.6 TLVs (2-byte type, 2-byte length, value) filling `start..<end` exactly.
    static func tlvs(_ bytes: Span<UInt8>, from start: Int, to end: Int) -> Bool {
        var offset = start
        var items = 0
        while offset < end {
            items += 1
            guard items <= 16, end - offset >= 4 else { return false }
            let length = Int(bytes.bigEndianU16(at: offset + 2))
            guard end - offset - 4 >= length else { return false }
            offset += 4 + length
        }
        return true
    }

    /// OpenVPN over TCP: each packet is preceded by its 2-byte length.
    static func openVPNOverTCP(_ bytes: Span<UInt8>) -> BypassOutcome {
        guard bytes.count >= 3 else {
            // A length prefix above 1600 bytes or a first byte past it that is no hard reset rules it out early.
            if bytes.count >= 1, bytes[0] > 0x06 { return .notRecognized }
            return .needMoreData
        }
        let length = Int(bytes.bigEndianU16(at: 0))
        guard length >= 14, length <= 1_600, bytes[2] == 0x38 || bytes[2] == 0x50 else { return .notRecognized }
        guard bytes.count >= 2 + length else { return .needMoreData }
        guard var packet = openVPNPacket(bytes, from: 2, count: length) else { return .notRecognized }
        packet.recognition.detail += " over TCP"
        return .recognized(packet.recognition)
    }

    // MARK: SOCKS

    /// SOCKS5 (RFC 1928 section 3): version 5, the number of methods (at
    /// least one), the methods (0xFF, "no acceptable method", is never
    /// offered). Once the server has chosen, the client sends the request
    /// (section 4: 5, command, 0, address type, address, port), after a
    /// username/password exchange (RFC 1929 section 2) when chosen.
    static func socks5(_ bytes: Span<UInt8>) -> BypassOutcome {
        guard bytes[0] == 5 else { return .notRecognized }
        guard bytes.count >= 2 else { return .needMoreData }
        let methods = Int(bytes[1])
        guard methods >= 1 else { return .notRecognized }
        guard bytes.count >= 2 + methods else { return .needMoreData }
        if bytes.contains(0xFF, in: 2..<(2 + methods)) { return .notRecognized }
        var offset = 2 + methods
        if offset == bytes.count { return .recognized(BypassRecognition(.socks, "SOCKS5 greeting")) }
        // Username/password sub-negotiation: version 1, ULEN, UNAME, PLEN, PASSWD.
        if bytes[offset] == 1 {
            guard offset + 2 <= bytes.count else { return .recognized(BypassRecognition(.socks, "SOCKS5 greeting")) }
            let userLength = Int(bytes[offset + 1])
            guard offset + 2 + userLength + 1 <= bytes.count else { return .recognized(BypassRecognition(.socks, "SOCKS5 greeting")) }
            let passwordLength = Int(bytes[offset + 2 + userLength])
            offset += 3 + userLength + passwordLength
            guard offset < bytes.count else { return .recognized(BypassRecognition(.socks, "SOCKS5 greeting")) }
        }
        // The request.
        guard bytes[offset] == 5 else { return .notRecognized }
        guard let target = socks5Target(bytes, at: offset) else { return .recognized(BypassRecognition(.socks, "SOCKS5 greeting")) }
        return .recognized(BypassRecognition(.socks, "SOCKS5 request", target: target))
    }

    /// The destination of a SOCKS5 request at `offset`, nil while incomplete or unreadable.
    static func socks5Target(_ bytes: Span<UInt8>, at offset: Int) -> ProxyTarget? {
        var cursor = WireReader(bytes, from: offset)
        guard cursor.readU8(in: bytes) == 5, let command = cursor.readU8(in: bytes), (1...3).contains(command),
              cursor.readU8(in: bytes) == 0, let addressType = cursor.readU8(in: bytes) else { return nil }
        let host: String
        switch addressType {
        case 1:
            guard let address = cursor.readBytes(4, in: bytes) else { return nil }
            host = address.map(String.init).joined(separator: ".")
        case 3:
            guard let length = cursor.readU8(in: bytes), length > 0, let name = cursor.readBytes(Int(length), in: bytes) else { return nil }
            host = String(decoding: name, as: UTF8.self)
        case 4:
            guard let address = cursor.readBytes(16, in: bytes) else { return nil }
            host = stride(from: 0, to: 16, by: 2).map { String(UInt16(address[$0]) << 8 | UInt16(address[$0 + 1]), radix: 16) }.joined(separator: ":")
        default:
            return nil
        }
        guard let port = cursor.readU16(in: bytes) else { return nil }
        return ProxyTarget(host: host, port: port)
    }

    /// SOCKS4 ("SOCKS: A protocol for TCP proxy across firewalls", Ying-Da
    /// Lee) and SOCKS4a: version 4, command 1 (connect) or 2 (bind), port,
    /// IPv4 address, a user ID ending in NUL; with the address 0.0.0.x (x not
    /// 0), a host name ending in NUL follows (4a).
    static func socks4(_ bytes: Span<UInt8>) -> BypassOutcome {
        guard bytes[0] == 4 else { return .notRecognized }
        guard bytes.count >= 2 else { return .needMoreData }
        guard bytes[1] == 1 || bytes[1] == 2 else { return .notRecognized }
        guard bytes.count >= 9 else { return .needMoreData }
        let port = bytes.bigEndianU16(at: 2)
        let address = bytes.copied(4..<8)
        guard let userEnd = nulTerminated(bytes, from: 8) else {
            return bytes.count - 8 > 255 ? .notRecognized : .needMoreData
        }
        if address[0] == 0, address[1] == 0, address[2] == 0, address[3] != 0 {
            guard let nameEnd = nulTerminated(bytes, from: userEnd + 1) else {
                return bytes.count - userEnd > 256 ? .notRecognized : .needMoreData
            }
            guard nameEnd > userEnd + 1 else { return .notRecognized }
            let name = String(decoding: bytes.copied((userEnd + 1)..<nameEnd), as: UTF8.self)
            return .recognized(BypassRecognition(.socks, "SOCKS4a request", target: ProxyTarget(host: name, port: port)))
        }
        let host = address.map(String.init).joined(separator: ".")
        return .recognized(BypassRecognition(.socks, "SOCKS4 request", target: ProxyTarget(host: host, port: port)))
    }

    /// The offset of the NUL ending printable text that starts at `start`, at most 255 bytes on; nil if not there (yet) or not text.
    private static func nulTerminated(_ bytes: Span<UInt8>, from start: Int) -> Int? {
        var index = start
        while index < bytes.count, index - start <= 255 {
            let byte = bytes[index]
            if byte == 0 { return index }
            guard byte >= 0x20, byte < 0x7F else { return nil }
            index += 1
        }
        return nil
    }

    // MARK: HTTP CONNECT

    /// An HTTP CONNECT request (RFC 9110 section 9.3.6): the method, case
    /// sensitive, then the authority form of the target (host:port, RFC 9112
    /// section 3.2.3), then the HTTP version.
    static let connectMethod = Array("CONNECT ".utf8)
    static let connectVersion = Array(" HTTP/1.".utf8)

    static func httpConnect(_ bytes: Span<UInt8>) -> BypassOutcome {
        let method = connectMethod.span
        // As much of the method as has arrived must match.
        let shown = bytes.extracting(0..<min(bytes.count, method.count))
        for index in shown.indices where shown[index] != method[index] { return .notRecognized }
        guard bytes.count > method.count else { return .needMoreData }
        var end = method.count
        while end < bytes.count, bytes[end] != 0x20 {
            guard bytes[end] > 0x20, bytes[end] < 0x7F, end < 2_048 else { return .notRecognized }
            end += 1
        }
        guard end < bytes.count else { return .needMoreData }
        guard bytes.matches(connectVersion, at: end) || bytes.count < end + 8 else { return .notRecognized }
        guard bytes.count >= end + 8 else { return .needMoreData }
        let authority = String(decoding: bytes.copied(method.count..<end), as: UTF8.self)
        guard let target = authorityTarget(authority) else { return .notRecognized }
        return .recognized(BypassRecognition(.connect, "HTTP CONNECT", target: target))
    }

    /// `host:port` or `[v6]:port`.
    static func authorityTarget(_ authority: String) -> ProxyTarget? {
        guard let colon = authority.lastIndex(of: ":"), let port = UInt16(authority[authority.index(after: colon)...]) else { return nil }
        var host = authority[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        guard !host.isEmpty else { return nil }
        return ProxyTarget(host: String(host), port: port)
    }
}

/// What several client datagrams of one UDP flow show together: OpenVPN's
/// later packets repeat the session ID of its first (a retransmitted hard
/// reset, then P_ACK_V1 or P_CONTROL_V1, or P_CONTROL_WKC_V1 after
/// tls-crypt-v2), which confirms a first packet seen alone.
public struct DatagramTunnelRecognizer: Sendable {
    public let serverPort: UInt16
    /// Datagrams examined.
    public private(set) var datagrams = 0
    private var openVPNSession: [UInt8]?

    public init(serverPort: UInt16) {
        self.serverPort = serverPort
    }

    /// Examines the next client datagram of the flow.
    public mutating func add(datagram bytes: Span<UInt8>) -> BypassOutcome {
        datagrams += 1
        let single = TunnelRecognizer.examine(datagram: bytes, serverPort: serverPort)
        if case .recognized = single { return single }
        // A later OpenVPN packet of a session whose hard reset was not seen
        // (a capture that starts late): P_CONTROL_V1 (0x20), P_ACK_V1 (0x28)
        // or a retransmitted hard reset (0x38), key ID 0, with the session ID
        // of the datagram before. (Opcodes 10 and 11 are left out: 0x50 and
        // 0x58 are QUIC short headers, whose connection ID repeats as well.)
        let controlOpcodes: [UInt8] = [0x20, 0x28, 0x38]
        if let session = openVPNSession, bytes.count >= 9, controlOpcodes.contains(bytes[0]),
           bytes.copied(1..<9) == session {
            return .recognized(BypassRecognition(.openvpn, "control packets of one session"))
        }
        if openVPNSession == nil, bytes.count >= 9, controlOpcodes.contains(bytes[0]) {
            openVPNSession = bytes.copied(1..<9)
        }
        return .notRecognized
    }

    /// Convenience for an array.
    public mutating func add(datagram bytes: [UInt8]) -> BypassOutcome {
        add(datagram: bytes.span)
    }
}
