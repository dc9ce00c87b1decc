import Testing
import VerdictCore

@Suite struct PolicyTextTests {
    @Test func roundTrips() throws {
        let policy = Policy(
            blockedCategories: .only(["gambling", "adult"]),
            allow: [try RulePattern("khanacademy.org"), try RulePattern("10.0.0.0/8")],
            deny: [try RulePattern("=games.example.com")],
            unknown: .ask, noName: .block, askDefault: .block, askTimeoutMilliseconds: 750)
        #expect(try PolicyText.parse(PolicyText.render(policy)) == policy)
        #expect(try PolicyText.parse(PolicyText.render(Policy())) == Policy())
    }

    @Test(arguments: ["block all\nblock all\n", "allow\n", "allow bad host\n", "unknown maybe\n", "noName ask\n", "surprise 1\n", "askDefault ask\n", "askTimeout 5\n", "askTimeout soon\n"])
    func refusesMalformed(text: String) {
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse(text) }
    }
}

@Suite struct PolicyTextDNSRewriteTests {
    @Test func dnsRewriteRoundTripsAndIsOptional() throws {
        var policy = Policy()
        #expect(try PolicyText.parse(PolicyText.render(policy)).dnsRewrite == nil)
        policy.dnsRewrite = Policy.DNSRewrite(ipv4: IPAddress("127.0.0.1")!, ipv6: IPAddress("::1")!, timeToLive: 10)
        let text = PolicyText.render(policy)
        #expect(text.contains("dnsRewrite 127.0.0.1 ::1 10"))
        #expect(try PolicyText.parse(text) == policy)
    }

    @Test(arguments: ["dnsRewrite", "dnsRewrite 127.0.0.1", "dnsRewrite ::1 127.0.0.1 10", "dnsRewrite 127.0.0.1 ::1 99999", "dnsRewrite 127.0.0.1 ::1 ten"])
    func malformedRewritesAreRefused(_ line: String) {
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse(line + "\n") }
    }
}

/// The school's `inspect:` reaches filter-data and the proxy in the policy text.
@Suite struct PolicyTextInspectionTests {
    @Test func inspectionRoundTrips() throws {
        var policy = Policy()
        policy.inspection = InspectionPolicy(
            hosts: [try RulePattern("youtube.com"), try RulePattern("=www.google.com")], urls: false,
            youtube: YouTubeLists(allowVideos: ["dQw4w9WgXcQ"], blockVideos: ["aaaaaaaaaaa"], allowChannels: ["@mathsclass"], blockChannels: ["UCbbbbbbbbbbbbbbbbbbbbbb"]),
            searchTerms: true,
            headers: RestrictHeaders(
                youtubeRestrict: .strict, googleAllowedDomains: ["school.example"],
                microsoftTenants: .init(allow: ["school.example", "school.onmicrosoft.com"], context: "72f988bf-86f1-41af-91ab-2d7cd011db47")),
            neverInspect: [try RulePattern("credit-union.example")], inspectAnyway: ["dl.google.com"])
        let text = PolicyText.render(policy)
        #expect(text.contains("inspectHosts youtube.com =www.google.com"))
        #expect(try PolicyText.parse(text) == policy)
        // Nothing inspected: no line at all.
        #expect(!PolicyText.render(Policy()).contains("inspect"))
    }

    @Test func engineSetsKnowWhatSomeoneInspects() throws {
        var students = Policy()
        students.inspection.hosts = [try RulePattern("youtube.com")]
        let set = PolicySet(policies: [.ungrouped: Policy(), .group("students"): students], users: [62_001: .group("students")])
        let engines = PolicyEngines(rules: InMemoryRules(), set: set)
        #expect(engines.inspectsAnything)
        #expect(engines.inspectedForSomeone(try HostName("www.youtube.com")))
        #expect(!engines.inspectedForSomeone(try HostName("example.org")))
        #expect(engines.inspectionPlan(for: 62_001)?.choice(for: try HostName("www.youtube.com")) == .inspect)
        #expect(engines.inspectionPlan(for: 61_001)?.choice(for: try HostName("www.youtube.com")) == .splice(.notInspected))
        #expect(!PolicyEngines(rules: InMemoryRules(), set: PolicySet(single: Policy())).inspectsAnything)
    }

    @Test(arguments: ["inspectHosts 10.0.0.0/8", "inspectURLs maybe", "inspectVideos allow short", "inspectYouTubeRestrict loose", "inspectMicrosoftTenants notaguid x"])
    func malformedInspectionLinesAreRefused(_ line: String) {
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse(line + "\n") }
    }
}
