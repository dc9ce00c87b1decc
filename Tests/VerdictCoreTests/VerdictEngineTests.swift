import Testing
import VerdictCore

@Suite struct VerdictEngineTests {
    static func rules() throws -> InMemoryRules {
        var rules = InMemoryRules()
        try rules.add("casino.example", "gambling")
        try rules.add("=only.exact.example", "adult")
        try rules.add("*.cdn.example", "ads")
        try rules.add("edu.example", "education")
        try rules.add("games.edu.example", "games")
        try rules.add("videos.example/forbidden", "adult")
        try rules.add("203.0.113.0/24", "malware")
        try rules.add("203.0.113.9", "education")
        try rules.add("2001:db8:bad::/48", "malware")
        return rules
    }

    func decide(_ facts: FlowFacts, policy: Policy = Policy()) throws -> Decision {
        VerdictEngine(rules: try Self.rules(), policy: policy).decide(facts)
    }

    func facts(_ host: String, path: String? = nil, destination: String? = nil) throws -> FlowFacts {
        FlowFacts(host: try HostName(host), nameSource: .tlsServerName, path: path, destination: destination.flatMap { IPAddress($0) })
    }

    @Test func subtreeRulesMatchTheNameAndSubdomains() throws {
        for host in ["casino.example", "www.casino.example", "a.b.casino.example"] {
            let decision = try decide(facts(host))
            #expect(decision.verdict == .drop)
            #expect(decision.reason == Reason(source: .category, category: "gambling", rule: "casino.example"))
        }
        #expect(try decide(facts("notcasino.example")).reason.source == .unknownHost)
    }

    @Test func exactAndSubdomainOnlyRules() throws {
        #expect(try decide(facts("only.exact.example")).verdict == .drop)
        #expect(try decide(facts("only.exact.example")).reason.rule == "=only.exact.example")
        #expect(try decide(facts("www.only.exact.example")).verdict == .allow)
        #expect(try decide(facts("cdn.example")).verdict == .allow)
        #expect(try decide(facts("img.cdn.example")).reason.rule == "*.cdn.example")
    }

    @Test func withoutAConfigEveryCategoryIsBlocked() throws {
        #expect(try decide(facts("edu.example")).verdict == .drop)
    }

    @Test func onlySelectedCategoriesBlockAndTheRestAreKnown() throws {
        let policy = Policy(blockedCategories: .only(["gambling", "games"]), unknown: .block)
        let known = try decide(facts("www.edu.example"), policy: policy)
        #expect(known.verdict == .allow)
        #expect(known.reason == Reason(source: .category, category: "education", rule: "edu.example"))
        // A blocked category anywhere among the suffixes wins over a known one.
        let games = try decide(facts("x.games.edu.example"), policy: policy)
        #expect(games.verdict == .drop)
        #expect(games.reason.category == "games")
        #expect(try decide(facts("unlisted.example"), policy: policy).verdict == .drop)
    }

    @Test func localListsWinOverCategoriesAndTheMostSpecificEntryDecides() throws {
        let policy = Policy(
            allow: [try RulePattern("casino.example"), try RulePattern("ok.blocked.example")],
            deny: [try RulePattern("blocked.example"), try RulePattern("bad.casino.example")],
            unknown: .allow
        )
        let allowed = try decide(facts("www.casino.example"), policy: policy)
        #expect(allowed.verdict == .allow)
        #expect(allowed.reason == Reason(source: .localAllowList, rule: "casino.example"))
        #expect(try decide(facts("bad.casino.example"), policy: policy).reason == Reason(source: .localDenyList, rule: "bad.casino.example"))
        #expect(try decide(facts("x.blocked.example"), policy: policy).verdict == .drop)
        #expect(try decide(facts("a.ok.blocked.example"), policy: policy).verdict == .allow)
    }

    @Test func denyWinsATieWithAllow() throws {
        let policy = Policy(allow: [try RulePattern("tie.example")], deny: [try RulePattern("tie.example")])
        #expect(try decide(facts("tie.example"), policy: policy).reason.source == .localDenyList)
    }

    /// A list's URL prefix matches the path's bytes, as the store's do: a combining mark after
    /// the prefix (which joins the prefix's last character into another, for String.hasPrefix)
    /// does not hide the path from it. Found through the `inspect` fuzz target.
    @Test func listURLPrefixesMatchBytesNotCharacters() throws {
        let policy = Policy(deny: [try RulePattern("news.example/private")])
        for path in ["/private\u{0301}/page", "/private\u{302E}", "/private"] {
            #expect(try decide(facts("news.example", path: path), policy: policy).reason == Reason(source: .localDenyList, rule: "news.example/private"), "\(path)")
        }
        #expect(try decide(facts("news.example", path: "/public"), policy: policy).verdict == .allow)
    }

    @Test func urlPrefixRulesApplyOnlyWhenThePathIsKnown() throws {
        let blocked = try decide(facts("www.videos.example", path: "/Forbidden/clip"))
        #expect(blocked.verdict == .drop)
        #expect(blocked.reason.rule == "videos.example/forbidden")
        #expect(try decide(facts("videos.example", path: "/allowed")).verdict == .allow)
        #expect(try decide(facts("videos.example")).verdict == .allow)
    }

    @Test func unknownNamesFollowPolicy() throws {
        for (action, verdict) in [(Policy.UnknownAction.allow, Verdict.allow), (.block, .drop), (.ask, .needRules)] {
            let decision = try decide(facts("nobody.example"), policy: Policy(unknown: action))
            #expect(decision.verdict == verdict)
            #expect(decision.reason.source == .unknownHost)
        }
    }

    @Test func flowsWithoutANameWaitThenFollowNoName() throws {
        let waiting = FlowFacts(destination: IPAddress("198.51.100.1"), mayRevealName: true)
        #expect(try decide(waiting).verdict == .needMoreData)
        let done = FlowFacts(destination: IPAddress("198.51.100.1"))
        #expect(try decide(done, policy: Policy(noName: .block)).verdict == .drop)
        #expect(try decide(done, policy: Policy(noName: .allow)).reason.source == .noName)
        // An IPv4 literal as the name counts as no name.
        #expect(try decide(facts("198.51.100.1"), policy: Policy(noName: .block)).reason.source == .noName)
    }

    @Test func addressRulesBlockNamedAndNamelessFlows() throws {
        let nameless = try decide(FlowFacts(destination: IPAddress("203.0.113.50")))
        #expect(nameless.verdict == .drop)
        #expect(nameless.reason == Reason(source: .category, category: "malware", rule: "203.0.113.0/24"))
        // The most specific blocked address rule is the reason.
        #expect(try decide(FlowFacts(destination: IPAddress("203.0.113.9"))).reason.rule == "203.0.113.9")
        #expect(try decide(facts("unlisted.example", destination: "2001:db8:bad::1")).verdict == .drop)
        #expect(try decide(facts("unlisted.example", destination: "2001:db8:900d::1")).verdict == .allow)
    }

    @Test func localNetworkEntries() throws {
        let policy = Policy(allow: [try RulePattern("203.0.113.0/28")], deny: [try RulePattern("192.0.2.0/24")])
        #expect(try decide(FlowFacts(destination: IPAddress("203.0.113.5")), policy: policy).reason.source == .localAllowList)
        #expect(try decide(FlowFacts(destination: IPAddress("203.0.113.50")), policy: policy).verdict == .drop)
        #expect(try decide(facts("unlisted.example", destination: "192.0.2.1"), policy: policy).reason.source == .localDenyList)
    }

    @Test func aCategoryIdOutsideTheStoreIsTreatedAsBlocked() throws {
        var rules = InMemoryRules()
        rules.categoryNames = ["only"]
        rules.domains[SuffixFingerprints.fingerprint(of: try HostName("odd.example"))] = [(7, .subtree)]
        let decision = VerdictEngine(rules: rules, policy: Policy(blockedCategories: .only([]))).decide(try facts("odd.example"))
        #expect(decision.verdict == .drop)
        #expect(decision.reason.category == "category-7")
    }
}

extension VerdictEngineTests {
    @Test func askConsultsTheLookupAnswersOnlyForUnknownNames() throws {
        var engine = VerdictEngine(
            rules: try Self.rules(),
            policy: Policy(blockedCategories: .only(["gambling"]), allow: [try RulePattern("allowed.example")], unknown: .ask, askDefault: .block))
        #expect(engine.decide(try facts("new.example")).verdict == .needRules)
        engine.answers.record(.init(categories: ["gambling"], expires: 10), for: try HostName("new.example"))
        engine.answers.record(.init(categories: ["education"], expires: 10), for: try HostName("allowed.example"))
        engine.answers.record(.init(categories: ["gambling"], expires: 10), for: try HostName("edu.example"))
        #expect(engine.decide(try facts("new.example")) == Decision(.drop, Reason(source: .lookup, category: "gambling")))
        // Answers are for the exact name.
        #expect(engine.decide(try facts("www.new.example")).verdict == .needRules)
        // The local lists and the store come first.
        #expect(engine.decide(try facts("allowed.example")).reason.source == .localAllowList)
        #expect(engine.decide(try facts("edu.example")).reason == Reason(source: .category, category: "education", rule: "edu.example"))
        // With unknown: allow, answers are not consulted.
        var allowing = VerdictEngine(rules: try Self.rules(), policy: Policy(unknown: .allow))
        allowing.answers = engine.answers
        #expect(allowing.decide(try facts("new.example")).reason.source == .unknownHost)
    }

    @Test func theOverlayIsBounded() throws {
        var answers = LookupAnswers(capacity: 16)
        for index in 0..<100 {
            answers.record(.init(categories: [], expires: UInt64(index)), for: try HostName("n\(index).example"))
            #expect(answers.count <= 16)
        }
        #expect(answers[try HostName("n99.example")] != nil)
        let before = answers.count
        #expect(answers.removeExpired(now: 98) == before - 1)
        let survivor = try HostName("n99.example")
        #expect(answers.count == 1 && answers[survivor] != nil)
    }
}
