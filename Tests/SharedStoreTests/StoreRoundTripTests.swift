import SharedStore
import Testing
import VerdictCore

/// Builds a small store with every kind of rule.
func sampleStore(version: UInt64 = 7) throws -> [UInt8] {
    var builder = RuleStoreBuilder()
    let gambling = try builder.category(named: "gambling")
    let adult = try builder.category(named: "Adult")
    let malware = try builder.category(named: "malware")
    let parser = RuleListParser()
    let list = """
        # a comment
        casino.example
        CASINO.example.
        =only.exact.example
        *.cdn.example
        bücher.example
        videos.example/forbidden
        203.0.113.0/24
        2001:db8:bad::/48
        """
    _ = parser.parse(Array(list.utf8), sourceName: "sample", category: gambling, into: &builder)
    builder.add(try RulePattern("casino.example"), category: adult)
    builder.add(try RulePattern("evil.example"), category: malware)
    builder.add(try RulePattern("192.0.2.66"), category: malware)
    builder.setMetadata("source", "unit test")
    return try builder.build(version: version).bytes
}

/// The decisions every test store must give, as (target, action, category, rule).
let sampleExpectations: [(String, String, String?, String?)] = [
    ("casino.example", "block", "gambling", "casino.example"),
    ("www.casino.example", "block", "gambling", "casino.example"),
    ("only.exact.example", "block", "gambling", "=only.exact.example"),
    ("www.only.exact.example", "allow", nil, nil),
    ("cdn.example", "allow", nil, nil),
    ("a.cdn.example", "block", "gambling", "*.cdn.example"),
    ("xn--bcher-kva.example", "block", "gambling", "xn--bcher-kva.example"),
    ("http://videos.example/forbidden/1", "block", "gambling", "videos.example/forbidden"),
    ("http://videos.example/fine", "allow", nil, nil),
    ("203.0.113.7", "block", "gambling", "203.0.113.0/24"),
    ("[2001:db8:bad::1]", "block", "gambling", "2001:db8:bad::/48"),
    ("192.0.2.66", "block", "malware", "192.0.2.66"),
    ("192.0.2.67", "allow", nil, nil),
    ("www.evil.example", "block", "malware", "evil.example"),
    ("unlisted.example", "allow", nil, nil),
]

func answers(_ store: some RuleSource) throws -> [String] {
    let engine = VerdictEngine(rules: store, policy: Policy())
    return try sampleExpectations.map { target, _, _, _ in
        let decision = engine.decide(try CheckTarget(target).facts)
        return "\(decision.verdict.actionWord) \(decision.reason.category ?? "-") \(decision.reason.rule ?? "-")"
    }
}

@Suite struct StoreRoundTripTests {
    @Test func everyKindOfRuleReadsBack() throws {
        let store = try RuleStore(bytes: try sampleStore())
        #expect(store.version == 7)
        #expect(store.categoryNames == ["gambling", "adult", "malware"])
        #expect(store.metadata["source"] == "unit test")
        #expect(store.domainNameCount == 5)
        let expected = sampleExpectations.map { "\($0.1) \($0.2 ?? "-") \($0.3 ?? "-")" }
        #expect(try answers(store) == expected)
    }

    @Test func aNameInTwoCategoriesKeepsBoth() throws {
        let store = try RuleStore(bytes: try sampleStore())
        var seen: [String] = []
        store.forEachDomainRule(fingerprint: SuffixFingerprints.fingerprint(of: try HostName("casino.example"))) { category, kind in
            seen.append("\(store.categoryNames[Int(category)]):\(kind)")
        }
        #expect(seen.sorted() == ["adult:subtree", "gambling:subtree"])
        // Only adult blocked: the adult rule decides.
        let engine = VerdictEngine(rules: store, policy: Policy(blockedCategories: .only(["adult"])))
        #expect(engine.decide(try CheckTarget("casino.example").facts).reason.category == "adult")
    }

    @Test func outputDoesNotDependOnInsertionOrder() throws {
        var forward = RuleStoreBuilder()
        var backward = RuleStoreBuilder()
        let names = (0..<500).map { "site\($0).example" }
        let a = try forward.category(named: "a")
        let b = try backward.category(named: "a")
        for name in names { forward.add(try RulePattern(name), category: a) }
        for name in names.reversed() { backward.add(try RulePattern(name), category: b) }
        #expect(try forward.build(version: 1).bytes == backward.build(version: 1).bytes)
    }

    @Test func emptyStoreAnswersUnknown() throws {
        let store = try RuleStore(bytes: try RuleStoreBuilder().build(version: 1).bytes)
        #expect(store.categoryNames.isEmpty)
        let decision = VerdictEngine(rules: store, policy: Policy()).decide(try CheckTarget("example.com").facts)
        #expect(decision.reason.source == .unknownHost)
    }

    @Test func largeTablesFindEveryNameAndNoOthers() throws {
        var builder = RuleStoreBuilder()
        let category = try builder.category(named: "big")
        for index in 0..<50_000 { builder.add(try RulePattern("n\(index).example"), category: category) }
        let store = try RuleStore(bytes: try builder.build(version: 1).bytes)
        #expect(store.domainNameCount == 50_000)
        for index in stride(from: 0, to: 50_000, by: 7) {
            var found = false
            store.forEachDomainRule(fingerprint: SuffixFingerprints.fingerprint(of: try HostName("n\(index).example"))) { _, _ in found = true }
            #expect(found)
            var missing = false
            store.forEachDomainRule(fingerprint: SuffixFingerprints.fingerprint(of: try HostName("m\(index).example"))) { _, _ in missing = true }
            #expect(!missing)
        }
    }

    @Test func invalidCategoryNamesAreRefused() {
        var builder = RuleStoreBuilder()
        #expect(throws: RuleStoreBuilder.BuildError.invalidCategoryName("bad name")) { try builder.category(named: "bad name") }
        #expect(throws: RuleStoreBuilder.BuildError.self) { try builder.category(named: "") }
    }
}
