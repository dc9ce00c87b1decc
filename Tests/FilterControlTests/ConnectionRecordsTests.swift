@testable import FilterControl
import FilterData
import Foundation
import SharedStore
import Testing
import VerdictCore

/// The allowed connections filter-control keeps to judge again when the policy changes.
@Suite struct ConnectionRecordsTests {
    static func report(_ port: UInt16, host: String? = "www.example.com", verdict: Verdict = .allow, kind: String = "tls",
                       source: String = "10.0.0.1", path: String? = nil) -> FlowReport {
        FlowReport(flow: FlowKey(protocolNumber: 6, source: IPAddress(source)!, sourcePort: port, destination: IPAddress("203.0.113.9")!, destinationPort: 443),
                   uid: port == 1 ? nil : 1000, kind: kind, host: host, path: path, verdict: verdict, reason: Reason(source: .unknownHost))
    }

    func temporaryFile() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("connections-\(UUID().uuidString)").path
    }

    @Test func onlyAllowedConnectionsAreKeptAndTheOldestGoFirst() throws {
        let records = ConnectionRecords(capacity: 3)
        records.record(contentsOf: [Self.report(1), Self.report(2, verdict: .drop), Self.report(3, kind: "dns"), Self.report(4), Self.report(5), Self.report(6)])
        #expect(records.count == 3)
        let path = temporaryFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        records.save(to: path)
        let again = ConnectionRecords(capacity: 10)
        again.load(from: path)
        #expect(again.count == 3)
        // A smaller store keeps the newest, as it would have.
        let small = ConnectionRecords(capacity: 2)
        small.load(from: path)
        #expect(small.count == 2)
        let store = try RuleStore(bytes: try RuleStoreBuilder().build(version: 1).bytes)
        let everything = PolicyEngines(single: VerdictEngine(rules: store, policy: Policy(blockedCategories: .all, unknown: .block, noName: .block)))
        #expect(Set(small.blocked(by: everything).map(\.flow.sourcePort)) == [5, 6])
    }

    @Test func recordsSurviveASaveAndLoadWithEveryField() throws {
        let records = ConnectionRecords()
        let kept = [
            Self.report(1, host: nil, kind: "quic"),
            Self.report(40_000, host: "blocked.test", kind: "http", source: "2001:db8::5", path: "/a path/ü?q=1"),
        ]
        records.record(contentsOf: kept)
        let path = temporaryFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        records.save(to: path)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasPrefix(ConnectionRecords.fileHeader + "\n"))
        let again = ConnectionRecords()
        again.load(from: path)
        // Judged again with a policy that blocks everything: both come back, with their facts.
        let store = try RuleStore(bytes: try RuleStoreBuilder().build(version: 1).bytes)
        let everything = PolicyEngines(single: VerdictEngine(rules: store, policy: Policy(blockedCategories: .all, unknown: .block, noName: .block)))
        let back = again.blocked(by: everything).sorted { $0.flow.sourcePort < $1.flow.sourcePort }
        #expect(back.map(\.flow) == kept.map(\.flow))
        #expect(back.map(\.host) == [nil, "blocked.test"] && back.map(\.path) == [nil, "/a path/ü?q=1"] && back.map(\.uid) == [nil, 1000])
    }

    @Test func aFileOfAnEarlierVersionOrDamagedLinesLoadWhatTheyCan() throws {
        let path = temporaryFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        // The JSON an earlier filter-control wrote.
        let json = #"[{"proto":6,"source":"10.0.0.1","sourcePort":4,"destination":"10.0.0.2","destinationPort":80,"uid":7,"kind":"http","host":"a.example"}]"#
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        let old = ConnectionRecords()
        old.load(from: path)
        #expect(old.count == 1)
        // A damaged line among good ones is skipped.
        let good = try #require(String(bytes: { var bytes: [UInt8] = []; Self.report(9).appendLine(to: &bytes); return bytes }(), encoding: .utf8))
        try (ConnectionRecords.fileHeader + "\n" + good + "\nnot a record\n" + good.replacingOccurrences(of: "\t9\t", with: "\t10\t") + "\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        let mixed = ConnectionRecords()
        mixed.load(from: path)
        #expect(mixed.count == 2)
        // Nothing there, or nonsense: nothing loaded, nothing thrown.
        try "garbage".write(toFile: path, atomically: true, encoding: .utf8)
        let none = ConnectionRecords()
        none.load(from: path)
        none.load(from: path + ".missing")
        #expect(none.count == 0)
    }
}
