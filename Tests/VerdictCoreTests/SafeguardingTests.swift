// The safeguarding rules (docs/school-policy.md, "Safeguarding"): the search
// term read from a URL, a phrase's whole-word match, what a rule matches and
// what it must not, the shipped rules, and which allowed flows a machine
// records for them.
import Foundation
import Testing
import VerdictCore

@Suite struct SafeguardingTests {
    // MARK: Search terms

    @Test(arguments: [
        // Engines inspection knows, read by its code.
        ("www.google.com", "/search?q=how+to+kill+myself&hl=en", "how to kill myself"),
        ("www.google.co.uk", "/search?client=firefox&q=self%20harm", "self harm"),
        ("www.bing.com", "/search?q=lethal+dose&form=QBLH", "lethal dose"),
        ("duckduckgo.com", "/?q=want+to+die&ia=web", "want to die"),
        ("www.youtube.com", "/results?search_query=noose+knot", "noose knot"),
        // The forms added here.
        ("search.yahoo.com", "/search?p=i+wish+i+was+dead&fr=yfp", "i wish i was dead"),
        ("uk.search.yahoo.com", "/search?p=suicide", "suicide"),
        ("www.ecosia.org", "/search?method=index&q=cutting+myself", "cutting myself"),
        ("forum.example", "/en/search?q=how%20to%20overdose", "how to overdose"),
        // Runs of spaces and control characters made one space.
        ("www.google.com", "/search?q=%20%20kill%0A%0Amyself%20", "kill myself"),
    ])
    func theTermOfASearchURLIsRead(host: String, pathAndQuery: String, term: String) {
        #expect(SearchTerms.extract(host: host, pathAndQuery: pathAndQuery) == term)
    }

    @Test func whatIsNoSearchHasNoTerm() {
        #expect(SearchTerms.extract(host: "www.google.com", pathAndQuery: "/maps?q=leeds") == nil, "not the search page")
        #expect(SearchTerms.extract(host: "www.google.com", pathAndQuery: "/search?hl=en") == nil, "no q")
        #expect(SearchTerms.extract(host: "www.google.com", pathAndQuery: "/search?q=") == nil, "an empty q")
        #expect(SearchTerms.extract(host: "news.example", pathAndQuery: "/story?q=kill+myself") == nil, "not a /search page")
        #expect(SearchTerms.extract(host: "search.yahoo.com", pathAndQuery: "/search?q=suicide") == nil, "Yahoo's key is p")
        #expect(SearchTerms.extract(url: "http://news.example/") == nil)
        #expect(SearchTerms.extract(url: "http://") == nil)
    }

    @Test func aRecordsURLIsReadWithOrWithoutItsScheme() {
        #expect(SearchTerms.extract(url: "http://www.google.com/search?q=kill+myself") == "kill myself")
        #expect(SearchTerms.extract(url: "HTTPS://www.bing.com/search?q=suicide") == "suicide")
        #expect(SearchTerms.extract(url: "www.ecosia.org/search?q=self+harm") == "self harm")
        #expect(SearchTerms.extract(url: "http://www.google.com:80/search?q=noose") == "noose")
    }

    @Test func aTermIsCutAtTwoHundredBytesOnACharacter() throws {
        // 150 two-byte characters: 300 bytes, cut to 200 (100 characters), never inside one.
        let long = String(repeating: "é", count: 150)
        let term = try #require(SearchTerms.extract(host: "www.google.com", pathAndQuery: "/search?q=" + long))
        #expect(term.utf8.count == 200 && term == String(repeating: "é", count: 100))
    }

    // MARK: Phrases

    @Test func aPhraseMatchesWholeWordsInOrderWhateverTheCase() throws {
        let phrase = try #require(SearchPhrase("kill myself"))
        func words(_ text: String) -> [String] { SearchPhrase.words(text) }
        #expect(phrase.matches(termWords: words("how to KILL myself?")))
        #expect(phrase.matches(termWords: words("kill myself")))
        #expect(phrase.matches(termWords: words("i want to kill-myself now")), "a hyphen separates")
        #expect(!phrase.matches(termWords: words("skill myself")), "a word's end, not a part of one")
        #expect(!phrase.matches(termWords: words("kill myselfie")))
        #expect(!phrase.matches(termWords: words("myself kill")), "in order")
        #expect(!phrase.matches(termWords: words("kill the spider myself")), "next to each other")
        #expect(!phrase.matches(termWords: words("kill")))
        // An apostrophe joins a word, typed or curly.
        let dont = try #require(SearchPhrase("don't want to live"))
        #expect(dont.words == ["dont", "want", "to", "live"])
        #expect(dont.matches(termWords: words("I dont want to live anymore")))
        #expect(dont.matches(termWords: words("i don\u{2019}t want to live")))
        #expect(SearchPhrase(" - ! ") == nil, "no word")
        #expect(SearchPhrase.words("Self-Harm ÉTÉ 2025") == ["self", "harm", "été", "2025"])
    }

    // MARK: Rules

    static func blocked(
        category: String? = nil, host: String? = nil, url: String? = nil, reason: String? = "category", group: String? = "year7",
        term: String? = nil
    ) -> SafeguardingFacts {
        SafeguardingFacts(group: group, blocked: true, host: host, url: url, category: category, reasonSource: reason, searchTerm: term)
    }

    static func allowed(
        category: String? = nil, host: String? = nil, url: String? = nil, reason: String? = "category", group: String? = "year7",
        term: String? = nil
    ) -> SafeguardingFacts {
        SafeguardingFacts(group: group, blocked: false, host: host, url: url, category: category, reasonSource: reason, searchTerm: term)
    }

    @Test func eachMatcherMatchesWhatItNamesAndNothingElse() throws {
        let categories = SafeguardingRule(id: "c", severity: .caution, categories: ["drogue"])
        #expect(categories.matches(Self.blocked(category: "drogue")) && categories.matches(Self.allowed(category: "drogue")), "flows: any")
        #expect(!categories.matches(Self.blocked(category: "games")) && !categories.matches(Self.blocked()))

        let names = SafeguardingRule(id: "n", severity: .caution, names: [try RulePattern("chat.example"), try RulePattern("=only.example")])
        #expect(names.matches(Self.blocked(host: "chat.example")) && names.matches(Self.blocked(host: "www.Chat.Example")))
        #expect(names.matches(Self.blocked(url: "http://rooms.chat.example/x")), "the URL's host when the record has no host")
        #expect(names.matches(Self.blocked(host: "only.example")) && !names.matches(Self.blocked(host: "www.only.example")), "=exact")
        #expect(!names.matches(Self.blocked(host: "notchat.example")) && !names.matches(Self.blocked(host: "chat.example.net")))

        let urls = SafeguardingRule(id: "u", severity: .caution, urls: [try RulePattern("forum.example/Support/", urlList: true)])
        #expect(urls.matches(Self.blocked(url: "http://forum.example/support/thread?id=1")))
        #expect(urls.matches(Self.blocked(url: "https://www.forum.example/SUPPORT/")), "a subdomain, any case")
        #expect(urls.matches(Self.blocked(url: "forum.example/support/")), "no scheme, as UT1 writes them")
        #expect(!urls.matches(Self.blocked(url: "http://forum.example/supported")), "a path prefix, with its slash")
        #expect(!urls.matches(Self.blocked(url: "http://forum.example/")) && !urls.matches(Self.blocked(host: "forum.example")), "no path, no match")

        let reasons = SafeguardingRule(id: "r", severity: .caution, reasons: ["bypass"])
        #expect(reasons.matches(Self.blocked(reason: "bypass")) && !reasons.matches(Self.blocked(reason: "category")))

        let terms = SafeguardingRule(id: "t", severity: .danger, searchTerms: [SearchPhrase("kill myself")!])
        #expect(terms.matches(Self.allowed(url: "http://www.google.com/search?q=x", term: "how to kill myself")))
        #expect(!terms.matches(Self.allowed(term: "skill myself")), "word bounded")
        #expect(!terms.matches(Self.allowed(url: "http://www.google.com/search?q=kill+myself")), "the caller reads the term")
    }

    @Test func aRuleForBlockedFlowsOrForAGroupLeavesTheRestAlone() {
        let blockedOnly = SafeguardingRule(id: "b", severity: .caution, categories: ["vpn"], flows: .blocked)
        #expect(blockedOnly.matches(Self.blocked(category: "vpn")))
        #expect(!blockedOnly.matches(Self.allowed(category: "vpn")), "a blocked-only rule on an allowed flow")
        let allowedOnly = SafeguardingRule(id: "a", severity: .caution, categories: ["vpn"], flows: .allowed)
        #expect(allowedOnly.matches(Self.allowed(category: "vpn")) && !allowedOnly.matches(Self.blocked(category: "vpn")))

        let year7 = SafeguardingRule(id: "g", severity: .advisory, categories: ["games"], groups: ["year7"])
        #expect(year7.matches(Self.blocked(category: "games", group: "year7")))
        #expect(!year7.matches(Self.blocked(category: "games", group: "sixth-form")), "the wrong group")
        #expect(!year7.matches(Self.blocked(category: "games", group: nil)), "no group")
        let everyone = SafeguardingRule(id: "e", severity: .advisory, categories: ["games"])
        #expect(everyone.matches(Self.blocked(category: "games", group: nil)) && everyone.matches(Self.blocked(category: "games", group: "x")))
    }

    @Test func theMatchersSetAreAllNeeded() throws {
        let both = SafeguardingRule(id: "x", severity: .caution, categories: ["chat"], names: [try RulePattern("rooms.example")])
        #expect(both.matches(Self.blocked(category: "chat", host: "rooms.example")))
        #expect(!both.matches(Self.blocked(category: "chat", host: "other.example")))
        #expect(!both.matches(Self.blocked(category: "games", host: "rooms.example")))
    }

    // MARK: The policy and the shipped rules

    @Test func theShippedRulesAreThoseDocumented() throws {
        let shipped = SafeguardingPolicy.shipped
        #expect(shipped.usesDefaults && shipped.repeatSeconds == 600 && shipped.schoolRules.isEmpty)
        #expect(
            shipped.rules.map(\.id) == [
                "self-harm-search", "dangerous-material", "adult", "drugs", "extremism", "bypass-attempts", "stalkerware", "hacking",
                "gambling", "dating", "ai-tools", "vpn", "doh",
            ])
        func severity(_ id: String) -> SafeguardingSeverity? { shipped.rules.first { $0.id == id }?.severity }
        #expect(severity("self-harm-search") == .danger && severity("dangerous-material") == .danger)
        #expect(["adult", "drugs", "extremism", "bypass-attempts", "stalkerware", "hacking"].allSatisfy { severity($0) == .caution })
        #expect(["gambling", "dating", "ai-tools", "vpn", "doh"].allSatisfy { severity($0) == .advisory })
        let bypass = try #require(shipped.rules.first { $0.id == "bypass-attempts" })
        #expect(bypass.attempts == .init(count: 5, withinSeconds: 600) && bypass.flows == .blocked && bypass.reasons == ["bypass"])
        #expect(shipped.longestAttemptsWindow == 600)
        // Each phrase reads as words; none repeats another.
        let phrases = SafeguardingPolicy.selfHarmSearchPhrases
        #expect(phrases.allSatisfy { SearchPhrase($0) != nil } && Set(phrases.map(SearchPhrase.words)).count == phrases.count)

        // docs/school-policy.md names every rule and every phrase, so what a DSL reads is what runs.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let docs = try String(contentsOf: root.appendingPathComponent("docs/school-policy.md"), encoding: .utf8)
        for rule in shipped.rules {
            #expect(docs.contains("`\(rule.id)`"), "docs/school-policy.md does not name the shipped rule \(rule.id)")
            for category in rule.categories ?? [] { #expect(docs.contains(category), "\(rule.id): \(category)") }
        }
        for phrase in phrases { #expect(docs.contains("\"\(phrase)\""), "docs/school-policy.md does not list \"\(phrase)\"") }
    }

    @Test func theShippedRulesCatchWhatTheyAreFor() {
        func ids(_ facts: SafeguardingFacts) -> [String] { SafeguardingPolicy.shipped.matches(facts).map(\.id) }
        #expect(ids(Self.allowed(url: "http://www.google.com/search?q=how+to+kill+myself", term: "how to kill myself")) == ["self-harm-search"])
        #expect(ids(Self.allowed(term: "I want to DIE")) == ["self-harm-search"])
        #expect(ids(Self.allowed(term: "skill myself in chess")) == [], "skill myself is not kill myself")
        #expect(ids(Self.allowed(term: "suicide squad")) == ["self-harm-search"], "a word of the list is enough: the lead judges")
        #expect(ids(Self.blocked(category: "dangerous_material")) == ["dangerous-material"])
        #expect(ids(Self.allowed(category: "drogue")) == ["drugs"], "allowed for a recovery site, the lead still told")
        #expect(ids(Self.blocked(category: "mixed_adult")) == ["adult"])
        #expect(ids(Self.blocked(category: "sect")) == ["extremism"])
        #expect(ids(Self.blocked(category: "tunnels", reason: "bypass")) == ["bypass-attempts"])
        #expect(ids(Self.allowed(category: "tunnels", reason: "bypass")) == [], "bypass attempts are the blocked ones")
        #expect(ids(Self.allowed(category: "ai")) == ["ai-tools"])
        #expect(ids(Self.blocked(category: "games")) == [])
    }

    @Test func aSchoolsRuleReplacesTheShippedOneOfItsIdAndDefaultsFalseLeavesOnlyItsOwn() {
        let quieter = SafeguardingRule(id: "ai-tools", severity: .advisory, categories: ["ai"], flows: .blocked)
        let own = SafeguardingRule(id: "games", severity: .advisory, categories: ["games"])
        let policy = SafeguardingPolicy(repeatSeconds: 300, rules: [quieter, own])
        #expect(policy.rules.count == SafeguardingPolicy.defaultRules.count + 1)
        #expect(policy.rules.filter { $0.id == "ai-tools" } == [quieter] && policy.rules.last == own)
        #expect(policy.matches(Self.allowed(category: "ai")).isEmpty && policy.matches(Self.blocked(category: "ai")).map(\.id) == ["ai-tools"])
        #expect(policy.repeatSeconds == 300)

        let only = SafeguardingPolicy(defaults: false, rules: [own])
        #expect(only.rules == [own] && only.matches(Self.blocked(category: "drogue")).isEmpty)
        #expect(SafeguardingPolicy.none.rules.isEmpty && !SafeguardingPolicy.none.allowedFlows.any)
    }

    @Test func everyMatchingRuleIsAnswered() {
        let policy = SafeguardingPolicy(
            defaults: false,
            rules: [
                SafeguardingRule(id: "one", severity: .caution, categories: ["chat"]),
                SafeguardingRule(id: "two", severity: .danger, categories: ["chat"], groups: ["year7"]),
                SafeguardingRule(id: "three", severity: .advisory, categories: ["games"]),
            ])
        #expect(policy.matches(Self.blocked(category: "chat", group: "year7")).map(\.id) == ["one", "two"])
        #expect(policy.matches(Self.blocked(category: "chat", group: "year9")).map(\.id) == ["one"])
    }

    // MARK: Allowed flows on the machine

    @Test func theMachineRecordsTheAllowedFlowsARuleLooksAt() {
        let shipped = SafeguardingPolicy.shipped
        #expect(shipped.allowedFlows.any && shipped.allowedFlows.categories.contains("drogue"))
        #expect(!shipped.allowedFlows.categories.contains("tunnels"), "bypass-attempts is for blocked flows")
        #expect(!shipped.allowedFlows.withoutURL, "besides categories, only the search terms: a flow without a URL is skipped at once")
        #expect(shipped.recordsAllowedFlow(Self.allowed(category: "drogue", host: "recovery.example")))
        #expect(!shipped.recordsAllowedFlow(Self.allowed(category: "games", host: "games.example")))
        #expect(!shipped.recordsAllowedFlow(Self.allowed(category: nil, host: "www.google.com")), "HTTPS: no URL, no term")
        #expect(
            shipped.recordsAllowedFlow(
                Self.allowed(host: "www.google.com", url: "http://www.google.com/search?q=kill+myself", term: "kill myself")))
        #expect(!shipped.recordsAllowedFlow(Self.allowed(url: "http://www.google.com/search?q=skill+myself", term: "skill myself")))
        #expect(!shipped.recordsAllowedFlow(Self.blocked(category: "drogue")), "blocked flows are recorded anyway")
        #expect(!SafeguardingPolicy.none.recordsAllowedFlow(Self.allowed(category: "drogue")))

        // A rule by group or by name needs more than the category: the rest is asked.
        let grouped = SafeguardingPolicy(
            defaults: false, rules: [SafeguardingRule(id: "g", severity: .advisory, categories: ["games"], groups: ["year7"])])
        #expect(grouped.allowedFlows.withoutURL && grouped.allowedFlows.categories.isEmpty)
        #expect(grouped.recordsAllowedFlow(Self.allowed(category: "games", group: "year7")))
        #expect(!grouped.recordsAllowedFlow(Self.allowed(category: "games", group: "year9")))
        let blockedOnly = SafeguardingPolicy(
            defaults: false, rules: [SafeguardingRule(id: "b", severity: .caution, categories: ["vpn"], flows: .blocked)])
        #expect(!blockedOnly.allowedFlows.any && !blockedOnly.recordsAllowedFlow(Self.allowed(category: "vpn")))
    }
}
