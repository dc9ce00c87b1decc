import FilterData
import HallpassWire
import HallpassIPC
import SharedStore
import Testing
import VerdictCore

/// The answers of DNS queries filter-data changes against ways around the
/// filter: which queries go on with the answer mark (`DNSAnswerAction(for:engines:)`)
/// and what their answers become (`DNSAnswerAction.rewrite`).
@Suite struct BypassAnswerTests {
    func engines(_ change: (inout Policy) -> Void = { _ in }, targets: [SafeSearchEngine: SafeSearchTarget] = [:]) -> PolicyEngines<RuleStore> {
        var policy = Policy(blockedCategories: .only(["adult"]))
        change(&policy)
        var set = PolicySet(single: policy)
        set.safeSearchTargets = targets
        return PolicyEngines(rules: blockedStore, set: set)
    }

    func query(_ name: String, type: Int = 1, sourcePort: Int = 40_000, with engines: PolicyEngines<RuleStore>) -> Inspection {
        var inspector = FlowInspector(engines: engines)
        return inspector.inspect(udpPacket(sourcePort: sourcePort, destinationPort: 53, Build.dnsQuery(name, type: type)), now: 0)
    }

    @Test func theCanaryNamesAnswerNXDOMAINUnlessEncryptedDNSIsAllowed() throws {
        let strict = engines()
        for name in ["use-application-dns.net", "mask.icloud.com", "mask-h2.icloud.com"] {
            let inspection = query(name, with: strict)
            #expect(DNSAnswerAction(for: inspection, engines: strict) == .nxdomain, "\(name): \(inspection.decision)")
        }
        #expect(DNSAnswerAction(for: query("sub.use-application-dns.net", with: strict), engines: strict) == nil, "the name exactly")
        let relaxed = engines { $0.bypass.encryptedDNS = .allow }
        #expect(DNSAnswerAction(for: query("use-application-dns.net", with: relaxed), engines: relaxed) == nil)

        // The real answer becomes NXDOMAIN with the query's ID and question.
        let answer = udpPacket(sourcePort: 40_000, destinationPort: 53, DNSVector.aQuery("use-application-dns.net"), fromServer: true)
        let rewritten = try #require(try DNSAnswerAction.nxdomain.rewrite(answer, targets: [:]))
        guard case .success(let message) = DNSMessageParser.parse(try DNSPacketRewrite.udpPayload(of: rewritten)) else {
            Issue.record("the rewritten answer does not parse")
            return
        }
        #expect(message.header.isResponse && message.header.responseCode == 3 && message.question?.name == Array("use-application-dns.net".utf8))
    }

    @Test func safeSearchNamesPointAtTheEnforcementHostOnceItsAddressesAreKnown() throws {
        let google = SafeSearchTarget(addresses: [IPAddress("216.239.38.120")!, IPAddress("2001:4860:4802:32::78")!], timeToLive: 120)
        let students = engines({ $0.bypass.safeSearch = [.google] }, targets: [.google: google])
        #expect(DNSAnswerAction(for: query("www.google.com", with: students), engines: students) == .safeSearch(.google))
        #expect(DNSAnswerAction(for: query("www.google.co.uk", type: 28, with: students), engines: students) == .safeSearch(.google))
        #expect(DNSAnswerAction(for: query("mail.google.com", with: students), engines: students) == nil)
        // Without the addresses yet, the answer passes (the TLS check below still holds).
        let waiting = engines { $0.bypass.safeSearch = [.google] }
        #expect(DNSAnswerAction(for: query("www.google.com", with: waiting), engines: waiting) == nil)
        // Staff: no SafeSearch.
        let staff = engines(targets: [.google: google])
        #expect(DNSAnswerAction(for: query("www.google.com", with: staff), engines: staff) == nil)

        let answer = udpPacket(sourcePort: 40_000, destinationPort: 53, DNSVector.aQuery("www.google.com"), fromServer: true)
        let rewritten = try #require(try DNSAnswerAction.safeSearch(.google).rewrite(answer, targets: [.google: google]))
        let records = try DNSMessageParser.addressRecords(in: DNSPacketRewrite.udpPayload(of: rewritten)).get()
        #expect(records.map(\.address) == [IPAddress("216.239.38.120")!] && records.allSatisfy { $0.timeToLive == 120 }, "\(records)")
    }

    @Test func aTLSFlowToASafeSearchNameMayGoOnlyToTheEnforcementAddresses() throws {
        let google = SafeSearchTarget(addresses: [IPAddress("216.239.38.120")!], timeToLive: 120)
        let students = engines({ $0.bypass.safeSearch = [.google] }, targets: [.google: google])
        let www = try HostName("www.google.com")
        let elsewhere = students.decide(FlowFacts(host: www, nameSource: .tlsServerName, destination: IPAddress("142.250.1.1")!))
        #expect(elsewhere.verdict == .drop && elsewhere.reason.category == "safeSearch" && elsewhere.reason.rule == "forcesafesearch.google.com")
        let enforced = students.decide(FlowFacts(host: www, nameSource: .quicServerName, destination: IPAddress("216.239.38.120")!, transport: .udp))
        #expect(enforced.verdict == .allow, "\(enforced)")
        #expect(students.decide(FlowFacts(host: try HostName("maps.google.com"), nameSource: .tlsServerName, destination: IPAddress("142.250.1.1")!)).verdict == .allow)
        let staff = engines(targets: [.google: google])
        #expect(staff.decide(FlowFacts(host: www, nameSource: .tlsServerName, destination: IPAddress("142.250.1.1")!)).verdict == .allow)
    }

    @Test func httpsAnswersLoseECHUnlessTheKeyAllowsIt() throws {
        let strict = engines()
        #expect(DNSAnswerAction(for: query("www.example.com", type: 65, with: strict), engines: strict) == .removeECH)
        #expect(DNSAnswerAction(for: query("www.example.com", type: 64, with: strict), engines: strict) == .removeECH)
        #expect(DNSAnswerAction(for: query("www.example.com", type: 1, with: strict), engines: strict) == nil, "A answers pass untouched")
        let relaxed = engines { $0.bypass.ech = .allow }
        #expect(DNSAnswerAction(for: query("www.example.com", type: 65, with: relaxed), engines: relaxed) == nil)

        let (message, _) = DNSVector.httpsResponse()
        let answer = udpPacket(sourcePort: 40_000, destinationPort: 53, message, fromServer: true)
        let rewritten = try #require(try DNSAnswerAction.removeECH.rewrite(answer, targets: [:]))
        let payload = try DNSPacketRewrite.udpPayload(of: rewritten)
        #expect(payload.count < message.count)
        #expect(try DNSBypassRewrite.removingECH(fromMessage: payload) == nil, "no ech left to remove")
    }

    @Test func aBlockedNamePointsAtTheBlockPageAsBefore() {
        let rewriting = engines { $0.dnsRewrite = Policy.DNSRewrite(ipv4: IPAddress("127.0.0.1")!, ipv6: IPAddress("::1")!) }
        #expect(DNSAnswerAction(for: query("blocked.example", with: rewriting), engines: rewriting) == .pointAtBlockPage)
        #expect(DNSAnswerAction(for: query("fine.example", with: rewriting), engines: rewriting) == nil)
    }
}
