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
