import Foundation
@testable import SchoolServer
import Testing

/// The console's policy form written into a policy file: only the form's
/// keys change, every other key and the order stay, and the result reads as
/// a school policy.
@Suite struct PolicyFormEditTests {
    static let policy = """
        timezone: Europe/London
        groups:
          staff: { unixGroups: [staff] }
          year7: { unixGroups: [year7] }
          students: { uids: ["10000-19999"] }
        schedules:
          lessons: { days: [mon, tue], times: ["08:40-12:10"] }
        policy:
          block: [adult, gambling]
          unknown: allow
          groups:
            staff:
              block: [adult]
              exam: exempt
            year7:
              unknown: block
              during:
                lessons: { block: [adult, games] }
        exam:
          allow: [exams.example]

        """

    static func changed(_ body: (inout PolicyFormValues) -> Void) throws -> String {
        var values = try PolicyFormEdit.read(yaml: policy).values
        body(&values)
        return try PolicyFormEdit.apply(values, to: policy)
    }

    @Test func readsTheKeysOfEachLevel() throws {
        let (values, named) = try PolicyFormEdit.read(yaml: Self.policy)
        #expect(values.topLevel == PolicyLevelKeys(block: .only(["adult", "gambling"]), unknown: "allow", safeSearch: nil))
        #expect(values.groups.map(\.name) == ["staff", "year7", "students"])
        #expect(values.groups[0].keys == PolicyLevelKeys(block: .only(["adult"])))
        #expect(values.groups[1].keys == PolicyLevelKeys(unknown: "block"))
        #expect(values.groups[2].keys == PolicyLevelKeys())
        #expect(named == ["adult", "gambling", "games"])
    }

    @Test func aGroupsBlockListChangesAndNothingElse() throws {
        let yaml = try Self.changed { $0.groups[0].keys.block = .only(["adult", "games"]) }
        #expect(yaml.contains("    staff:\n      block: [adult, games]\n      exam: exempt\n"))
        // Every other key kept, in its order.
        let keys = yaml.split(separator: "\n").filter { !$0.hasPrefix(" ") }.map { $0.prefix { $0 != ":" } }
        #expect(keys == ["timezone", "groups", "schedules", "policy", "exam"])
        #expect(yaml.contains("  block: [adult, gambling]\n  unknown: allow\n"))
        // Lists and mappings keep their style, `[a, b]` or one a line; quoted text stays quoted.
        #expect(yaml.contains("        lessons: {block: [adult, games]}\n"), "\(yaml)")
        #expect(yaml.contains(#"  students: {uids: ["10000-19999"]}"#))
        #expect(yaml.contains("exam:\n  allow: [exams.example]\n"))
        // Machines would take it, and the form reads the change back.
        try PolicyChecks.policy(yaml)
        #expect(try PolicyFormEdit.read(yaml: yaml).values.groups[0].keys == PolicyLevelKeys(block: .only(["adult", "games"])))
    }

    @Test func unchangedKeysLeaveTheTextAsItWas() throws {
        #expect(try Self.changed { _ in } == Self.policy)
        // The top level's unset SafeSearch posted as no boxes ticked is no change.
        #expect(try Self.changed { $0.topLevel.safeSearch = [] } == Self.policy)
    }

    @Test func allUnknownAndSafeSearch() throws {
        let yaml = try Self.changed {
            $0.topLevel.block = .all
            $0.topLevel.safeSearch = ["google", "youtube-strict"]
            $0.groups[1].keys.unknown = "ask"
            $0.groups[2].keys.unknown = "block"
            $0.groups[2].keys.safeSearch = []
            $0.groups[0].keys.block = nil
        }
        #expect(yaml.contains("policy:\n  block: all\n  unknown: allow\n"))
        #expect(yaml.contains("  safeSearch: [google, youtube-strict]\n"))
        #expect(yaml.contains("    year7:\n      unknown: ask\n"))
        #expect(yaml.contains("    staff:\n      exam: exempt\n"))
        #expect(yaml.contains("    students:\n      unknown: block\n      safeSearch: none\n"))
        try PolicyChecks.policy(yaml)
        let read = try PolicyFormEdit.read(yaml: yaml).values
        #expect(read.topLevel == PolicyLevelKeys(block: .all, unknown: "allow", safeSearch: ["google", "youtube-strict"]))
        #expect(read.groups.map(\.keys) == [
            PolicyLevelKeys(), PolicyLevelKeys(unknown: "ask"), PolicyLevelKeys(unknown: "block", safeSearch: []),
        ])
    }

    @Test func anEmptyFileGetsAPolicyKey() throws {
        var values = try PolicyFormEdit.read(yaml: nil).values
        #expect(values.groups.isEmpty)
        values.topLevel.block = .only(["adult"])
        #expect(try PolicyFormEdit.apply(values, to: nil) == "policy:\n  block: [adult]\n")
    }

    @Test func aGroupNoLongerInTheFileIsRefused() throws {
        var values = try PolicyFormEdit.read(yaml: Self.policy).values
        values.groups.append(("gone", PolicyLevelKeys(unknown: "block")))
        #expect(throws: PublishingError.self) { try PolicyFormEdit.apply(values, to: Self.policy) }
    }

    @Test func theFormsFieldsAreReadPerLevel() throws {
        let current = try PolicyFormEdit.read(yaml: Self.policy).values
        let form = ConsoleForm(
            "policy.shown=1&policy.block=adult&policy.unknown=block"
                + "&policy.groups.year7.shown=1&policy.groups.year7.blockFrom=own&policy.groups.year7.block=all&policy.groups.year7.block=games"
                + "&policy.groups.year7.safeSearchFrom=own&policy.groups.year7.safeSearch=bing")!
        let values = PolicyForm.values(form, current: current)
        #expect(values.topLevel == PolicyLevelKeys(block: .only(["adult"]), unknown: "block", safeSearch: []))
        #expect(values.groups[1].keys == PolicyLevelKeys(block: .all, unknown: nil, safeSearch: ["bing"]))
        // A level not posted keeps its keys.
        #expect(values.groups[0].keys == current.groups[0].keys)
    }
}
