// The bypass recognizers on hand-made first payloads (written from the specifications, not
// from the captures), every truncation of each, and bytes that must not be taken for them.
import Testing
@testable import FilterData
import HallpassWire
import HallpassIPC

@Suite("Tunnel recognizer")
struct TunnelRecognizerTests {
    static func recognized(_ outcome: BypassOutcome) -> BypassRecognition? {
        if case .recognized(let recognition) = outcome { return recognition }
        return nil
    }

    // MARK: WireGuard

    static let initiation: [UInt8] = [1, 0, 0, 0] + [0x11, 0x22, 0x33, 0x44] + [UInt8](repeating: 0x5A, count: 140)

    @Test func wireGuardMessagesByTypeAndSize() {
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: Self.initiation, serverPort: 51820))?.detail == "handshake initiation")
        let response: [UInt8] = [2, 0, 0, 0] + [UInt8](repeating: 0x33, count: 88)
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: response, serverPort: 9))?.kind == .wireguard)
        let data: [UInt8] = [4, 0, 0, 0, 9, 9, 9, 9] + [UInt8](repeating: 0, count: 8) + [UInt8](repeating: 0x77, count: 64)
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: data, serverPort: 443))?.detail == "transport data")
    }

    @Test func wireGuardLookalikesAreNot() {
        // Wrong sizes, reserved bytes set, a zero receiver index, a length off the 16-byte grid.
        #expect(TunnelRecognizer.examine(datagram: Array(Self.initiation.dropLast()), serverPort: 51820) == .notRecognized)
        var reserved = Self.initiation
        reserved[2] = 1
        #expect(TunnelRecognizer.examine(datagram: reserved, serverPort: 51820) == .notRecognized)
        #expect(TunnelRecognizer.examine(datagram: [4, 0, 0, 0] + [UInt8](repeating: 0, count: 60), serverPort: 1) == .notRecognized)
        #expect(TunnelRecognizer.examine(datagram: [4, 0, 0, 0, 1, 1, 1, 1] + [UInt8](repeating: 0, count: 41), serverPort: 1) == .notRecognized)
    }

    @Test func tailscaleDiscovery() {
        let disco = Array("TS\u{1F4AC}".utf8) + [UInt8](repeating: 0x42, count: 86)
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: disco, serverPort: 41641))?.kind == .wireguard)
    }

    // MARK: OpenVPN

    static let session: [UInt8] = [0xAB, 0xCD, 0xEF, 0x01, 0x23, 0x45, 0x67, 0x89]
    /// HARD_RESET_CLIENT_V2, no HMAC: opcode, session, ack count 0, message ID 0.
    static let plainReset: [UInt8] = [0x38] + session + [0] + [0, 0, 0, 0]
    /// With tls-auth (HMAC-SHA-256): the HMAC, replay ID 1, a time, then the same.
    static let tlsAuthReset: [UInt8] = [0x38] + session + [UInt8](repeating: 0xEE, count: 32) + [0, 0, 0, 1] + [0x66, 0, 0, 0] + [0] + [0, 0, 0, 0]

    @Test func openVPNHardResets() {
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: Self.plainReset, serverPort: 1194))?.detail == "hard reset, no HMAC")
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: Self.tlsAuthReset, serverPort: 443))?.detail == "tls-auth hard reset (HMAC-SHA-256)")
        // OpenVPN 2.6: an early-negotiation TLV as the payload.
        let withTLV = Self.plainReset + [0, 1, 0, 2, 0, 1]
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: withTLV, serverPort: 1194))?.kind == .openvpn)
        // tls-crypt: replay ID 1 and time in the clear, a tag, five encrypted bytes.
        let tlsCrypt: [UInt8] = [0x38] + Self.session + [0, 0, 0, 1, 0x66, 1, 2, 3] + [UInt8](repeating: 0x99, count: 32 + 5)
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: tlsCrypt, serverPort: 1194))?.detail == "tls-crypt hard reset")
        // tls-crypt-v2: as tls-crypt, then a wrapped key ending in its own length.
        let wrappedKey = [UInt8](repeating: 0x21, count: 298) + [0x01, 0x2C]
        let v3: [UInt8] = [0x50] + Self.session + [0x0F, 0, 0, 1, 0x66, 1, 2, 3] + [UInt8](repeating: 0x99, count: 32 + 5) + wrappedKey
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: v3, serverPort: 1194))?.detail == "tls-crypt-v2 hard reset")
    }

    @Test func openVPNOverTCPWaitsForTheWholePacket() {
        let stream = Build.be16(Self.tlsAuthReset.count) + Self.tlsAuthReset
        for length in 0..<stream.count {
            let outcome = TunnelRecognizer.examine(stream: Array(stream.prefix(length)), serverPort: 443)
            #expect(outcome == .needMoreData || outcome == .notRecognized, "prefix \(length): \(outcome)")
            if length >= 3 { #expect(outcome == .needMoreData, "prefix \(length)") }
        }
        #expect(Self.recognized(TunnelRecognizer.examine(stream: stream, serverPort: 443))?.detail == "tls-auth hard reset (HMAC-SHA-256) over TCP")
    }

    @Test func openVPNLookalikesAreNot() {
        var wrongID = Self.tlsAuthReset
        wrongID[9 + 32 + 3] = 2  // replay ID 2: not a first packet
        #expect(TunnelRecognizer.examine(datagram: wrongID, serverPort: 1194) == .notRecognized)
        var keyID = Self.plainReset
        keyID[0] = 0x39  // key ID 1
        #expect(TunnelRecognizer.examine(datagram: keyID, serverPort: 1194) == .notRecognized)
        #expect(TunnelRecognizer.examine(datagram: Self.plainReset + [0, 1, 0, 9], serverPort: 1194) == .notRecognized)  // a TLV that runs past the end
    }

    @Test func laterOpenVPNPacketsOfOneSession() {
        var recognizer = DatagramTunnelRecognizer(serverPort: 1194)
        let control: [UInt8] = [0x20] + Self.session + [UInt8](repeating: 0x10, count: 40)
        let ack: [UInt8] = [0x28] + Self.session + [UInt8](repeating: 0x11, count: 20)
        #expect(recognizer.add(datagram: control) == .notRecognized)
        #expect(Self.recognized(recognizer.add(datagram: ack))?.detail == "control packets of one session")
        // QUIC short headers (0x50, 0x58) repeat their connection ID too: never taken.
        var quic = DatagramTunnelRecognizer(serverPort: 443)
        let short: [UInt8] = [0x58] + Self.session + [UInt8](repeating: 0x10, count: 40)
        #expect(quic.add(datagram: short) == .notRecognized)
        #expect(quic.add(datagram: short) == .notRecognized)
    }

    /// First client payloads of Debian 12's own clients, taken on the lab machine's side of
    /// scripts/bypass-matrix.sh: OpenVPN 2.6.14 with tls-auth (UDP, and TCP with its length
    /// prefix), and wireguard-go's handshake initiation.
    static let openVPN26UDP = [UInt8](hex: "387c2e4a001ac7ccf71f72d6838be8b74f898883398fb109c3df6b4ea1000000016b04df540000000000")
    static let openVPN26TCP = [UInt8](hex: "002a3891f6a71af232d7063d76ce54dfae1f6416777218093bcba782048e8c000000016b04df550000000000")
    static let wireguardGoInitiation = [UInt8](hex: """
        010000006bae50ef9b5d71568be90eb3c557b50d8017938ed67b83b7f12e2c468f45bc44e18b135eb78f53b7673a6edd19af708c37a69801fc6941c2b9        062a6ec4724b0dd69dacdbae17d6936952d63b7452cf7157fb35746b13d392b49a96beadbc3f379f34d7e76d6d4bc67de31fddb03957ff4aee862054        7bb3f38d920577ce37ed6300000000000000000000000000000000
        """)

    @Test func debiansOwnClients() {
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: Self.openVPN26UDP, serverPort: 1194))?.detail == "tls-auth hard reset (HMAC-SHA-1)")
        #expect(Self.recognized(TunnelRecognizer.examine(stream: Self.openVPN26TCP, serverPort: 1194))?.detail == "tls-auth hard reset (HMAC-SHA-1) over TCP")
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: Self.wireguardGoInitiation, serverPort: 51821))?.detail == "handshake initiation")
        // The same bytes on any port: what matters is the packet, not where it goes.
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: Self.openVPN26UDP, serverPort: 443))?.kind == .openvpn)
    }

    // MARK: IKE

    /// An IKEv2 IKE_SA_INIT request: SPIi, SPIr 0, next payload SA (33), version 2.0, exchange 34, flags I, message ID 0.
    static func ikeSAInit(bodyLength: Int = 40) -> [UInt8] {
        [1, 2, 3, 4, 5, 6, 7, 8] + [UInt8](repeating: 0, count: 8) + [33, 0x20, 34, 0x08] + [0, 0, 0, 0]
            + Build.be32(UInt32(28 + bodyLength)) + [UInt8](repeating: 0x44, count: bodyLength)
    }

    @Test func ikeOnPorts500And4500() {
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: Self.ikeSAInit(), serverPort: 500))?.detail == "IKEv2 IKE_SA_INIT")
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: [0, 0, 0, 0] + Self.ikeSAInit(), serverPort: 4500))?.kind == .ike)
        // Elsewhere, or with a length that is not the datagram's, or ESP on 4500: not IKE.
        #expect(TunnelRecognizer.examine(datagram: Self.ikeSAInit(), serverPort: 5000) == .notRecognized)
        #expect(TunnelRecognizer.examine(datagram: Self.ikeSAInit() + [0], serverPort: 500) == .notRecognized)
        #expect(TunnelRecognizer.examine(datagram: Self.ikeSAInit(), serverPort: 4500) == .notRecognized)
        var responderSPI = Self.ikeSAInit()
        responderSPI[12] = 1
        #expect(TunnelRecognizer.examine(datagram: responderSPI, serverPort: 500) == .notRecognized)
    }

    // MARK: SOCKS, CONNECT

    @Test func socks5GreetingAndRequest() {
        #expect(Self.recognized(TunnelRecognizer.examine(stream: [5, 1, 0], serverPort: 1080))?.detail == "SOCKS5 greeting")
        #expect(TunnelRecognizer.examine(stream: [5, 2, 0], serverPort: 1080) == .needMoreData)
        let request: [UInt8] = [5, 1, 0] + [5, 1, 0, 3, 11] + Array("example.com".utf8) + [1, 187]
        let recognition = Self.recognized(TunnelRecognizer.examine(stream: request, serverPort: 1080))
        #expect(recognition?.target == ProxyTarget(host: "example.com", port: 443))
        // No methods, "no acceptable method" offered, or garbage after the greeting: not SOCKS.
        #expect(TunnelRecognizer.examine(stream: [5, 0, 1], serverPort: 1080) == .notRecognized)
        #expect(TunnelRecognizer.examine(stream: [5, 1, 0xFF], serverPort: 1080) == .notRecognized)
        #expect(TunnelRecognizer.examine(stream: [5, 1, 0, 0x16, 3, 1], serverPort: 1080) == .notRecognized)
    }

    @Test func socks4And4a() {
        let socks4: [UInt8] = [4, 1, 0, 80, 93, 184, 216, 34] + Array("bob".utf8) + [0]
        #expect(Self.recognized(TunnelRecognizer.examine(stream: socks4, serverPort: 1080))?.target == ProxyTarget(host: "93.184.216.34", port: 80))
        let socks4a: [UInt8] = [4, 1, 0, 80, 0, 0, 0, 1, 0] + Array("www.example.com".utf8) + [0]
        #expect(Self.recognized(TunnelRecognizer.examine(stream: socks4a, serverPort: 1080))?.detail == "SOCKS4a request")
        #expect(TunnelRecognizer.examine(stream: Array(socks4a.dropLast()), serverPort: 1080) == .needMoreData)
        #expect(TunnelRecognizer.examine(stream: [4, 9, 0, 80], serverPort: 1080) == .notRecognized)
    }

    @Test func httpConnect() {
        let request = Array("CONNECT www.example.com:443 HTTP/1.1\r\nHost: www.example.com:443\r\n\r\n".utf8)
        let recognition = Self.recognized(TunnelRecognizer.examine(stream: request, serverPort: 3128))
        #expect(recognition?.kind == .connect && recognition?.target == ProxyTarget(host: "www.example.com", port: 443))
        let v6 = Array("CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n".utf8)
        #expect(Self.recognized(TunnelRecognizer.examine(stream: v6, serverPort: 8080))?.target == ProxyTarget(host: "2001:db8::1", port: 8443))
        for length in 1..<24 {
            #expect(TunnelRecognizer.examine(stream: Array(request.prefix(length)), serverPort: 3128) == .needMoreData, "prefix \(length)")
        }
        // Methods are case-sensitive; GET is no tunnel.
        #expect(TunnelRecognizer.examine(stream: Array("connect a:1 HTTP/1.1\r\n".utf8), serverPort: 80) == .notRecognized)
        #expect(TunnelRecognizer.examine(stream: Array("GET / HTTP/1.1\r\n".utf8), serverPort: 80) == .notRecognized)
    }

    // MARK: SSH

    /// Identification strings of Debian's clients and others (RFC 4253 section 4.2), on any port,
    /// 853 too; and what OpenSSH's server also takes (`sscanf("SSH-%d.%d-")`: a space or a sign).
    @Test func sshIdentificationOnAnyPort() {
        for (line, version) in [("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n", "2.0"), ("SSH-2.0-PuTTY_Release_0.78\r\n", "2.0"),
                                ("SSH-2.0-dropbear_2022.83\r\n", "2.0"), ("SSH-1.99-OpenSSH_3.9p1\r\n", "1.99"), ("SSH- 2.0-x\r\n", ""),
                                ("SSH-+2.0-x\r\n", ""), ("SSH-2.000000000-x\r\n", "2.000000")] {
            for port: UInt16 in [22, 443, 80, 2222, 853] {
                let recognition = Self.recognized(TunnelRecognizer.examine(stream: Array(line.utf8), serverPort: port))
                #expect(recognition == BypassRecognition(.ssh, "identification SSH-" + version), "\(line) to port \(port)")
            }
            // Shorter than "SSH-" it waits, on 853 too (DNS over TLS starts with 0x16); "SSH-" is enough.
            let bytes = Array(line.utf8)
            for length in 1..<4 {
                for port: UInt16 in [22, 853] {
                    #expect(TunnelRecognizer.examine(stream: Array(bytes.prefix(length)), serverPort: port) == .needMoreData, "\(line) prefix \(length)")
                }
            }
            #expect(Self.recognized(TunnelRecognizer.examine(stream: Array(bytes.prefix(4)), serverPort: 22))?.kind == .ssh)
        }
        for text in ["ssh-2.0-x", "SSX-2.0-x", "SSH 2.0-x", "xSSH-2.0-x"] {
            #expect(TunnelRecognizer.examine(stream: Array(text.utf8), serverPort: 22) == .notRecognized, "\(text)")
            #expect(Self.recognized(TunnelRecognizer.examine(stream: Array(text.utf8), serverPort: 853))?.kind == .dot, "\(text) on 853")
        }
    }

    // MARK: Encrypted DNS

    @Test func encryptedDNSByPortAndALPN() {
        #expect(Self.recognized(TunnelRecognizer.examine(stream: [], serverPort: 853))?.kind == .dot)
        #expect(Self.recognized(TunnelRecognizer.examine(datagram: [0xC0], serverPort: 853))?.kind == .doq)
        #expect(TunnelRecognizer.encryptedDNS(alpnProtocols: [Array("doq".utf8)], quic: true)?.kind == .doq)
        #expect(TunnelRecognizer.encryptedDNS(alpnProtocols: [Array("doq-i11".utf8)], quic: true)?.kind == .doq)
        #expect(TunnelRecognizer.encryptedDNS(alpnProtocols: [Array("dot".utf8)], quic: false)?.kind == .dot)
        #expect(TunnelRecognizer.encryptedDNS(alpnProtocols: [Array("h3".utf8), Array("h2".utf8)], quic: true) == nil)
    }

    // MARK: Ordinary traffic and damage

    @Test func ordinaryFirstPayloadsAreNotTunnels() {
        let hello = Build.records(Build.clientHello(extensions: [Build.sniExtension("www.example.com")]))
        #expect(TunnelRecognizer.examine(stream: hello, serverPort: 443) == .notRecognized)
        #expect(TunnelRecognizer.examine(stream: Array("GET / HTTP/1.1\r\nHost: a\r\n\r\n".utf8), serverPort: 80) == .notRecognized)
        #expect(TunnelRecognizer.examine(stream: Array("220 mail.example.com ESMTP\r\n".utf8), serverPort: 25) == .notRecognized)
        #expect(TunnelRecognizer.examine(datagram: Build.dnsQuery("example.com"), serverPort: 53) == .notRecognized)
        #expect(TunnelRecognizer.examine(datagram: [0xC0, 0, 0, 0, 1] + [UInt8](repeating: 0, count: 1200), serverPort: 443) == .notRecognized)
    }

    @Test func everyTruncationAndRandomDamageIsHandled() {
        let vectors: [[UInt8]] = [Self.initiation, Self.plainReset, Self.tlsAuthReset, [0, 0, 0, 0] + Self.ikeSAInit(),
                                  [5, 1, 0, 5, 1, 0, 1, 10, 0, 0, 1, 0, 80], Array("CONNECT a.example:443 HTTP/1.1\r\n".utf8),
                                  Array("SSH-2.0-OpenSSH_9.2p1\r\n".utf8)]
        for vector in vectors {
            for length in 0...vector.count {
                let prefix = Array(vector.prefix(length))
                _ = TunnelRecognizer.examine(stream: prefix, serverPort: 1080)
                _ = TunnelRecognizer.examine(stream: Build.be16(vector.count) + prefix, serverPort: 1194)
                for port: UInt16 in [500, 4500, 1194] { _ = TunnelRecognizer.examine(datagram: prefix, serverPort: port) }
            }
            forEachMutation(of: vector, rounds: 300) { mutant in
                _ = TunnelRecognizer.examine(stream: mutant, serverPort: 1080)
                var recognizer = DatagramTunnelRecognizer(serverPort: 4500)
                _ = recognizer.add(datagram: mutant)
                _ = recognizer.add(datagram: mutant)
            }
        }
    }
}
