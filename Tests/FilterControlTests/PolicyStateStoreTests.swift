@testable import FilterControl
import Foundation
import Testing
import VerdictCore

@Suite struct PolicyStateStoreTests {
    func folder() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-policy-state-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test func overridesAndExamsSurviveARestartAndEndOnTheirOwn() throws {
        let directory = try folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/" + PolicyStateStore.fileName
        let store = PolicyStateStore(path: path)
        let allow = try store.addOverride(.allow, target: "Games.Example", group: "students", until: 1_000 + 3600, by: "teacher", now: 1_000)
        #expect(allow.target == "games.example", "stored in canonical form")
        let block = try store.addOverride(.block, target: "video.example/watch", group: nil, until: nil, by: nil, now: 1_000)
        try store.startExam(ManualExam(groups: ["year7"], until: 1_000 + 600, startedAt: 1_000))
        #expect(try String(contentsOfFile: path, encoding: .utf8).contains("games.example"))
        #expect((try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) == 0o600)

        let reopened = PolicyStateStore(path: path)
        #expect(reopened.current(now: 1_100) == PolicyState(overrides: [allow, block], exam: ManualExam(groups: ["year7"], until: 1_600, startedAt: 1_000)))
        // The exam ends at its time, the allow override an hour after it was made.
        #expect(reopened.current(now: 1_600).exam == nil)
        #expect(reopened.current(now: 4_600).overrides == [block])
        #expect(PolicyStateStore(path: path).current(now: 4_600).overrides == [block], "what ended is gone from the file too")
        #expect(try reopened.removeOverride(id: block.id))
        #expect(try !reopened.removeOverride(id: block.id))
        #expect(try !reopened.stopExam())
    }

    @Test func badTargetsAndPastEndsAreRefused() throws {
        let directory = try folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = PolicyStateStore(path: directory + "/state.json")
        #expect(throws: PolicyStateStore.Failure.self) { try store.addOverride(.allow, target: "not a name", group: nil, until: nil, by: nil, now: 0) }
        #expect(throws: PolicyStateStore.Failure.self) { try store.addOverride(.allow, target: "a.example", group: nil, until: 10, by: nil, now: 10) }
    }

    @Test func anUnreadableFileIsMovedAsideNotOverwritten() throws {
        let directory = try folder()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/state.json"
        try "{ not json".write(toFile: path, atomically: true, encoding: .utf8)
        var logged: [String] = []
        let store = PolicyStateStore(path: path) { logged.append($0) }
        #expect(store.current(now: 0) == PolicyState())
        #expect(logged.count == 1 && logged[0].contains("moved to"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).contains { $0.hasPrefix("state.json.unreadable-") })
    }
}
