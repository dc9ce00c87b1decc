// Fuzz targets for the bypass parsers of filter-data: the tunnel and proxy
// recognizers, Google QUIC, and the DNS rewrites against bypasses.
import FilterData
import HallpassWire
import HallpassIPC
import VerdictCore

enum BypassFuzzing {
    /// Ports with a meaning to the recognizers, and some without.
    static let ports: [UInt16] = [853, 500, 4500, 1194, 1080, 8080, 51820, 22, 53, 443]

    // MARK: Tunnels and proxies

    /// Input: flags (bit 0: a TCP stream, else UDP datagrams; bits 1-7: the
    /// server port from `ports`, modulo its count), then for a stream its bytes, for datagrams
    /// each after a size byte (0, or the eighth datagram: the rest).
    static func tunnel(_ input: [UInt8]) {
        var splitter = InputSplitter(input)
        let flags = splitter.byte()
        let port = ports[Int(flags >> 1) % ports.count]
        if flags & 1 != 0 {
            stream(splitter.rest(), serverPort: port)
        } else {
            var datagrams: [[UInt8]] = []
            while !splitter.isAtEnd, datagrams.count < 8 {
                let size = Int(splitter.byte())
                datagrams.append(size == 0 || datagrams.count == 7 ? splitter.rest() : splitter.take(size))
            }
            self.datagrams(datagrams, serverPort: port)
        }
    }

    private static func stream(_ bytes: [UInt8], serverPort: UInt16) {
        // The prefixes the data path hands over as the stream grows, then the whole.
        let step = max(1, bytes.count / 8)
        for length in stride(from: step, to: bytes.count, by: step) {
            check(TunnelRecognizer.examine(stream: Array(bytes.prefix(length)), serverPort: serverPort), length: length, serverPort: serverPort)
        }
        let whole = TunnelRecognizer.examine(stream: bytes, serverPort: serverPort)
        check(whole, length: bytes.count, serverPort: serverPort)
        // The same bytes in one TCP segment through the inspector.
        var inspector = FlowInspector(engine: Engines.engine)
        _ = inspector.inspect(Packets.tcp4(destinationPort: serverPort, sequence: 1, flags: 0x02, payload: []), now: 1)
        _ = inspector.inspect(Packets.tcp4(destinationPort: serverPort, sequence: 2, flags: 0x18, payload: bytes), now: 2)
        _ = inspector.finishInspections(now: 3)
    }

    private static func check(_ outcome: BypassOutcome, length: Int, serverPort: UInt16) {
        switch outcome {
        case .recognized(let recognition):
            if let target = recognition.target { require(!target.host.isEmpty, "a proxy target without a host") }
            if serverPort == TunnelRecognizer.Ports.encryptedDNS {
                require(recognition.kind == .dot || recognition.kind == .ssh, "port 853 over TCP is neither DNS over TLS nor SSH")
            }
        case .needMoreData:
            require(length < TunnelRecognizer.maximumStreamPrefix, "more data wanted past the prefix bound")
        case .notRecognized:
            break
        }
    }

    private static func datagrams(_ datagrams: [[UInt8]], serverPort: UInt16) {
        var flow = DatagramTunnelRecognizer(serverPort: serverPort)
        for datagram in datagrams {
            let single = TunnelRecognizer.examine(datagram: datagram, serverPort: serverPort)
            let together = flow.add(datagram: datagram)
            // What one datagram shows on its own, the flow shows too.
            if case .recognized = single { require(together == single, "a flow lost what its datagram showed alone") }
            if serverPort == TunnelRecognizer.Ports.encryptedDNS, case .recognized(let recognition) = single {
                require(recognition.kind == .doq, "port 853 over UDP is not DNS over QUIC")
            }
        }
        require(flow.datagrams == datagrams.count, "the flow counted \(flow.datagrams) of \(datagrams.count) datagrams")
        // The first datagram through the inspector, over IPv4 and IPv6.
        guard let first = datagrams.first else { return }
        for packet in [Packets.udp4(sourcePort: 40_000, destinationPort: serverPort, payload: first),
                       Packets.udp6(sourcePort: 40_000, destinationPort: serverPort, payload: first)] {
            guard let packet else { continue }
            var inspector = FlowInspector(engine: Engines.engine)
            _ = inspector.inspect(packet, now: 1)
            _ = inspector.finishInspections(now: 2)
        }
    }

    // MARK: Google QUIC

    /// The versions the protected mode seals with (Q050 carries a CHLO, T050 and T051 a ClientHello).
    static let protectedVersions: [GoogleQUICVersion] = [.q050, .t050, .t051]

    /// Input: mode (0: the rest is frames sealed into a protected Initial of
    /// Q050, T050 or T051 by the next byte, with a DCID, a packet number
    /// length and optionally a second datagram; 1: frames after a Q046 long
    /// header in the clear; 2: frames after a public header of Q024-Q043 by
    /// the next byte; 3: raw datagrams, each after a size byte in units of 8,
    /// 0 for the rest), then the
    /// datagrams go through the parser and one flow's handshake.
    static func googleQUIC(_ input: [UInt8]) {
        var splitter = InputSplitter(input)
        let mode = splitter.byte()
        var datagrams: [[UInt8]] = []
        switch mode & 0x03 {
        case 0:
            let version = protectedVersions[Int(splitter.byte()) % protectedVersions.count]
            let dcid = splitter.take(Int(splitter.byte()) % 21)
            let packetNumberLength = Int(splitter.byte() & 0x03) + 1
            let frames = splitter.rest()
            datagrams.append(QUICFuzzing.seal(frames, version: version.rawValue, dcid: dcid, token: [], packetNumber: 1,
                                              packetNumberLength: packetNumberLength))
            if mode & 0x04 != 0 {
                datagrams.append(QUICFuzzing.seal(frames, version: version.rawValue, dcid: dcid, token: [], packetNumber: 2,
                                                  packetNumberLength: packetNumberLength))
            }
        case 1:
            // Long header: Initial, 4-byte packet number; DCID 8, no SCID; then the clear hash.
            datagrams.append([0xC3] + Array("Q046".utf8) + [0x50, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 1]
                + [UInt8](repeating: 0xAA, count: 12) + splitter.rest())
        case 2:
            // Public header: version flag, 8-byte connection ID, 1-byte packet number; the clear hash;
            // up to Q033 a private flags byte, which the frames bring themselves.
            let number = 24 + Int(splitter.byte()) % 20
            let tag: [UInt8] = [0x51, 0x30, 0x30 + UInt8(number / 10), 0x30 + UInt8(number % 10)]
            datagrams.append([0x09, 1, 2, 3, 4, 5, 6, 7, 8] + tag + [1] + [UInt8](repeating: 0xAA, count: 12) + splitter.rest())
        default:
            while !splitter.isAtEnd, datagrams.count < 4 {
                let size = Int(splitter.byte()) * 8
                datagrams.append(size == 0 || datagrams.count == 3 ? splitter.rest() : splitter.take(size))
            }
        }
        var handshake = GoogleQUICHandshake(capacity: 4096)
        for datagram in datagrams {
            _ = QUICVersionReadability(version: datagram.count >= 5 ? UInt32(datagram[1]) << 24 | UInt32(datagram[2]) << 16
                                           | UInt32(datagram[3]) << 8 | UInt32(datagram[4]) : 0)
            if case .handshake(_, let pieces, let keyID) = GoogleQUICParser.parse(datagram: datagram) {
                require(pieces.reduce(0) { $0 + $1.data.count } <= datagram.count, "handshake pieces longer than the datagram")
                if let keyID { require(keyID.count <= 20, "a key connection ID longer than 20 bytes") }
            }
            if case .hello(let hello) = handshake.add(datagram: datagram), let name = hello.serverName {
                require(!name.contains { $0 >= 0x41 && $0 <= 0x5A }, "a server name that is not lower-cased")
            }
        }
        require(handshake.datagrams == datagrams.count, "the handshake counted \(handshake.datagrams) of \(datagrams.count) datagrams")
    }

    // MARK: DNS rewrites against bypasses

    /// Input: flags (bit 0: IPv6 for the packet rewrite), then a DNS message:
    /// `ech` out of it (shorter, and length-keeping), NXDOMAIN and SafeSearch
    /// answers made from it, the same over TCP framing, and the NXDOMAIN
    /// answer put into the UDP packet the message came in.
    static func dnsRewrite(_ input: [UInt8]) {
        var splitter = InputSplitter(input)
        let flags = splitter.byte()
        let message = splitter.rest()
        if let rewritten = try? DNSBypassRewrite.removingECH(fromMessage: message) {
            require(rewritten.count < message.count, "removing ech did not shorten the message")
            do {
                let again = try DNSBypassRewrite.removingECH(fromMessage: rewritten)
                require(again == nil, "the rewritten message still has ech")
            } catch {
                require(false, "the rewritten message does not read: \(error)")
            }
        }
        if let same = try? DNSBypassRewrite.removingECH(fromMessage: message, keepingLength: true) {
            require(same.count == message.count, "a length-keeping rewrite changed the length")
        }
        let stream = [UInt8(truncatingIfNeeded: message.count >> 8), UInt8(truncatingIfNeeded: message.count)] + message
        if message.count <= 0xFFFF, let rewritten = try? DNSPacketRewrite.removingECH(fromTCPStream: stream, keepingLength: flags & 0x02 != 0) {
            require(Int(rewritten[0]) << 8 | Int(rewritten[1]) == rewritten.count - 2, "the TCP length prefix does not match the message")
        }
        let readable = (try? DNSMessageParser.parse(message).get()) != nil
        if let answer = try? DNSBypassRewrite.nxdomain(for: message) {
            require(answer.count >= 12 && answer[0] == message[0] && answer[1] == message[1], "the NXDOMAIN answer lost the query's ID")
            require(answer[2] & 0x80 != 0 && answer[3] & 0x0F == 3, "the NXDOMAIN answer is not a response with RCODE 3")
            if readable { require((try? DNSMessageParser.parse(answer).get()) != nil, "the NXDOMAIN answer does not read") }
            let packet = flags & 1 == 0 ? Packets.udp4(sourcePort: 53, payload: message) : Packets.udp6(sourcePort: 53, payload: message)
            if let packet, let replaced = try? DNSPacketRewrite.replacingUDPPayload(of: packet, with: answer) {
                let ipv6 = flags & 1 != 0
                require(Packets.udpChecksumIsValid(replaced, ipv6: ipv6), "the rewritten packet's UDP checksum is wrong")
                if !ipv6 { require(Packets.ipv4HeaderChecksumIsValid(replaced), "the rewritten packet's IPv4 header checksum is wrong") }
                require((try? DNSPacketRewrite.udpPayload(of: replaced)) == answer, "the rewritten packet does not carry the answer")
            }
        }
        let addresses: [IPAddress] = [.v4(0xD8EF_2678), .v6(high: 0x2001_4860_4802_0032, low: 0x78)]
        if let answer = try? DNSBypassRewrite.safeSearchAnswer(for: message, target: Array("forcesafesearch.google.com".utf8), addresses: addresses) {
            require(answer.count >= 12 && answer[2] & 0x80 != 0 && answer[3] & 0x0F == 0, "the SafeSearch answer is not a response with RCODE 0")
            if readable { require((try? DNSMessageParser.parse(answer).get()) != nil, "the SafeSearch answer does not read") }
        }
    }
}
