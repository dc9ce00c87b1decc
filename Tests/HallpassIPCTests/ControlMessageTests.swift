@testable import HallpassIPC
import HallpassTestSupport
import Testing
import VerdictCore

@Suite struct ControlMessageTests {
    @Test func everyMessageSurvivesTheRoundTrip() throws {
        let commands: [ControlCommand] = [
            .useRules(store: "/var/lib/hallpass/versions/7/rules.hpstore", policy: "/run/hallpass/policy with space"),
            .usePolicy("/run/hallpass/policy"),
            .userPlacement(uid: 1000, audience: .group("year7")),
            .answer(host: try HostName("casino.example"), categories: ["gambling", "games"], timeToLive: 3600),
            .answer(host: try HostName("nobody.example"), categories: [], timeToLive: 60),
            .noAnswer(host: try HostName("xn--bcher-kva.example")),
            .ping(42),
            .interception(InterceptionHandover(key: Array(0..<32), certificate: [0x30, 0x82, 0x01, 0x00, 0xFF], untrustedKeys: [Array(repeating: 0xAB, count: 32)])),
            .interception(InterceptionHandover(key: Array(repeating: 0, count: 32), certificate: [1], untrustedKeys: [])),
            // A field ending in a carriage return before the next line feed (found by the control fuzzer).
            .answer(host: try HostName("e.example"), categories: ["a\r", "b"], timeToLive: 3),
        ]
        for command in commands {
            #expect(try ControlCommand(decoding: command.encoded) == command)
            // A command is no event: the side that gets it from the wrong end refuses it.
            #expect(throws: ControlMessageError.self) { try DataEvent(decoding: command.encoded) }
        }
        var counters = FilterDataCounters()
        // Every field a different value: a field read into another's place would show.
        for (index, entry) in FilterDataCounters.layout.enumerated() { counters[keyPath: entry.field] = UInt64(index) * 1_000 + 7 }
        let events: [DataEvent] = [
            .hello(pid: 1234, rulesVersion: 7),
            .ask(NeedRulesQuestion(host: try HostName("new.example"), kind: "tls", destination: "2001:db8::1", port: 443, uid: 1000)),
            .ask(NeedRulesQuestion(host: try HostName("dns.example"), kind: "dns", destination: "10.0.0.2", port: 53, uid: nil)),
            .rulesLoaded(version: 8),
            .rulesRefused(code: "store.checksum", message: "the store's checksum does not match"),
            .pong(42, counters: counters),
            .pong(43, counters: FilterDataCounters()),
            .askUser(20_001),
            .reports(FlowReportLines()),
            .reports(FlowReportLines([
                FlowReport(flow: FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.1")!, sourcePort: 40_000, destination: IPAddress("203.0.113.9")!, destinationPort: 443),
                           uid: 1000, kind: "tls", host: "www.example.com", path: nil, verdict: .allow, reason: Reason(source: .unknownHost)),
                FlowReport(flow: FlowKey(protocolNumber: 17, source: IPAddress("2001:db8::1")!, sourcePort: 0, destination: IPAddress("::ffff:192.0.2.1")!, destinationPort: 65_535),
                           uid: nil, kind: "quic", host: nil, path: nil, verdict: .drop, reason: Reason(source: .bypass, category: "unreadableQUIC", rule: "quic")),
                FlowReport(flow: FlowKey(protocolNumber: 6, source: IPAddress("0.0.0.0")!, sourcePort: 1, destination: IPAddress("255.255.255.255")!, destinationPort: 80),
                           uid: 4_294_967_295, kind: "http", host: "blocked.test", path: "/a path/ü?q=1", verdict: .drop, reason: Reason(source: .category, category: "adult", rule: "blocked.test")),
                // An inspected request's, with its search terms.
                FlowReport(flow: FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.1")!, sourcePort: 40_001, destination: IPAddress("203.0.113.9")!, destinationPort: 443),
                           uid: 1000, kind: "https", host: "www.google.com", path: "/search?q=cute+cats", verdict: .allow, reason: Reason(source: .unknownHost),
                           searchTerm: "cute cats | kittens"),
            ])),
        ]
        for event in events {
            #expect(try DataEvent(decoding: event.encoded) == event)
            #expect(throws: ControlMessageError.self) { try ControlCommand(decoding: event.encoded) }
        }
    }

    @Test func aPongCarriesExactlyTheCountersFields() throws {
        var counters = FilterDataCounters()
        counters.dnsRewrites = 5
        counters.rulesVersion = 9
        let text = String(decoding: DataEvent.pong(1, counters: counters).encoded, as: UTF8.self)
        #expect(text.contains("\ndnsRewrites=5\n") && text.contains("\nrulesVersion=9\n"))
        var fields = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(fields.count == 2 + FilterDataCounters.layout.count)
        // A counter renamed on one side, one missing, one more, or one out of place does not decode.
        var renamed = fields
        renamed[2] = "rulesVersio=9"
        var missing = fields
        missing.removeLast()
        var extra = fields
        extra.append("newCounter=1")
        fields.swapAt(2, 3)
        for bad in [renamed, missing, extra, fields] {
            #expect(throws: ControlMessageError.self) { try DataEvent(decoding: Array(bad.joined(separator: "\n").utf8)) }
        }
    }

    @Test func malformedMessagesAreRefusedWithAReason() throws {
        let bad: [String] = [
            "", "hello", "hello\n1", "hello\nx\n1", "rules\nrelative\n/abs", "rules\n/a", "answer\nnot a name\n60",
            "answer\nok.example\n-1", "answer\nok.example", "ping\n", "ask\nnew.example\ntls\n1.2.3.4\n99999\n-",
            "pong\n1\nnovalue", "pong\n1\nx=-3", "pong\n1", "whatever\n1", "noanswer\n", "refused\nonly-code",
            "report\n", "report\n6\t10.0.0.1\t1\t10.0.0.2\t2\t-\ttls\t-\tallow\tunknown\t-\t-",  // 12 fields
            "report\n6\t10.0.0.1\t1\t10.0.0.2\t2\t-\ttls\t-\tallow\tunknown\t-\t-\t-\t-\t-",  // 15 fields
            // The interception CA: a key of 32 bytes, a certificate, hashes of 32 bytes, all in hex.
            "intercept", "intercept\n" + String(repeating: "00", count: 32), "intercept\n" + String(repeating: "00", count: 31) + "\n01",
            "intercept\n" + String(repeating: "0g", count: 32) + "\n01", "intercept\n" + String(repeating: "00", count: 32) + "\n",
            "intercept\n" + String(repeating: "00", count: 32) + "\n012", "intercept\n" + String(repeating: "00", count: 32) + "\n01\nabcd",
            "intercept\n" + String(repeating: "00", count: 32) + "\n01" + String(repeating: "\n" + String(repeating: "ab", count: 32), count: 9),
            "report\n256\t10.0.0.1\t1\t10.0.0.2\t2\t-\ttls\t-\tallow\tunknown\t-\t-\t-",
            "report\n6\t10.0.0.1\t65536\t10.0.0.2\t2\t-\ttls\t-\tallow\tunknown\t-\t-\t-",
            "report\n6\t10.0.0.256\t1\t10.0.0.2\t2\t-\ttls\t-\tallow\tunknown\t-\t-\t-",
            "report\n6\t10.0.0.1\t1\t10.0.0.2\t2\t-1\ttls\t-\tallow\tunknown\t-\t-\t-",
            "report\n6\t10.0.0.1\t1\t10.0.0.2\t2\t-\ttls\t-\tmaybe\tunknown\t-\t-\t-",
            "report\n6\t10.0.0.1\t\t10.0.0.2\t2\t-\ttls\t-\tallow\tunknown\t-\t-\t-",
            "reports\n", "report\n", "report6\t10.0.0.1\t1\t10.0.0.2\t2\t-\ttls\t-\tallow\tunknown\t-\t-\t-",
            "report" + String(repeating: "\n6\t0.0.0.0\t1\t0.0.0.0\t2\t-\tx\t-\tallow\tunknown\t-\t-\t-", count: FlowReportLines.maximumPerMessage + 1),
        ]
        for text in bad {
            #expect(throws: ControlMessageError.self, "\(text.debugDescription)") { try ControlCommand(decoding: Array(text.utf8)) }
            #expect(throws: ControlMessageError.self, "\(text.debugDescription)") { try DataEvent(decoding: Array(text.utf8)) }
        }
        #expect(throws: ControlMessageError.self) { try ControlCommand(decoding: [0xFF, 0xFE]) }
        #expect(throws: ControlMessageError.self) { try DataEvent(decoding: Array("report".utf8) + [0x0A, 0xFF]) }
        #expect(throws: ControlMessageError.self) {
            try ControlCommand(decoding: Array(("ping\n" + String(repeating: "1", count: controlMessageMaximumSize)).utf8))
        }
        forEachMutation(of: ControlCommand.answer(host: try! HostName("a.example"), categories: ["x"], timeToLive: 5).encoded) { bytes in
            _ = try? ControlCommand(decoding: bytes)
        }
        // Fields with separators or too long: one line, fields of at most 256 bytes cut on a character boundary.
        let odd = FlowReport(flow: FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.1")!, sourcePort: 4, destination: IPAddress("10.0.0.2")!, destinationPort: 80),
                             uid: nil, kind: "http", host: "a.example", path: String(repeating: "é", count: 300), verdict: .drop,
                             reason: Reason(source: .category, category: "bad\r\ncategory\tname", rule: "\n"))
        let oddBytes = DataEvent.reports(FlowReportLines([odd])).encoded
        #expect(oddBytes.filter { $0 == 0x0A }.count == 1 && !oddBytes.contains(0x0D))
        guard case .reports(let decoded) = try DataEvent(decoding: oddBytes) else { Issue.record("not reports"); return }
        #expect(decoded.reports.first?.reason.category == "badcategoryname" && decoded.reports.first?.reason.rule == nil)
        #expect(decoded.reports.first?.path == String(repeating: "é", count: 128))
        let report = FlowReport(flow: FlowKey(protocolNumber: 6, source: IPAddress("2001:db8::1")!, sourcePort: 4, destination: IPAddress("10.0.0.2")!, destinationPort: 80),
                                uid: 7, kind: "http", host: "a.example", path: "/x", verdict: .drop, reason: Reason(source: .category, category: "c", rule: "r"))
        forEachMutation(of: DataEvent.reports(FlowReportLines([report, report])).encoded) { bytes in
            _ = try? DataEvent(decoding: bytes)
        }
    }

    @Test func aSearchTermTravelsOnlyWhenThereIsOne() throws {
        let flow = FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.1")!, sourcePort: 4, destination: IPAddress("10.0.0.2")!, destinationPort: 443)
        var report = FlowReport(flow: flow, uid: 7, kind: "https", host: "www.google.com", path: "/search?q=a", verdict: .allow, reason: Reason(source: .unknownHost))
        // Without one the line is filter-data's 13 fields, as it always was.
        var plain: [UInt8] = []
        report.appendLine(to: &plain)
        #expect(plain.filter { $0 == 0x09 }.count == 12)
        #expect(FlowReport(line: plain[...])?.searchTerm == nil)
        // With one: a 14th field, its separators dropped and its length bounded like every field's.
        report.searchTerm = "tab\there\nand " + String(repeating: "x", count: 300)
        var line: [UInt8] = []
        report.appendLine(to: &line)
        #expect(line.filter { $0 == 0x09 }.count == 13)
        let read = try #require(FlowReport(line: line[...]))
        #expect(read.searchTerm == "tabhereand " + String(repeating: "x", count: 245))
        #expect(read.path == "/search?q=a" && read.kind == "https")
    }

    @Test func reportFieldsAreFoundOnALineInsideItsBuffer() throws {
        // A line that does not start at index 0 (as in a batch), with empty fields first, inside and last.
        let buffer = Array("xx\n6\t10.0.0.1\t1\t10.0.0.2\t2\t-\ttls\t\tallow\tunknown\t\tr\t".utf8)
        let fields = try #require(FlowReport.Fields(line: buffer[3...]))
        #expect(Array(fields[0]) == Array("6".utf8) && Array(fields[3]) == Array("10.0.0.2".utf8))
        #expect(fields[7].isEmpty && fields[10].isEmpty && fields[12].isEmpty)
        #expect(Array(fields[11]) == Array("r".utf8))
        #expect(fields.verdict == .allow && fields.reasonSource == .unknownHost && Array(fields.kind) == Array("tls".utf8))
        #expect(fields.protocolNumber == 6)
        #expect(!fields.hasSearchTerm)
        // Twelve tabs, or thirteen with a search term: more or fewer is no report line, and neither is a line no report can be as long as.
        let withTerm = try #require(FlowReport.Fields(line: (buffer + Array("\tcute cats".utf8))[3...]))
        #expect(withTerm.hasSearchTerm && Array(withTerm[13]) == Array("cute cats".utf8) && withTerm[12].isEmpty)
        #expect(FlowReport.Fields(line: (buffer + [0x09, 0x41, 0x09])[3...]) == nil)
        #expect(FlowReport.Fields(line: buffer[3..<(buffer.count - 1)]) == nil)
        #expect(FlowReport.Fields(line: (buffer + [UInt8](repeating: 0x41, count: 70_000))[3...]) == nil)
    }

    @Test func theChannelCarriesMessagesAndSeesTheEnd() throws {
        var (left, right): (ControlEnd?, DataEnd?) = try ControlChannelPair.make()
        #expect(try right!.receive() == nil)
        try left!.send(.ping(1))
        try left!.send(.ping(2))
        #expect(right!.wait(timeoutMilliseconds: 1000))
        #expect(try right!.receive() == .ping(1))
        #expect(try right!.receive() == .ping(2))
        #expect(try right!.receive() == nil)
        left = nil  // closes its end
        #expect(throws: ControlChannelFailure.closed) { try right!.receive() }
        right = nil
    }
}
