import FilterData
import InspectionProxy
import NIOCore
import Testing
import VerdictCore

/// What the proxy does with a connection's first bytes, for a plan that inspects youtube.com.
@Suite struct ProxyDecisionTests {
    static func be16(_ value: Int) -> [UInt8] { [UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)] }

    /// A ClientHello in one TLS record, naming `name` (none: no server_name extension).
    static func hello(_ name: String?) -> [UInt8] {
        var body: [UInt8] = be16(0x0303) + [UInt8](repeating: 0xAB, count: 32) + [0] + be16(2) + [0x13, 0x01] + [1, 0]
        var extensions: [UInt8] = []
        if let name {
            let bytes = Array(name.utf8)
            let entry: [UInt8] = [0] + be16(bytes.count) + bytes
            extensions += be16(0) + be16(entry.count + 2) + be16(entry.count) + entry
        }
        body += be16(extensions.count) + extensions
        let message: [UInt8] = [1, 0] + be16(body.count) + body
        return [22, 3, 1] + be16(message.count) + message
    }

    static let plan = InspectionPlan(policy: InspectionPolicy(hosts: [try! RulePattern("youtube.com")]))

    func decide(_ bytes: [UInt8], _ plan: InspectionPlan = Self.plan, canInspect: Bool = true) -> ProxyDecision {
        ProxyDecisions.decide(bytes.span, plan: plan, canInspect: canInspect)
    }

    func complete(_ bytes: [UInt8]) -> Bool { ProxyDecisions.helloIsComplete(bytes.span) }

    @Test func anInspectedNameIsInspectedOrWithoutACARefusedNeverPassed() throws {
        #expect(decide(Self.hello("www.youtube.com")) == .inspect(try HostName("www.youtube.com")))
        // The name as the ClientHello wrote it, made canonical (the leaf is for the canonical name).
        #expect(decide(Self.hello("WWW.YouTube.com")) == .inspect(try HostName("www.youtube.com")))
        #expect(decide(Self.hello("www.youtube.com"), canInspect: false) == .refuse(.noAuthority))
    }

    @Test func otherNamesOnTheSameAddressAreSpliced() {
        #expect(decide(Self.hello("www.google.com")) == .splice(.notInspected))
        // A name on the never-inspect list, whatever the hosts say.
        let broad = InspectionPlan(policy: InspectionPolicy(hosts: [try! RulePattern("google.com")]))
        #expect(decide(Self.hello("accounts.google.com"), broad) == .splice(.neverInspect(entry: "accounts.google.com", group: "identity")))
        // No name at all: spliced, as the plan says of what names no host (and filter-data judged its noName).
        #expect(decide(Self.hello(nil)) == .splice(.notAName))
    }

    @Test func aPartOfTheHelloWaitsForTheRest() {
        let hello = Self.hello("www.youtube.com")
        for cut in [1, 5, 9, hello.count - 1] {
            #expect(decide(Array(hello[..<cut])) == .readMore, "cut at \(cut)")
            #expect(!complete(Array(hello[..<cut])))
        }
        #expect(complete(hello))
    }

    @Test func whatIsNoClientHelloIsRefused() {
        #expect(decide(Array("GET / HTTP/1.1\r\nHost: www.youtube.com\r\n\r\n".utf8)) == .refuse(.notTLS))
        #expect(decide([22, 3, 1, 0, 4, 2, 0, 0, 0]) == .refuse(.notTLS))
        // A hello that never ends within the parser's bound.
        let endless: [UInt8] = [22, 3, 1, 0x40, 0x00, 1, 0x00, 0xFF, 0xFF] + [UInt8](repeating: 0, count: ClientHelloParser.maximumRecordStreamLength)
        #expect(decide(endless) != .readMore)
    }

    @Test func theRefusalIsAnAccessDeniedAlert() {
        // A fatal (2) access_denied (49) alert record.
        #expect(ProxyDecisions.accessDeniedAlert == [21, 3, 3, 0, 2, 2, 49])
    }
}

/// The socket addresses NIO gives, as hallpass's addresses (the uid lookup's four-tuple).
@Suite struct ProxySocketAddressTests {
    @Test func bothFamiliesComeOutInNetworkOrder() throws {
        let v4 = ProxySockets.address(try SocketAddress(ipAddress: "10.77.3.2", port: 443))
        #expect(v4?.address == IPAddress("10.77.3.2") && v4?.port == 443)
        let v6 = ProxySockets.address(try SocketAddress(ipAddress: "fd77:3::2", port: 40_001))
        #expect(v6?.address == IPAddress("fd77:3::2") && v6?.port == 40_001)
        #expect(ProxySockets.address(try SocketAddress(unixDomainSocketPath: "/tmp/x")) == nil)
    }
}
