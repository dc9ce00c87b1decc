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
        // Room for three records a half: the fourth starts the other half, the seventh empties the first.
        let size = try #require(ConnectionRecords.size(of: Self.report(4)))
        let records = ConnectionRecords(capacity: 2 * 3 * size)
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
        let small = ConnectionRecords(capacity: 2 * (size + 1))
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
        let tiny = ConnectionRecords(capacity: 2 * ConnectionRecords.size(of: Self.report(11))!)
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
        // 48,000 records through 1 MiB: only what fits is kept, the newest.
        let smallest = try #require(ConnectionRecords.size(of: Self.report(1000, host: "h0.allowed.example", kind: "http")))
        #expect(records.count > 0 && records.count * smallest <= 1 << 20)
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

    @Test func aRecordTakesAboutHalfItsLineAndKeepsEveryFieldJudgingNeeds() throws {
        // Half the space of the lines holds about as many connections (BENCHMARKS.md, Memory).
        for report in [
            Self.report(40_000, host: "www.example.com"), Self.report(1, host: nil, kind: "quic"),
            Self.report(2, host: "h12.allowed.test", kind: "http", source: "2001:db8::5", path: "/"),
        ] {
            let line = Self.lines([report]).bytes.count
            let size = try #require(ConnectionRecords.size(of: report))
            // An IPv6 address takes 16 bytes, often more than its text.
            #expect(size * 100 <= line * (report.flow.source.isIPv4 ? 55 : 75), "\(size) bytes for a line of \(line)")
            let records = ConnectionRecords(capacity: 4 * size)
            records.record(report)
            let back = try #require(records.records().first)
            #expect(back.flow == report.flow && back.uid == report.uid && back.kind == report.kind && back.host == report.host && back.path == report.path)
        }
        // Blocked flows, DNS queries and what is neither TCP nor UDP are not kept.
        #expect(ConnectionRecords.size(of: Self.report(3, verdict: .drop)) == nil)
        #expect(ConnectionRecords.size(of: Self.report(3, kind: "dns")) == nil)
    }

    @Test func aLargeFileLoadsInPartsAndALineTooLongIsSkipped() throws {
        // 30,000 records: a file of more than 2 MiB, read in parts of 1 MiB whose ends cut lines.
        let records = ConnectionRecords()
        let reports = (0..<30_000).map { Self.report(UInt16(1000 + $0 % 60_000), host: "host\($0).allowed.example", kind: "http", path: "/p\($0)") }
        for start in stride(from: 0, to: reports.count, by: 100) { records.record(contentsOf: Self.lines(Array(reports[start..<(start + 100)]))) }
        // A cut connection's record is not saved.
        let cut = try #require(records.records().first { $0.host == "host7.allowed.example" })
        records.forget(cut)
        let path = temporaryFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try records.save(to: path)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        #expect(size > 2 << 20)
        let again = ConnectionRecords()
        again.load(from: path)
        #expect(again.count == 29_999)
        #expect(Set(again.records().compactMap(\.host)) == Set(reports.compactMap(\.host)).subtracting(["host7.allowed.example"]))
        // A line longer than any report's line is skipped, and the lines after it load.
        var bytes = Array((ConnectionRecords.fileHeader + "\n").utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: 3 << 20) + [0x0A]
        Self.report(9).appendLine(to: &bytes)
        bytes.append(0x0A)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let long = ConnectionRecords()
        long.load(from: path)
        #expect(long.records().map(\.flow.sourcePort) == [9])
    }
}
