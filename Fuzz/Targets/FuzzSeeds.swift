// Seed inputs for each target: packets, streams and payloads taken from the
// shared captures (../shared/testdata), list names from UT1, and the
// encodings the programs themselves write. scripts/fuzz.sh writes them to
// the target's corpus folder before its first run.
import BlockPage
import FilterControl
import FilterData
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
            let messages: [ControlMessage] = [
                .useRules(store: "/var/lib/hallpass/rules/current/rules.hpstore", policy: "/run/hallpass/policy"),
                .answer(host: host, categories: ["games", "social"], timeToLive: 3600), .noAnswer(host: host), .ping(7),
                .hello(pid: 1234, rulesVersion: 5), .ask(NeedRulesQuestion(host: host, kind: "tls", destination: "192.0.2.1", port: 443, uid: 1000)),
                .rulesLoaded(version: 6), .rulesRefused(code: "store.corrupt", message: "the file is damaged"),
                .pong(7, counters: [.init("packets", 10), .init("flows", 3)]),
            ]
            seeds = messages.map(\.encoded)
        case .store:
            seeds = [Engines.storeBytes] + captures.stores
        case .manifest:
            let manifest = BundleManifest(version: 20_261_124, issuedAt: 1_700_000_000, expiresAt: 1_800_000_000, files: [
                .init(name: "rules.hpstore", size: 368, sha256: String(repeating: "ab", count: 32)),
                .init(name: "policy.yaml", size: 10, sha256: String(repeating: "0f", count: 32)),
            ])
            seeds = [manifest.encoded]
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
