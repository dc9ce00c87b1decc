// SafeSearch names and enforcement hosts, the address check on TLS/QUIC flows to them, and
// the names answered NXDOMAIN.
import Testing
@testable import VerdictCore

@Suite("Bypass names")
struct BypassNamesTests {
    static func host(_ text: String) -> HostName { try! HostName(text) }

    @Test func canaryAndPrivateRelayNamesExactly() {
        for name in ["use-application-dns.net", "mask.icloud.com", "mask-h2.icloud.com"] {
            #expect(BypassCanaryNames.answersNXDOMAIN(Self.host(name)))
        }
        for name in ["www.use-application-dns.net", "icloud.com", "mask.icloud.com.example", "application-dns.net"] {
            #expect(!BypassCanaryNames.answersNXDOMAIN(Self.host(name)))
        }
    }

    @Test func googleSearchNamesFollowGooglesDomainForms() {
        for name in ["www.google.com", "www.google.de", "www.google.co.uk", "www.google.com.au", "www.google.cat", "www.google.co.jp"] {
            #expect(SafeSearch.isGoogleSearchName(name), "\(name)")
        }
        for name in ["google.com", "www.google.com.evil.example", "mail.google.com", "www.google.example", "www.google.co.uk.example",
                     "www.googleapis.com", "www.google.c0m", "www.google."] {
            #expect(!SafeSearch.isGoogleSearchName(name), "\(name)")
        }
    }

    @Test func enginesAndTheirEnforcementHosts() {
        let all: Set<SafeSearchEngine> = [.google, .youtubeStrict, .bing, .duckduckgo]
        #expect(SafeSearch.enforcementHost(for: Self.host("www.google.fr"), among: all) == "forcesafesearch.google.com")
        #expect(SafeSearch.enforcementHost(for: Self.host("m.youtube.com"), among: all) == "restrict.youtube.com")
        #expect(SafeSearch.enforcementHost(for: Self.host("youtubei.googleapis.com"), among: [.youtubeModerate]) == "restrictmoderate.youtube.com")
        #expect(SafeSearch.enforcementHost(for: Self.host("www.youtube-nocookie.com"), among: all) == "restrict.youtube.com")
        #expect(SafeSearch.enforcementHost(for: Self.host("www.bing.com"), among: all) == "strict.bing.com")
        #expect(SafeSearch.enforcementHost(for: Self.host("duckduckgo.com"), among: all) == "safe.duckduckgo.com")
        // Not covered: other names, and engines the policy does not list.
        #expect(SafeSearch.enforcementHost(for: Self.host("www.google.com"), among: [.bing]) == nil)
        #expect(SafeSearch.enforcementHost(for: Self.host("bing.com"), among: all) == nil)
        #expect(SafeSearch.enforcementHost(for: Self.host("studio.youtube.com"), among: all) == nil)
        // Both YouTube modes listed: strict wins.
        #expect(SafeSearch.engine(for: Self.host("www.youtube.com"), among: [.youtubeModerate, .youtubeStrict]) == .youtubeStrict)
    }

    @Test func flowsToCoveredNamesMayOnlyGoToTheEnforcementAddresses() {
        let engines: Set<SafeSearchEngine> = [.google, .youtubeStrict]
        let google = IPAddress("216.239.38.120")!
        let google6 = IPAddress("2001:4860:4802:32::78")!
        let known: [SafeSearchEngine: Set<IPAddress>] = [.google: [google, google6], .youtubeStrict: [IPAddress("216.239.38.119")!]]
        // A hard-coded address of www.google.com (the unrestricted front end) is reset.
        #expect(!SafeSearch.allowsFlow(to: IPAddress("142.250.185.100")!, serverName: Self.host("www.google.com"), among: engines, enforcementAddresses: known))
        #expect(SafeSearch.allowsFlow(to: google, serverName: Self.host("www.google.com"), among: engines, enforcementAddresses: known))
        #expect(SafeSearch.allowsFlow(to: google6, serverName: Self.host("www.google.co.uk"), among: engines, enforcementAddresses: known))
        // YouTube's enforcement address is not Google Search's.
        #expect(!SafeSearch.allowsFlow(to: google, serverName: Self.host("www.youtube.com"), among: engines, enforcementAddresses: known))
        // Names SafeSearch does not cover go anywhere; so does everything when no engine is listed.
        #expect(SafeSearch.allowsFlow(to: IPAddress("192.0.2.1")!, serverName: Self.host("www.example.com"), among: engines, enforcementAddresses: known))
        #expect(SafeSearch.allowsFlow(to: IPAddress("192.0.2.1")!, serverName: Self.host("www.google.com"), among: [], enforcementAddresses: [:]))
        // Addresses not known yet: held to none.
        #expect(!SafeSearch.allowsFlow(to: google, serverName: Self.host("www.bing.com"), among: [.bing], enforcementAddresses: [:]))
    }

    @Test func bypassPolicyDefaults() {
        let policy = BypassPolicy()
        #expect(policy.encryptedDNS == .block && policy.ech == .block && policy.tunnels == .block && policy.unreadableQUIC == .block)
        #expect(policy.quic == .allow && policy.safeSearch.isEmpty && policy.proxies.isEmpty)
        #expect(policy.ssh == .block && policy.sshServers.isEmpty)
    }

    @Test func schoolProxyAddressesParseAndPrintBack() throws {
        for text in ["10.0.0.8:3128", "10.0.0.0/24", "10.0.0.8", "[2001:db8::8]:3128", "2001:db8::/64", "[2001:db8::/64]:8080", "2001:db8::8"] {
            let proxy = try #require(ProxyEndpoint(text), "\(text)")
            #expect(ProxyEndpoint(proxy.description) == proxy, "\(text) -> \(proxy)")
        }
        for bad in ["", "proxy.school.example:3128", "10.0.0.8:", "10.0.0.8:0", "10.0.0.8:65536", "10.0.0.8:31a8", "[10.0.0.8]:3128",
            "[2001:db8::8", "[2001:db8::8]3128", "2001:db8::8:3128:x", "10.0.0.0/33:80"]
        {
            #expect(ProxyEndpoint(bad) == nil, "\(bad)")
        }
        // Without brackets an IPv6 address takes no port: this is the address 2001:db8::8:3128, any port.
        #expect(ProxyEndpoint("2001:db8::8:3128")?.port == nil)
        let proxy = try #require(ProxyEndpoint("10.0.0.8:3128"))
        #expect(proxy.matches(IPAddress("10.0.0.8")!, port: 3128))
        #expect(!proxy.matches(IPAddress("10.0.0.8")!, port: 1080))
        #expect(!proxy.matches(IPAddress("10.0.0.9")!, port: 3128))
        let anyPort = try #require(ProxyEndpoint("10.0.0.0/24"))
        #expect(anyPort.matches(IPAddress("10.0.0.200")!, port: 1080) && !anyPort.matches(IPAddress("10.0.1.1")!, port: 1080))
        #expect(try #require(ProxyEndpoint("[2001:db8::/64]:8080")).matches(IPAddress("2001:db8::77")!, port: 8080))
    }
}
