import FilterControl
import Foundation
import Testing

@Suite struct AuditLogReaderTests {
    @Test func readsRotatedFilesOldestFirstWithFilters() throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/audit.jsonl"
        let now = Date()
        func line(_ host: String, _ user: String, _ action: AuditRecord.Action, _ age: Double) -> String {
            var record = sampleRecord(time: now.addingTimeInterval(-age), user: user)
            record[.host] = host
            record[.action] = action.rawValue
            return String(decoding: AuditFormat.jsonLine(record), as: UTF8.self)
        }
        try (line("old.example", "bob", .block, 7200)).write(toFile: path + ".2", atomically: true, encoding: .utf8)
        try (line("mid.example", "alice", .allow, 3000) + "not a record\n").write(toFile: path + ".1", atomically: true, encoding: .utf8)
        try (line("new.example", "alice", .block, 10) + line("newer.example", "bob", .block, 5)).write(toFile: path, atomically: true, encoding: .utf8)
        var reader = AuditLogReader(path: path)
        var hosts: [String] = []
        try reader.read(.init()) { record, _ in hosts.append(record[.host] ?? "") }
        #expect(hosts == ["old.example", "mid.example", "new.example", "newer.example"])
        #expect(reader.unreadableLines == 1)
        hosts = []
        try reader.read(.init(blockedOnly: true, user: "alice")) { record, _ in hosts.append(record[.host] ?? "") }
        #expect(hosts == ["new.example"])
        hosts = []
        try reader.read(.init(since: now.addingTimeInterval(-3600))) { record, _ in hosts.append(record[.host] ?? "") }
        #expect(hosts == ["mid.example", "new.example", "newer.example"])
        hosts = []
        try reader.read(.init(user: "someone", userPseudonym: "alice")) { record, _ in hosts.append(record[.host] ?? "") }
        #expect(hosts.count == 2, "a pseudonym matches as the name does")
    }

    @Test func followGoesOnAcrossARotation() async throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/audit.jsonl"
        let file = AuditFile(path: path, maxBytes: 1 << 20, keepFiles: 3, retention: 86_400)
        func write(_ host: String) throws {
            var record = sampleRecord(time: Date())
            record[.host] = host
            try file.append(AuditFormat.jsonLine(record), firstTime: Date())
        }
        try write("before.example")
        let seen = Seen()
        // follow blocks its thread between reads: a thread of its own, not the cooperative pool's.
        let stop = Seen()
        let finished = Seen()
        let follower = Thread {
            var reader = AuditLogReader(path: path)
            try? reader.follow(.init(), shouldStop: { seen.count() >= 3 || stop.count() > 0 }) { record, _ in seen.add(record[.host] ?? "") }
            finished.add("finished")
        }
        follower.start()
        #expect(await eventually(within: 60) { seen.count() == 1 })
        try write("appended.example")
        #expect(await eventually(within: 60) { seen.count() == 2 })
        try file.rotate()
        try write("after-rotation.example")
        #expect(await eventually(within: 60) { seen.count() == 3 })
        stop.add("stop")
        #expect(await eventually(within: 60) { finished.count() == 1 })
        #expect(seen.hosts() == ["before.example", "appended.example", "after-rotation.example"])
    }

    final class Seen: @unchecked Sendable {
        private let lock = NSLock()
        private var list: [String] = []
        func add(_ host: String) { lock.withLock { list.append(host) } }
        func count() -> Int { lock.withLock { list.count } }
        func hosts() -> [String] { lock.withLock { list } }
    }

    @Test func topCountsBlockedNamesCategoriesAndUsers() {
        var tally = AuditLogText.Tally()
        for (host, category, user) in [("a.example", "games", "alice"), ("a.example", "games", "bob"), ("b.example", "adult", "alice")] {
            var record = sampleRecord(user: user)
            record[.host] = host
            record[.category] = category
            tally.add(record)
        }
        var allowed = sampleRecord()
        allowed[.action] = "allow"
        tally.add(allowed)
        #expect(tally.blocked == 3 && tally.names == ["a.example": 2, "b.example": 1] && tally.users == ["alice": 2, "bob": 1])
        let table = AuditLogText.table(tally, limit: 5).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(table[0].hasPrefix("3 blocked from "))
        #expect(table[2].hasPrefix("NAME") && table[2].contains("CATEGORY") && table[2].contains("USER"))
        #expect(table[3].hasPrefix("a.example") && table[3].contains("games") && table[3].contains("alice"))
        #expect(table[4].hasPrefix("b.example") && table[4].contains("adult") && table[4].contains("bob"))
        #expect(AuditLogText.line(sampleRecord()).hasSuffix("block  tls    casino.example:443  alice  category gambling (rule casino.example)"))
    }
}

extension FilterctlTests {
    @Test func logAndTopReadTheAuditFile() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/audit.jsonl"
        var allowed = sampleRecord(time: Date(), user: "bob")
        allowed[.action] = "allow"
        allowed[.host] = "wiki.example"
        allowed[.category] = nil
        allowed[.rule] = nil
        allowed[.reason] = "unknown"
        let text = [sampleRecord(time: Date()), allowed].map { String(decoding: AuditFormat.jsonLine($0), as: UTF8.self) }.joined()
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let json = try Filterctl.run(["log", "--file", path, "--blocked", "--json"])
        #expect(json.status == 0, "\(json.stderr)")
        #expect(json.stdout == text.split(separator: "\n")[0] + "\n", "the record's own line, as written")
        let lines = try Filterctl.run(["log", "--file", path, "--user", "bob", "--since", "1h"])
        #expect(lines.status == 0 && lines.stdout.contains("allow  tls    wiki.example:443  bob") && !lines.stdout.contains("casino"))
        let top = try Filterctl.run(["top", "--file", path])
        #expect(top.status == 0 && top.stdout.hasPrefix("1 blocked from ") && top.stdout.contains("casino.example") && !top.stdout.contains("wiki.example"))
        #expect(try Filterctl.run(["log", "--file", folder + "/none.jsonl"]).status == 66)
        #expect(try Filterctl.run(["log", "--file", path, "--since", "yesterday"]).status == 64)
    }
}
