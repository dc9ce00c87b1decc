import FilterControl
import Foundation
import Testing
import VerdictCore

@Suite struct AccessRequestStoreTests {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-requests-\(UUID().uuidString)").path
    var path: String { folder + "/requests.json" }

    init() throws { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }

    @Test func requestsSurviveAReopenAndApprovalsBecomeAllowEntries() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let store = AccessRequestStore(path: path)
        let first = try store.submit(host: "games.example", url: "http://games.example/", category: "games", reason: "class", user: "kim", now: now)
        // The same student asking again while it waits: the same request.
        #expect(try store.submit(host: "games.example", url: "http://games.example/x", category: nil, reason: "again", user: "kim", now: now).id == first.id)
        let other = try store.submit(host: "video.example", url: "https://video.example/", category: nil, reason: "film", user: "lee", now: now)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)

        let reopened = AccessRequestStore(path: path)
        #expect(reopened.list().map(\.id) == [first.id, other.id])
        _ = try reopened.decide(first.id, approve: true, for: 3600, now: now)
        _ = try reopened.decide(other.id, approve: false, now: now)
        #expect(reopened.allowEntries(at: now.addingTimeInterval(60)) == [try RulePattern("games.example")])
        #expect(reopened.allowEntries(at: now.addingTimeInterval(3601)).isEmpty)
        #expect(reopened.nextExpiry(after: now) == now.addingTimeInterval(3600))
        #expect(AccessRequestStore(path: path).list().first?.state == .approved)
        do {
            _ = try reopened.decide("nope", approve: true)
            Issue.record("an unknown id was decided")
        } catch {
            #expect(error.code == "requests.unknown")
        }
    }

    @Test func anUnreadableFileIsMovedAsideNotLost() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try "not json".write(toFile: path, atomically: true, encoding: .utf8)
        var messages: [String] = []
        let store = AccessRequestStore(path: path) { messages.append($0) }
        #expect(store.list().isEmpty)
        #expect(messages.count == 1 && messages[0].contains("moved to"))
        let aside = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasPrefix("requests.json.unreadable-") }
        #expect(aside.count == 1)
        #expect(try String(contentsOfFile: folder + "/" + aside[0], encoding: .utf8) == "not json")
    }

    func code(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return (error as? AccessRequestStore.Failure)?.code ?? "\(error)"
        }
    }

    @Test func eachStudentHasAPendingAndADailyLimit() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let store = AccessRequestStore(path: path)
        let limits = AccessRequestStore.Limits(pending: 2, perDay: 3)
        var now = Date(timeIntervalSince1970: 1_800_000_000)
        let first = try store.submit(host: "a.example", url: "", category: nil, reason: "r", user: "kim", limits: limits, now: now)
        _ = try store.submit(host: "b.example", url: "", category: nil, reason: "r", user: "kim", limits: limits, now: now)
        #expect(code { _ = try store.submit(host: "c.example", url: "", category: nil, reason: "r", user: "kim", limits: limits, now: now) } == "requests.user-pending")
        // Asking again for a host that waits is no new request, and someone else has their own limit.
        #expect(try store.submit(host: "a.example", url: "", category: nil, reason: "r", user: "kim", limits: limits, now: now).id == first.id)
        _ = try store.submit(host: "c.example", url: "", category: nil, reason: "r", user: "lee", limits: limits, now: now)
        // A decision frees a pending place, but the day counts every request made.
        _ = try store.decide(first.id, approve: false, now: now)
        _ = try store.submit(host: "c.example", url: "", category: nil, reason: "r", user: "kim", limits: limits, now: now)
        _ = try store.decide(store.list().first { $0.host == "c.example" && $0.user == "kim" }!.id, approve: false, now: now)
        #expect(code { _ = try store.submit(host: "d.example", url: "", category: nil, reason: "r", user: "kim", limits: limits, now: now) } == "requests.user-daily")
        now = now.addingTimeInterval(86_401)
        _ = try store.submit(host: "d.example", url: "", category: nil, reason: "r", user: "kim", limits: limits, now: now)
        // The defaults: 5 waiting at once.
        let defaults = AccessRequestStore(path: folder + "/defaults.json")
        for index in 0..<5 { _ = try defaults.submit(host: "h\(index).example", url: "", category: nil, reason: "r", user: "ada") }
        #expect(code { _ = try defaults.submit(host: "h5.example", url: "", category: nil, reason: "r", user: "ada") } == "requests.user-pending")
    }

    @Test func requestsWaitUnsentUntilTheSchoolHasThem() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let store = AccessRequestStore(path: path)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let first = try store.submit(host: "a.example", url: "", category: nil, reason: "r", user: "kim", group: "year9", now: now)
        let second = try store.submit(host: "b.example", url: "", category: nil, reason: "r", user: "kim", now: now.addingTimeInterval(1))
        #expect(store.unsent().map(\.id) == [first.id, second.id])
        #expect(store.unsent().first?.group == "year9")
        try store.markSent([first.id], at: now)
        #expect(AccessRequestStore(path: path).unsent().map(\.id) == [second.id], "kept in the file")
    }

    @Test func theSchoolsDecisionsReachTheRequests() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let store = AccessRequestStore(path: path)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let approved = try store.submit(host: "a.example", url: "", category: nil, reason: "r", user: "kim", now: now)
        let denied = try store.submit(host: "b.example", url: "", category: nil, reason: "r", user: "kim", now: now)
        #expect(store.latest(host: "a.example", user: "kim", now: now)?.state == .pending)
        #expect(store.latest(host: "a.example", user: "lee", now: now) == nil)
        let changed = try store.applyDecisions(
            [
                .init(id: approved.id, state: .approved, message: "ok for today", until: now.addingTimeInterval(600)),
                .init(id: denied.id, state: .denied, message: "not for class"), .init(id: "unknown", state: .approved),
            ], now: now)
        #expect(changed.map(\.id) == [approved.id, denied.id])
        #expect(try store.applyDecisions([.init(id: denied.id, state: .denied, message: "not for class")], now: now).isEmpty, "the same again")
        let reopened = AccessRequestStore(path: path)
        #expect(reopened.latest(host: "a.example", user: "kim", now: now)?.state == .approved)
        #expect(reopened.latest(host: "a.example", user: "kim", now: now)?.message == "ok for today")
        #expect(reopened.latest(host: "a.example", user: "kim", now: now.addingTimeInterval(601)) == nil, "an approval that ended")
        #expect(reopened.latest(host: "b.example", user: "kim", now: now)?.message == "not for class")
        #expect(reopened.latest(host: "b.example", user: "kim", now: now.addingTimeInterval(86_401)) == nil, "a denial of yesterday")
        // The live item opens the site for the teacher's audience: no allow entry for everyone here.
        #expect(reopened.allowEntries(at: now).isEmpty)
    }

    @Test func aFileWrittenBeforeTheSchoolsFieldsStillReads() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let old = """
            [{"createdAt":"2027-01-15T08:00:00Z","host":"a.example","id":"0badc0de","reason":"","state":"pending","url":"http://a.example/","user":"kim"}]
            """
        try old.write(toFile: path, atomically: true, encoding: .utf8)
        let store = AccessRequestStore(path: path)
        #expect(store.list().map(\.id) == ["0badc0de"])
        #expect(store.unsent().map(\.id) == ["0badc0de"])
    }
}
