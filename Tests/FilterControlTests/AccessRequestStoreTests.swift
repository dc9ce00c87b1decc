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
        #expect(try store.submit(host: "games.example", url: "http://games.example/x", category: nil, reason: "", user: "kim", now: now).id == first.id)
        let other = try store.submit(host: "video.example", url: "https://video.example/", category: nil, reason: "", user: "lee", now: now)
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
}
