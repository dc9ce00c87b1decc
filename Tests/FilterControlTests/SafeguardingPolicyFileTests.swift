@testable import FilterControl
import Foundation
import HallpassIPC
import Logging
import SharedStore
import Testing
import VerdictCore

/// The policy's `safeguarding:` as machines (and the school's server) read
/// it, every mistake named by key and line; and the allowed flows a machine
/// records for its rules with `log.allowed: none`.
@Suite struct SafeguardingPolicyFileTests {
    static let groups = """
        groups:
          year7: { unixGroups: [year7] }
          sixth: { unixGroups: [sixth] }

        """

    @Test func theDocumentedExampleHasTheShippedRulesAndItsOwn() throws {
        let school = try SchoolPolicy(yaml: SchoolPolicyFileTests.example)
        let safeguarding = school.safeguarding
        #expect(safeguarding.usesDefaults && safeguarding.repeatSeconds == 600)
        #expect(safeguarding.schoolRules.map(\.id) == ["year7-games", "counselling-forum", "bypass-attempts"])
        // bypass-attempts replaces the shipped one; the others follow the shipped rules.
        #expect(safeguarding.rules.count == SafeguardingPolicy.defaultRules.count + 2)
        let bypass = try #require(safeguarding.rules.first { $0.id == "bypass-attempts" })
        #expect(bypass.attempts == .init(count: 3, withinSeconds: 300) && bypass.flows == .blocked)
        let games = try #require(safeguarding.rules.first { $0.id == "year7-games" })
        #expect(games.severity == .advisory && games.categories == ["games"] && games.groups == ["year7"] && games.flows == .any)
        #expect(safeguarding.rules.first { $0.id == "counselling-forum" }?.urls == [try RulePattern("support.lakeside.example/forum/", urlList: true)])
    }

    @Test func withoutTheKeyThePolicyHasTheShippedRules() throws {
        #expect(try SchoolPolicy(yaml: "policy:\n  block: [adult]\n").safeguarding == .shipped)
        #expect(SchoolPolicy().safeguarding == .shipped)
    }

    @Test func everyKeyOfARuleIsRead() throws {
        let school = try SchoolPolicy(
            yaml: Self.groups + """
                safeguarding:
                  defaults: false
                  repeat: 30m
                  rules:
                    - id: all-of-it
                      severity: danger
                      categories: [Drogue, adult]
                      names: [chat.example, "=only.example", "*.below.example"]
                      urls: ["http://forum.example/Self-Harm/", "192.0.2.7/x"]
                      searchTerms: ["kill myself", "don't want to live"]
                      reasons: [bypass, local-deny]
                      flows: allowed
                      groups: [year7, sixth]
                      attempts: { count: 2, within: 1m }
                """)
        let safeguarding = school.safeguarding
        #expect(!safeguarding.usesDefaults && safeguarding.repeatSeconds == 1800 && safeguarding.rules.count == 1)
        let rule = try #require(safeguarding.rules.first)
        #expect(rule.id == "all-of-it" && rule.severity == .danger && rule.flows == .allowed)
        #expect(rule.categories == ["drogue", "adult"], "category names are lower case")
        #expect(rule.names?.map(\.description) == ["chat.example", "=only.example", "*.below.example"])
        #expect(rule.urls?.map(\.description) == ["forum.example/self-harm/", "192.0.2.7/x"], "the scheme left off, as UT1 writes them")
        #expect(rule.searchTerms?.map(\.words) == [["kill", "myself"], ["dont", "want", "to", "live"]])
        #expect(rule.reasons == ["bypass", "local-deny"] && rule.groups == ["year7", "sixth"])
        #expect(rule.attempts == .init(count: 2, withinSeconds: 60))
    }

    @Test(arguments: [
        ("safeguarding:\n  colour: red\n", "safeguarding.colour", 2),
        ("safeguarding:\n  defaults: maybe\n", "safeguarding.defaults", 2),
        ("safeguarding:\n  repeat: 30s\n", "safeguarding.repeat", 2),
        ("safeguarding:\n  repeat: 2d\n", "safeguarding.repeat", 2),
        ("safeguarding:\n  rules: { id: x }\n", "safeguarding.rules", 2),
        ("safeguarding:\n  rules:\n    - severity: danger\n      categories: [adult]\n", "safeguarding.rules[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: Self_Harm, severity: danger, categories: [adult] }\n", "safeguarding.rules[0].id", 3),
        ("safeguarding:\n  rules:\n    - { id: \(String(repeating: "a", count: 41)), severity: danger, categories: [adult] }\n", "safeguarding.rules[0].id", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, categories: [adult] }\n    - { id: a, severity: caution, categories: [drogue] }\n", "safeguarding.rules[1].id", 4),
        ("safeguarding:\n  rules:\n    - { id: a, categories: [adult] }\n", "safeguarding.rules[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: urgent, categories: [adult] }\n", "safeguarding.rules[0].severity", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger }\n", "safeguarding.rules[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, flows: blocked }\n", "safeguarding.rules[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, categories: [] }\n", "safeguarding.rules[0].categories", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, categories: [\"Not a name!\"] }\n", "safeguarding.rules[0].categories[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, names: [example.com/forum] }\n", "safeguarding.rules[0].names[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, names: [10.0.0.0/8] }\n", "safeguarding.rules[0].names[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, names: [\"bad name\"] }\n", "safeguarding.rules[0].names[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, urls: [example.com] }\n", "safeguarding.rules[0].urls[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, searchTerms: [\"?!\"] }\n", "safeguarding.rules[0].searchTerms[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, reasons: [vpn] }\n", "safeguarding.rules[0].reasons[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, categories: [adult], flows: some }\n", "safeguarding.rules[0].flows", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, categories: [adult], groups: [year9] }\n", "safeguarding.rules[0].groups[0]", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, reasons: [bypass], attempts: { count: 1, within: 10m } }\n", "safeguarding.rules[0].attempts.count", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, reasons: [bypass], attempts: { count: 5, within: 25h } }\n", "safeguarding.rules[0].attempts.within", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, reasons: [bypass], attempts: { count: 5 } }\n", "safeguarding.rules[0].attempts", 3),
        ("safeguarding:\n  rules:\n    - { id: a, severity: danger, reasons: [bypass], attempts: { count: 5, within: 1m, over: 2 } }\n", "safeguarding.rules[0].attempts.over", 3),
    ])
    func everyMistakeNamesItsKeyAndLine(text: String, key: String, line: Int) {
        do {
            let school = try SchoolPolicy(yaml: Self.groups + text)
            Issue.record("accepted: \(text) as \(school.safeguarding.schoolRules)")
        } catch {
            #expect(error.key == key, "\(error)")
            // The groups take three lines before the text.
            #expect(error.line == line + 3, "\(error)")
        }
    }

    @Test func theBoundsHold() throws {
        func rules(_ count: Int) -> String {
            "safeguarding:\n  rules:\n" + (0..<count).map { "    - { id: r\($0), severity: advisory, categories: [games] }\n" }.joined()
        }
        #expect(try SchoolPolicy(yaml: rules(200)).safeguarding.schoolRules.count == 200)
        #expect(throws: ConfigurationError.self) { try SchoolPolicy(yaml: rules(201)) }
        func names(_ count: Int) -> String {
            "safeguarding:\n  rules:\n    - id: many\n      severity: caution\n      names: [" + (0..<count).map { "n\($0).example" }.joined(separator: ", ") + "]\n"
        }
        #expect(try SchoolPolicy(yaml: names(1000)).safeguarding.schoolRules.first?.names?.count == 1000)
        do {
            _ = try SchoolPolicy(yaml: names(1001))
            Issue.record("1,001 names accepted")
        } catch {
            #expect(error.key == "safeguarding.rules[0].names" && error.message.contains("1000"), "\(error)")
        }
        let long = "safeguarding:\n  rules:\n    - { id: a, severity: danger, searchTerms: [\"\(String(repeating: "word ", count: 41))\"] }\n"
        do {
            _ = try SchoolPolicy(yaml: long)
            Issue.record("a 205-byte entry accepted")
        } catch {
            #expect(error.key == "safeguarding.rules[0].searchTerms[0]", "\(error)")
        }
    }

    // MARK: The machine's records

    /// filter-control with a school's `policy` in its bundle and an audit file, allowed flows not logged.
    static func build(policy: String, folder: TemporaryFolder) async throws -> FilterControlApplication {
        let factory = BundleFactory()
        try factory.write(version: 1, to: folder.sub("source"), extraFiles: [(BundleManifest.policyFileName, Array(policy.utf8))])
        let configuration = try Configuration(
            yaml: """
                queue:
                  user: nobody
                rules:
                  directory: \(folder.sub("lib"))
                  source: file://\(folder.sub("source"))/
                  trustedKeys: ["\(factory.key.publicKey)"]
                log:
                  file: \(folder.sub("audit.jsonl"))
                  journald: false
                  allowed: none
                notify: false
                """)
        try FileManager.default.createDirectory(atPath: folder.sub("lib"), withIntermediateDirectories: true)
        return try await FilterControlApplication.build(
            configuration: configuration,
            options: Control.Options(
                configPath: folder.sub("hallpass.yaml"), store: nil, runtimeDirectory: folder.sub("run"), dataBinary: folder.sub("none")),
            logger: Logger(label: "test"))
    }

    static func report(_ host: String, category: String?, verdict: Verdict = .allow, kind: String = "tls", path: String? = nil) -> FlowReport {
        FlowReport(
            flow: FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.2")!, sourcePort: 40_000, destination: IPAddress("192.0.2.7")!, destinationPort: 443),
            uid: 1001, kind: kind, host: host, path: path, verdict: verdict,
            reason: Reason(source: category == nil ? .unknownHost : .category, category: category, rule: category == nil ? nil : host))
    }

    @Test func anAllowedFlowTheRulesLookAtIsRecordedWithAllowedNone() async throws {
        let folder = try TemporaryFolder("safeguarding-records")
        let application = try await Self.build(policy: "policy:\n  block: [gambling]\n", folder: folder)
        let control = application.control
        #expect(await control.policy.fromBundle && control.safeguardingForReports.withLock { $0 } == .shipped)
        let audit = try #require(await control.audit)
        let writer = Task { await audit.run() }
        control.record(
            FlowReportLines([
                // A drug-recovery site the school allows: the shipped `drugs` rule looks at it.
                Self.report("recovery.example", category: "drogue"),
                // An allowed game: nothing looks at it.
                Self.report("games.example", category: "games"),
                // A plain-HTTP search for a phrase of `self-harm-search`, and one for a word that only ends like it.
                Self.report("www.google.com", category: nil, kind: "http", path: "/search?q=how+to+kill+myself"),
                Self.report("www.google.com", category: nil, kind: "http", path: "/search?q=skill+myself"),
                // Blocked: recorded as ever.
                Self.report("casino.example", category: "gambling", verdict: .drop),
            ]))
        audit.finish()
        await writer.value
        let written = lines(folder.sub("audit.jsonl"))
        #expect(written.count == 3, "\(written)")
        #expect(written.contains { $0.contains("recovery.example") && $0.contains(#""action":"allow""#) })
        #expect(written.contains { $0.contains("kill+myself") })
        #expect(written.contains { $0.contains("casino.example") && $0.contains(#""action":"block""#) })
        #expect(!written.contains { $0.contains("games.example") || $0.contains("skill+myself") })
        let counters = await audit.counters()
        #expect(counters.skippedAllowed == 2 && counters.written == 3)
    }

    /// The inspection proxy's reports: an allowed HTTPS search the rules look at is recorded with
    /// its URL and search term, one they do not look at is not, and none becomes a connection record.
    @Test func anInspectedSearchTheRulesLookAtIsRecordedWithItsTerm() async throws {
        let folder = try TemporaryFolder("safeguarding-inspected")
        let application = try await Self.build(policy: "policy:\n  block: [gambling]\n", folder: folder)
        let control = application.control
        let audit = try #require(await control.audit)
        let writer = Task { await audit.run() }
        var search = Self.report("www.google.com", category: nil, kind: "https", path: "/search?q=how+to+kill+myself")
        search.searchTerm = "how to kill myself"
        // The term as the proxy read it, not only the URL's: a search the URL alone would not show.
        var captured = Self.report("www.youtube.com", category: nil, kind: "https", path: "/youtubei/v1/search")
        captured.searchTerm = "kill myself"
        control.recordInspected(
            FlowReportLines([search, captured, Self.report("www.google.com", category: nil, kind: "https", path: "/search?q=fractions")]))
        audit.finish()
        await writer.value
        let written = lines(folder.sub("audit.jsonl"))
        #expect(written.count == 2, "\(written)")
        #expect(written.contains { $0.contains(#""url":"https://www.google.com/search?q=how+to+kill+myself","searchTerm":"how to kill myself""#) })
        #expect(written.contains { $0.contains("youtubei/v1/search") })
        let kept = await control.connections.records()
        #expect(kept.isEmpty, "inspected requests are no connections to judge again")
    }

    @Test func aMachineWithoutASchoolsPolicyRecordsAllowedFlowsOnlyAsLogAllowedSays() async throws {
        let folder = try TemporaryFolder("safeguarding-local")
        let store = folder.sub("rules.hpstore")
        try Data(try BundleFactory.store(version: 3)).write(to: URL(fileURLWithPath: store))
        let configuration = try Configuration(
            yaml: """
                queue:
                  user: nobody
                rules:
                  directory: \(folder.sub("lib"))
                log:
                  file: \(folder.sub("audit.jsonl"))
                  journald: false
                notify: false
                """)
        let application = try await FilterControlApplication.build(
            configuration: configuration,
            options: Control.Options(
                configPath: folder.sub("hallpass.yaml"), store: store, runtimeDirectory: folder.sub("run"), dataBinary: folder.sub("none")),
            logger: Logger(label: "test"))
        let control = application.control
        #expect(await !control.policy.fromBundle && control.safeguardingForReports.withLock { $0 } == nil)
        let audit = try #require(await control.audit)
        let writer = Task { await audit.run() }
        control.record(FlowReportLines([Self.report("recovery.example", category: "drogue")]))
        audit.finish()
        await writer.value
        #expect(lines(folder.sub("audit.jsonl")).isEmpty)
        #expect(await audit.counters().skippedAllowed == 1)
    }
}
