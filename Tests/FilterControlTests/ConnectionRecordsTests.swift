@testable import FilterControl
import HallpassIPC
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

    static func lines(_ reports: [FlowReport]) -> FlowReportLines { FlowReportLines(reports) }

    static let everything: PolicyEngines<RuleStore> = {
        let store = try! RuleStore(bytes: try! RuleStoreBuilder().build(version: 1).bytes)
        return PolicyEngines(single: VerdictEngine(rules: store, policy: Policy(blockedCategories: .all, unknown: .block, noName: .block)))
    }()

    @Test func onlyAllowedConnectionsAreKeptAndTheOldestGoFirst() throws {
        // Room for three lines a half: the fourth line starts the other half, the seventh empties the first.
        let line = Self.lines([Self.report(4)]).bytes.count
        let records = ConnectionRecords(capacity: 2 * 3 * line)
        records.record(contentsOf: Self.lines([Self.report(2, verdict: .drop), Self.report(3, kind: "dns"), Self.report(4), Self.report(5), Self.report(6)]))
        #expect(records.count == 3)
        records.record(contentsOf: Self.lines([Self.report(7), Self.report(8), Self.report(9)]))
        #expect(records.count == 6)
        records.record(contentsOf: Self.lines([Self.report(10)]))
        #expect(records.count == 4)
        #expect(Set(records.blocked(by: Self.everything).map(\.flow.sourcePort)) == [7, 8, 9, 10])
        let path = temporaryFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try records.save(to: path)
        let again = ConnectionRecords()
        again.load(from: path)
        #expect(again.count == 4)
        // A smaller space keeps the newest, as it would have.
        let small = ConnectionRecords(capacity: 2 * (line + 1))
        small.load(from: path)
        #expect(Set(small.blocked(by: Self.everything).map(\.flow.sourcePort)) == [9, 10])
    }

    @Test func aConnectionCutIsForgottenAndAReusedOneIsJudgedOnItsNewerRecord() throws {
        let records = ConnectionRecords()
        records.record(contentsOf: Self.lines([Self.report(4, host: "old.example"), Self.report(5), Self.report(4, host: "new.example")]))
        let first = records.blocked(by: Self.everything)
        #expect(first.count == 2)
        #expect(first.first { $0.flow.sourcePort == 4 }?.host == "new.example")
        for record in first where record.flow.sourcePort == 5 { records.forget(record) }
        #expect(records.blocked(by: Self.everything).map(\.flow.sourcePort) == [4])
        // An older record the policy blocks, a newer one of the same ports it allows: not cut.
        let nameless = PolicyEngines(
            single: VerdictEngine(rules: Self.everything.rules, policy: Policy(blockedCategories: .only([]), unknown: .allow, noName: .block)))
        let reused = ConnectionRecords()
        reused.record(contentsOf: Self.lines([Self.report(6, host: nil), Self.report(6, host: "allowed.example"), Self.report(7, host: nil)]))
        #expect(reused.blocked(by: nameless).map(\.flow.sourcePort) == [7])
        // A record given before its half was emptied forgets nothing there now.
        let tiny = ConnectionRecords(capacity: 2 * Self.lines([Self.report(11)]).bytes.count)
        tiny.record(contentsOf: Self.lines([Self.report(11)]))
        let stale = tiny.records()
        tiny.record(contentsOf: Self.lines([Self.report(12), Self.report(13)]))
        stale.forEach(tiny.forget)
        #expect(Set(tiny.records().map(\.flow.sourcePort)) == [12, 13])
    }

    @Test func theSpaceIsTakenOnceAtStartAndRecordingAllocatesNothingThatStays() throws {
        // Written at start: the whole space is resident before the first record.
        let records = ConnectionRecords(capacity: 1 << 20)
        let batch = Self.lines((0..<48).map { Self.report(UInt16(1000 + $0), host: "h\($0).allowed.example", kind: "http") })
        for _ in 0..<1000 { records.record(contentsOf: batch) }
        // 48,000 lines through 1 MiB: only what fits is kept, the newest.
        #expect(records.count > 0 && records.count * batch.bytes.count / 48 <= 1 << 20)
        #expect(records.records().count == 48)
    }

    @Test func recordsSurviveASaveAndLoadWithEveryField() throws {
        let records = ConnectionRecords()
        let kept = [
            Self.report(1, host: nil, kind: "quic"),
            Self.report(40_000, host: "blocked.test", kind: "http", source: "2001:db8::5", path: "/a path/ü?q=1"),
        ]
        records.record(contentsOf: Self.lines(kept))
        let path = temporaryFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try records.save(to: path)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasPrefix(ConnectionRecords.fileHeader + "\n"))
        // Who visited what: for root alone, in a folder everyone may read.
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let again = ConnectionRecords()
        again.load(from: path)
        // Judged again with a policy that blocks everything: both come back, with their facts.
        let back = again.blocked(by: Self.everything).sorted { $0.flow.sourcePort < $1.flow.sourcePort }
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
