// Seed inputs for each target: packets, streams and payloads taken from the
// shared captures (../shared/testdata), list names from UT1, and the
// encodings the programs themselves write. scripts/fuzz.sh writes them to
// the target's corpus folder before its first run.
import BlockPage
import BundleDelta
import FilterControl
import FilterData
import HallpassWire
import HallpassIPC
import Foundation
import SharedStore
import VerdictCore

extension FuzzTarget {
    /// At most `limit` seed inputs; `testdata` is the shared test data folder, when present.
    public func seeds(testdata: String?, limit: Int = 300) -> [[UInt8]] {
        let captures = CaptureSeeds(testdata: testdata, limit: limit)
        var seeds: [[UInt8]]
        switch self {
        case .ip: seeds = captures.packets
        case .tls: seeds = captures.tlsRecords
        case .http:
            seeds = [
                "GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n", "POST /form?a=1 HTTP/1.0\nHost: a.b:8080\nContent-Length: 3\n\nabc",
                "CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n",
                "GET http://user:pw@Example.COM./path#x HTTP/1.1\r\nHost: other\r\n\r\n", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
                "GET / HTTP/1.1\r\nX: 1\r\n folded\r\nHost:  spaced.example \r\n\r\n",
            ].map { Array($0.utf8) } + captures.httpRequests
        case .stream:
            // flags, segment count, sizes, then the stream: in order, reversed, odd first.
            seeds = (captures.tlsRecords.prefix(limit / 6) + captures.httpRequests.prefix(limit / 6)).flatMap { payload in
                [[0, 3, 40, 200, 255, 255] + payload, [1, 7, 1, 2, 3, 5, 8, 13, 21, 255] + payload, [6, 2, 100, 255, 255] + payload]
            }
        case .quic:
            seeds = captures.tlsRecords.filter { $0.count > 9 }.prefix(limit / 2).flatMap { record -> [[UInt8]] in
                let message = Array(record.dropFirst(5))
                let frame: [UInt8] = [0x06, 0x00, 0x40 | UInt8((message.count >> 8) & 0x3F), UInt8(message.count & 0xFF)] + message
                let dcid: [UInt8] = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08]
                return [[0, 0, 8] + dcid + [0, 0] + frame, [2, 1, 8] + dcid + [3, 0] + frame]
            }
            seeds += captures.udpPayloads.filter { $0.first.map { $0 & 0x80 != 0 } ?? false }.map { [1] + $0 }
        case .dns: seeds = captures.dnsMessages
        case .capture: seeds = captures.files
        case .control:
            let host = (try? HostName("www.example.com"))!
            let commands: [ControlCommand] = [
                .useRules(store: "/var/lib/hallpass/rules/current/rules.hpstore", policy: "/run/hallpass/policy"),
                .answer(host: host, categories: ["games", "social"], timeToLive: 3600), .noAnswer(host: host), .ping(7),
                // hallpass-proxy's interception CA (hex fields).
                .interception(InterceptionHandover(key: Array(0..<32), certificate: [0x30, 0x03, 0x02, 0x01, 0x01], untrustedKeys: [Array(repeating: 7, count: 32)])),
            ]
            var counters = FilterDataCounters()
            counters.packets = 10
            counters.flows = 3
            let events: [DataEvent] = [
                .hello(pid: 1234, rulesVersion: 5), .ask(NeedRulesQuestion(host: host, kind: "tls", destination: "192.0.2.1", port: 443, uid: 1000)),
                .rulesLoaded(version: 6), .rulesRefused(code: "store.corrupt", message: "the file is damaged"),
                .pong(7, counters: counters),
                // An inspected request's record, with its search term (the 14th field).
                .reports(FlowReportLines([FlowReport(
                    flow: FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.2")!, sourcePort: 40_000, destination: IPAddress("192.0.2.1")!, destinationPort: 443),
                    uid: 1000, kind: "https", host: "www.google.com", path: "/search?q=a", verdict: .allow, reason: Reason(source: .unknownHost),
                    searchTerm: "a")])),
            ]
            seeds = commands.map(\.encoded) + events.map(\.encoded)
        case .store:
            seeds = [Engines.storeBytes] + captures.stores
        case .manifest:
            let manifest = BundleManifest(version: 20_261_124, issuedAt: 1_700_000_000, expiresAt: 1_800_000_000, files: [
                .init(name: "rules.hpstore", size: 368, sha256: String(repeating: "ab", count: 32)),
                .init(name: "policy.yaml", size: 10, sha256: String(repeating: "0f", count: 32)),
            ], deltas: [
                .init(name: "rules.hpstore.1234567890abcdef-abababababababab.zst", size: 40, sha256: String(repeating: "cd", count: 32),
                      target: "rules.hpstore", baseSHA256: String(repeating: "12", count: 32)),
            ])
            seeds = [manifest.encoded]
        case .delta:
            seeds = DeltaSeeds.make()
        case .configuration: seeds = [Array(Configuration.example.utf8)]
        case .blockpage:
            seeds = [
                "GET\n/\nblocked.test\nko, en;q=0.8\n", "GET\n/?url=http%3A%2F%2Fblocked.test%2Fa\nblockpage.test\nen\n",
                "POST\n/request-access\nblockpage.test\nen\nhost=blocked.test&url=http%3A%2F%2Fblocked.test%2F&reason=homework",
                "PUT\n/x\n\n\n",
            ].map { Array($0.utf8) }
        case .templates:
            seeds = [
                [0] + Array("<h1>{{organization}}</h1><p>{{host}} {{#category}}({{category}}){{/category}}</p>".utf8),
                [2] + Array("<p>{{status}}</p>".utf8),
                [3] + Array("# English\ntitle = Blocked\nexplanation = {{host}} is blocked\n".utf8),
                [4] + Array("title = 차단됨\n".utf8),
            ]
        case .policy:
            var policy = Policy()
            policy.unknown = .ask
            seeds = [PolicyText.render(Policy()), PolicyText.render(policy)].map { Array($0.utf8) }
        case .tunnel:
            seeds = BypassSeeds.tunnels + captures.bypassPayloads.map { item in
                // flags: the transport and the port's place in the target's list (the last for any other port).
                let port = UInt8(BypassFuzzing.ports.firstIndex(of: item.serverPort) ?? BypassFuzzing.ports.count - 1)
                return item.isTCP ? [port << 1 | 1] + item.payload : [port << 1, 0] + item.payload
            }
        case .gquic:
            seeds = BypassSeeds.googleQUIC + captures.googleQUICDatagrams.map { [3, 0] + $0 }
            // ClientHellos of the captures in CRYPTO frames, sealed as T051 Initials.
            seeds += captures.tlsRecords.filter { $0.count > 9 }.prefix(limit / 4).map { record in
                let message = Array(record.dropFirst(5))
                return [0, 2, 8, 1, 2, 3, 4, 5, 6, 7, 8, 3] + BypassSeeds.cryptoFrame(message)
            }
        case .dnsbypass:
            seeds = BypassSeeds.dnsMessages.flatMap { [[0] + $0, [3] + $0] } + captures.dnsMessages.map { [1] + $0 }
        case .live:
            let payload = """
                {"format":1,"machine":"m-fuzz","room":"lab1","sequence":42,"issued":1764360000,"items":[
                {"id":"lr-1","sequence":40,"action":"allow","targets":["example.org"],"scope":{"kind":"room","value":"lab1"},"from":1764359000,"until":1764363600,"by":"Ada"},
                {"id":"lr-2","sequence":41,"action":"focus","targets":["adult.example","docs.example"],"scope":{"kind":"group","value":"year9"},"from":1764359000,"until":1764363600,"by":"Ada"},
                {"id":"lr-3","sequence":41,"action":"pause","targets":[],"scope":{"kind":"everyone"},"from":1764359000,"until":1764363600,"by":"Ada"}],
                "requests":[{"id":"rq-1","state":"approved","message":"ok","until":1764363600}]}
                """
            // Times at the ends of Int64: `until - from` trapped for a `from` of Int64.min, and a
            // `from` near Int64.max kept an item in force for ever (both found in review).
            let extremes = """
                {"format":1,"machine":"m-fuzz","room":"lab1","sequence":43,"issued":1764360000,"items":[
                {"id":"lr-4","sequence":42,"action":"block","targets":["example.org"],"scope":{"kind":"room","value":"lab1"},"from":-9223372036854775808,"until":1764363600,"by":"Ada"},
                {"id":"lr-5","sequence":42,"action":"allow","targets":["example.org"],"scope":{"kind":"everyone"},"from":9223372036854775000,"until":9223372036854775807,"by":"Ada"}]}
                """
            seeds = [[0] + Array(payload.utf8), [0] + Array(extremes.utf8), [1] + Array(#"{"payload":"e30=","signature":"AA==","key":"ed25519:AA=="}"#.utf8)]
        case .inspect:
            // The host's choice (InspectFuzzing.hosts; 7: a length and the Host from the input), then the target.
            let requests: [(UInt8, String)] = [
                (0, "/watch?v=dQw4w9WgXcQ&feature=share"), (0, "/watch?v=aaaaaaaaaaa&v=dQw4w9WgXcQ"), (0, "/shorts/dQw4w9WgXcQ"),
                (0, "/embed/dQw4w9WgXcQ?rel=0"), (0, "/@MathsClass/videos"), (0, "/channel/UCaaaaaaaaaaaaaaaaaaaaaa"),
                (0, "/results?search_query=lofi+beats"), (0, "/s/player/abc/base.js"), (0, "/%2e%2e/watch?v=%64Qw4w9WgXcQ"),
                (1, "/dQw4w9WgXcQ?si=x"), (2, "/search?q=caf%C3%A9+prices&q=second"), (2, "/search?%71=%zz%4&q=%E2%80%AE"),
                (3, "/images/search?q=cats"), (4, "/html/?q=weather"), (5, "/path/page"), (6, "https://www.youtube.com/watch?v=dQw4w9WgXcQ#x"),
            ]
            seeds = requests.map { [$0.0] + Array($0.1.utf8) }
            seeds += [[7, 12] + Array("News.Example".utf8) + Array("/a/./b/../c?x=1".utf8), [7, 5] + Array("[::1]".utf8) + Array("/".utf8)]
        }
        return Array(seeds.filter { !$0.isEmpty }.prefix(limit))
    }
}

/// What the seeds take from the shared captures and lists.
struct CaptureSeeds {
    var files: [[UInt8]] = []
    var packets: [[UInt8]] = []
    /// Client payloads that start a TLS record, and ones that start an HTTP request.
    var tlsRecords: [[UInt8]] = []
    var httpRequests: [[UInt8]] = []
    var udpPayloads: [[UInt8]] = []
    var dnsMessages: [[UInt8]] = []
    var stores: [[UInt8]] = []
    /// UDP payloads of nDPI's Google QUIC captures that carry a gQUIC version.
    var googleQUICDatagrams: [[UInt8]] = []
    /// TCP and UDP payloads of the tunnel, proxy and encrypted DNS captures (ndpi-bypass), with their server port.
    var bypassPayloads: [(isTCP: Bool, serverPort: UInt16, payload: [UInt8])] = []

    init(testdata: String?, limit: Int) {
        guard let testdata else { return }
        let folder = testdata + "/ndpi/pcap"
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
        for name in names {
            guard let data = FileManager.default.contents(atPath: folder + "/" + name), data.count <= 256 * 1024 else { continue }
            let bytes = [UInt8](data)
            files.append(bytes)
            guard var reader = try? CaptureReader(bytes: bytes) else { continue }
            while let record = try? reader.next() {
                guard case .ip(let slice) = record.payload, let packet = try? IPPacketParser.parse(slice) else { continue }
                let ip = Array(slice)
                if packets.count < limit { packets.append(ip) }
                let payload = Array(ip[packet.payload])
                guard !payload.isEmpty else { continue }
                if packet.protocolNumber == 6, payload[0] == 22, tlsRecords.count < limit { tlsRecords.append(payload) }
                if packet.protocolNumber == 6, httpRequests.count < limit, case .request = HTTPRequestHeadParser.parse(payload) {
                    httpRequests.append(payload)
                }
                if packet.protocolNumber == 17, udpPayloads.count < limit { udpPayloads.append(payload) }
                if packet.protocolNumber == 17, packet.sourcePort == 53 || packet.destinationPort == 53, dnsMessages.count < limit {
                    dnsMessages.append(payload)
                }
                if packet.protocolNumber == 17, googleQUICDatagrams.count < limit, GoogleQUICParser.version(ofClientDatagram: payload) != nil {
                    googleQUICDatagrams.append(payload)
                }
            }
        }
        // The tunnels', proxies' and encrypted DNS's payloads, a few from each capture, server ports as they were.
        let bypassFolder = testdata + "/ndpi-bypass/pcap"
        let bypassNames = ((try? FileManager.default.contentsOfDirectory(atPath: bypassFolder)) ?? []).sorted()
        for name in bypassNames {
            guard let data = FileManager.default.contents(atPath: bypassFolder + "/" + name), data.count <= 512 * 1024,
                var reader = try? CaptureReader(bytes: [UInt8](data))
            else { continue }
            var taken = 0
            while let record = try? reader.next(), taken < max(1, limit / max(1, bypassNames.count)) {
                guard case .ip(let slice) = record.payload, let packet = try? IPPacketParser.parse(slice), let port = packet.destinationPort,
                    !packet.payload.isEmpty, packet.protocolNumber == 6 || packet.protocolNumber == 17
                else { continue }
                let ip = Array(slice)
                bypassPayloads.append((packet.protocolNumber == 6, port, Array(ip[packet.payload])))
                taken += 1
            }
        }
        // A store of real list names.
        if let list = FileManager.default.contents(atPath: testdata + "/ut1/blacklists/gambling/domains") {
            var builder = RuleStoreBuilder()
            if let category = try? builder.category(named: "gambling") {
                let lines = String(decoding: list, as: UTF8.self).split(separator: "\n").prefix(200)
                for line in lines { if let pattern = try? RulePattern(line) { builder.add(pattern, category: category) } }
                if let built = try? builder.build(version: 2) { stores.append(built.bytes) }
            }
        }
    }
}

/// Hand-made seeds of the bypass targets, in their input layouts (BypassTargets.swift).
enum BypassSeeds {
    static func be16(_ value: Int) -> [UInt8] { [UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)] }

    /// flags for `tunnel`: the transport and the server port's place in `BypassFuzzing.ports`.
    static func tunnelFlags(tcp: Bool, port: UInt16) -> UInt8 {
        UInt8(BypassFuzzing.ports.firstIndex(of: port) ?? BypassFuzzing.ports.count - 1) << 1 | (tcp ? 1 : 0)
    }

    /// An OpenVPN P_CONTROL_HARD_RESET_CLIENT_V2 with a tls-auth SHA-1 HMAC: opcode, session ID,
    /// HMAC, replay packet ID 1, timestamp, no acks, message packet ID 0.
    static let openVPNHardReset: [UInt8] = [0x38] + [0x5a, 0x11, 0x9e, 0x03, 0x77, 0xc1, 0x20, 0x4b] + [UInt8](repeating: 0x6d, count: 20)
        + [0, 0, 0, 1] + [0x65, 0x5b, 0x1c, 0x00] + [0] + [0, 0, 0, 0]

    /// An IKEv2 IKE_SA_INIT header alone: initiator SPI, zero responder SPI, no payload, version 2.0,
    /// exchange 34, the initiator flag, message ID 0, length 28.
    static let ikeSAInit: [UInt8] = [0x8a, 0x31, 0x42, 0x07, 0xd5, 0x66, 0x10, 0x9c] + [UInt8](repeating: 0, count: 8)
        + [0, 0x20, 34, 0x08] + [0, 0, 0, 0] + [0, 0, 0, 28]

    static let tunnels: [[UInt8]] = {
        let wireGuardInitiation: [UInt8] = [1, 0, 0, 0, 0x2e, 0x91, 0x05, 0x7c] + (8..<148).map { UInt8(truncatingIfNeeded: $0 &* 37) }
        let wireGuardKeepalive: [UInt8] = [4, 0, 0, 0, 0x71, 0x0a, 0x3b, 0x02] + [UInt8](repeating: 0, count: 8) + [UInt8](repeating: 0xc4, count: 16)
        let socks5 = [5, 1, 0] + [5, 1, 0, 3, 11] + Array("example.com".utf8) + [0, 80]
        let socks4a = [4, 1, 0, 80, 0, 0, 0, 1] + Array("user".utf8) + [0] + Array("example.com".utf8) + [0]
        let connect = Array("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".utf8)
        let tailscale = Array("TS\u{1F4AC}".utf8) + (0..<56).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ 3) }
        let control: [UInt8] = [0x20] + Array(openVPNHardReset[1..<9]) + [0, 0, 0, 0, 2]
        let ssh = Array("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n".utf8)
        return [
            [tunnelFlags(tcp: false, port: 51820), 0] + wireGuardInitiation,
            [tunnelFlags(tcp: false, port: 51820), 0] + wireGuardKeepalive,
            [tunnelFlags(tcp: false, port: 1194), 0] + openVPNHardReset,
            // Two control packets of one session (a capture that starts late).
            [tunnelFlags(tcp: false, port: 1194), UInt8(control.count)] + control + [0] + control,
            [tunnelFlags(tcp: true, port: 1194)] + be16(openVPNHardReset.count) + openVPNHardReset,
            [tunnelFlags(tcp: false, port: 500), 0] + ikeSAInit,
            [tunnelFlags(tcp: false, port: 4500), 0] + [0, 0, 0, 0] + ikeSAInit,
            [tunnelFlags(tcp: false, port: 443), 0] + tailscale,
            [tunnelFlags(tcp: true, port: 1080)] + socks5,
            [tunnelFlags(tcp: true, port: 1080)] + socks4a,
            [tunnelFlags(tcp: true, port: 8080)] + connect,
            [tunnelFlags(tcp: true, port: 853), 22, 3, 1, 0, 5, 1, 0, 0, 1, 0],
            [tunnelFlags(tcp: true, port: 22)] + ssh,
            [tunnelFlags(tcp: true, port: 443)] + ssh,
            [tunnelFlags(tcp: true, port: 853)] + ssh,
            [tunnelFlags(tcp: true, port: 53)] + ssh,
            [tunnelFlags(tcp: false, port: 853), 0, 0xC0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0],
        ]
    }()

    /// A CHLO message: the tag, the number of entries (little-endian), padding, then each
    /// tag with the little-endian offset where its value ends, then the values.
    static func chlo(_ tags: [(String, [UInt8])]) -> [UInt8] {
        var out = Array("CHLO".utf8) + [UInt8(tags.count), 0, 0, 0]
        var end = 0
        var values: [UInt8] = []
        for (tag, value) in tags {
            end += value.count
            out += Array(tag.utf8) + [UInt8(end & 0xFF), UInt8(end >> 8 & 0xFF), 0, 0]
            values += value
        }
        return out + values
    }

    /// A CRYPTO frame of gQUIC v48 and later (type 0x08, offset 0, a two-byte length).
    static func cryptoFrame(_ data: [UInt8]) -> [UInt8] {
        [0x08, 0x00, 0x40 | UInt8((data.count >> 8) & 0x3F), UInt8(data.count & 0xFF)] + data
    }

    static let googleQUIC: [[UInt8]] = {
        let message = chlo([("PAD\u{0}", [UInt8](repeating: 0x2d, count: 16)), ("SNI\u{0}", Array("WWW.Example.com".utf8)),
                            ("VER\u{0}", Array("Q046".utf8))])
        // STREAM of stream 1 with a data length (big-endian from Q039, little-endian before).
        let streamBigEndian: [UInt8] = [0xA0, 0x01] + be16(message.count) + message
        let streamLittleEndian: [UInt8] = [0xA0, 0x01, UInt8(message.count & 0xFF), UInt8(message.count >> 8)] + message
        let q046: [UInt8] = [0xC3] + Array("Q046".utf8) + [0x50, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 1] + [UInt8](repeating: 0xAA, count: 12)
        return [
            [1] + streamBigEndian,
            [2, 19] + streamBigEndian,  // Q043
            [2, 11] + streamLittleEndian,  // Q035
            [2, 3, 0] + streamLittleEndian,  // Q027: a private flags byte first
            [0, 0, 8, 0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08, 3] + cryptoFrame(message),  // Q050
            [4, 0, 8, 0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08, 0] + cryptoFrame(message),  // Q050, two datagrams
            [3, 0] + q046 + streamBigEndian,
        ]
    }()

    /// A DNS name in wire form.
    static func name(_ text: String) -> [UInt8] {
        text.split(separator: ".").flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) } + [0]
    }

    static func record(owner: [UInt8], type: Int, data: [UInt8]) -> [UInt8] {
        owner + be16(type) + be16(1) + [0, 0, 1, 0x2c] + be16(data.count) + data
    }

    static let dnsMessages: [[UInt8]] = {
        let question = name("www.example.com") + be16(65) + be16(1)
        let echConfigList: [UInt8] = [0, 8, 0xfe, 0x0d, 0, 4, 1, 2, 3, 4]
        func parameter(_ key: Int, _ value: [UInt8]) -> [UInt8] { be16(key) + be16(value.count) + value }
        let first = be16(1) + [0] + parameter(1, [2] + Array("h2".utf8)) + parameter(5, echConfigList) + parameter(6, [UInt8](repeating: 0, count: 16))
        let second = be16(2) + name("backend.example.net") + parameter(0, be16(1) + be16(5)) + parameter(5, echConfigList)
        let opt: [UInt8] = [0] + be16(41) + be16(1232) + [0, 0, 0, 0] + be16(0)
        var withOPT = be16(0xBEEF) + be16(0x8180) + be16(1) + be16(2) + be16(0) + be16(1) + question
        withOPT += record(owner: [0xC0, 0x0C], type: 65, data: first) + record(owner: name("svc.example.com"), type: 65, data: second) + opt
        var withoutOPT = be16(0xBEF0) + be16(0x8180) + be16(1) + be16(1) + be16(0) + be16(0) + question
        withoutOPT += record(owner: [0xC0, 0x0C], type: 65, data: first)
        // dnsmasq 2.90's answer to `dig www.ech.test HTTPS` with Cloudflare's ECHConfigList.
        let dnsmasq = "b4ea85800001000100000001037777770365636804746573740000410001c00c004100010000001e005500010000010003026832000500470045fe0d0041"
            + "f200200020c221a5373fabf3ebaf09da845166da6d484c07fb5217f3fdd3380ac4c74b512c0004000100010012636c6f7564666c6172652d6563682e63"
            + "6f6d000000002904d0000000000000"
        let digits = Array(dnsmasq.utf8)
        let dnsmasqAnswer = stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<($0 + 2)], as: UTF8.self), radix: 16)! }
        let canary = be16(0x1234) + be16(0x0100) + be16(1) + be16(0) + be16(0) + be16(1) + name("use-application-dns.net") + be16(1) + be16(1) + opt
        let aaaa = be16(0x4321) + be16(0x0100) + be16(1) + be16(0) + be16(0) + be16(0) + name("www.google.com") + be16(28) + be16(1)
        return [withOPT, withoutOPT, dnsmasqAnswer, canary, aaaa]
    }()
}

enum DeltaSeeds {
    /// Deltas as the fuzz input takes them (base length / 16, result size, the frame):
    /// made by the code filterctl uses, from a base of repeated text to an edit of it.
    static func make() -> [[UInt8]] {
        var seeds: [[UInt8]] = []
        for (baseText, targetText) in [("hallpass delta seed ", "hallpass delta seed, changed "), ("abcdefgh", "abcdefgh")] {
            let base = Array(String(repeating: baseText, count: 40).utf8.prefix(16 * 40))
            let target = Array(String(repeating: targetText, count: 20).utf8.prefix(60_000))
            let basePath = Scratch.write(base, to: "seed/base")
            let targetPath = Scratch.write(target, to: "seed/target")
            guard let patch = try? ZstdPatch.make(base: basePath, target: targetPath) else { continue }
            seeds.append([UInt8(base.count / 16), UInt8(target.count >> 8), UInt8(target.count & 0xFF)] + patch)
        }
        return seeds
    }
}
