@testable import BlockPage
import Foundation
import HallpassIPC
@testable import InspectionProxy
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOSSL
import Synchronization
import Testing
import VerdictCore
import X509

/// A rule source held in dictionaries (the engine tests' fake, for these tests' few rules).
struct TestRules: RuleSource {
    var categoryNames: [String] = []
    var domains: [UInt64: [(CategoryID, MatchKind)]] = [:]
    var urls: [UInt64: [([UInt8], CategoryID)]] = [:]

    mutating func add(_ entry: String, _ categoryName: String) throws {
        if !categoryNames.contains(categoryName) { categoryNames.append(categoryName) }
        let id = CategoryID(categoryNames.firstIndex(of: categoryName)!)
        switch try RulePattern(entry) {
        case .domain(let host, let kind): domains[SuffixFingerprints.fingerprint(of: host), default: []].append((id, kind))
        case .urlPrefix(let host, let path): urls[SuffixFingerprints.fingerprint(of: host), default: []].append((Array(path.utf8), id))
        case .network: break
        }
    }

    func forEachDomainRule(fingerprint: UInt64, _ body: (CategoryID, MatchKind) -> Void) {
        for (category, kind) in domains[fingerprint] ?? [] { body(category, kind) }
    }

    func forEachURLRule(hostFingerprint: UInt64, _ body: (Span<UInt8>, CategoryID) -> Void) {
        for (path, category) in urls[hostFingerprint] ?? [] { body(path.span, category) }
    }

    func forEachNetworkRule(containing address: IPAddress, _ body: (IPNetwork, CategoryID) -> Void) {}
}

/// One request of an inspected connection: decided, its head passed on, its record made.
@Suite struct InspectedRequestsTests {
    static let plan = InspectionPlan(
        policy: InspectionPolicy(
            hosts: [try! RulePattern("youtube.com"), try! RulePattern("=www.google.com")],
            youtube: YouTubeLists(allowVideos: ["ALLOWEDvid1"], blockVideos: ["BLOCKEDvid1"]), searchTerms: true,
            headers: RestrictHeaders(youtubeRestrict: .strict)))

    static func engine() throws -> VerdictEngine<TestRules> {
        var rules = TestRules()
        try rules.add("adult.example", "adult")
        try rules.add("www.google.com/forbidden", "adult")
        return VerdictEngine(rules: rules, policy: Policy(blockedCategories: .only(["adult"])))
    }

    static let flow = FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.1")!, sourcePort: 40_000, destination: IPAddress("192.0.2.7")!, destinationPort: 443)

    func decide(_ host: String?, _ target: String, on serverName: String = "www.youtube.com", method: HTTPMethod = .GET, hosts: Int = 1) throws
        -> InspectedOutcome
    {
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: target)
        if let host { for _ in 0..<hosts { head.headers.add(name: "Host", value: host) } }
        let connection = InspectedConnectionFacts(serverName: try HostName(serverName), flow: Self.flow, uid: 1000)
        return InspectedRequests.decide(head, connection: connection, plan: Self.plan, engine: try Self.engine())
    }

    @Test func anAllowedVideoGoesOnWithTheRestrictHeader() throws {
        let outcome = try decide("www.youtube.com", "/watch?v=ALLOWEDvid1")
        #expect(outcome.forwards && outcome.decision.headers == [HeaderField(name: "YouTube-Restrict", value: "Strict")])
        #expect(outcome.report.verdict == .allow && outcome.report.kind == "https" && outcome.report.path == "/watch?v=ALLOWEDvid1")
        #expect(outcome.report.host == "www.youtube.com" && outcome.report.uid == 1000 && outcome.report.flow == Self.flow)
    }

    @Test func aBlockedVideoAURLEntryAndTheirRecords() throws {
        let video = try decide("www.youtube.com", "/watch?v=BLOCKEDvid1")
        #expect(!video.forwards && video.decision.headers.isEmpty)
        #expect(video.report.verdict == .drop && video.report.reason.source == .inspectBlock && video.report.reason.category == "youtube.blockVideos")
        let forbidden = try decide("www.google.com", "/forbidden/page", on: "www.google.com")
        #expect(!forbidden.forwards && forbidden.report.reason.category == "adult")
        // Its host is not blocked, only that URL.
        #expect(try decide("www.google.com", "/", on: "www.google.com").forwards)
        // What the block page shows: the URL, the reason, and that the site is inspected.
        let shown = InspectedRequests.blockedRequest(video, serverName: try HostName("www.youtube.com"))
        #expect(shown.url == "https://www.youtube.com/watch?v=BLOCKEDvid1" && shown.inspected && shown.category == "youtube.blockVideos")
    }

    @Test func searchTermsGoInTheRecord() throws {
        let youtube = try decide("www.youtube.com", "/results?search_query=cute+cats")
        #expect(youtube.forwards && youtube.report.searchTerm == "cute cats")
        let google = try decide("www.google.com", "/search?q=maths&q=physics", on: "www.google.com")
        #expect(google.report.searchTerm == "maths | physics")
        #expect(try decide("www.youtube.com", "/").report.searchTerm == nil)
    }

    @Test func aRequestForAnotherNameOrWithoutOneHostIsBlocked() throws {
        // Another name than the connection's (fronting), none, two, and a tunnel.
        for outcome in [
            try decide("allowed.example", "/"), try decide("www.google.com", "/", on: "www.youtube.com"), try decide(nil, "/"),
            try decide("www.youtube.com", "/", hosts: 2), try decide("www.youtube.com:443", "www.youtube.com:443", method: .CONNECT),
        ] {
            #expect(!outcome.forwards && outcome.report.verdict == .drop && outcome.report.reason.source == .inspectBlock, "\(outcome.decision.decision)")
        }
        // The name with a port, or another case, is the same name.
        #expect(try decide("WWW.YouTube.com:443", "/").forwards)
    }

    @Test func theServerGetsNoHopByHopHeadersAndTheRestrictHeaderOnce() {
        var head = HTTPRequestHead(version: .http1_0, method: .POST, uri: "/youtubei/v1/player")
        head.headers.add(name: "Host", value: "www.youtube.com")
        head.headers.add(name: "Connection", value: "keep-alive, X-Secret")
        head.headers.add(name: "X-Secret", value: "1")
        head.headers.add(name: "Keep-Alive", value: "timeout=5")
        head.headers.add(name: "Upgrade", value: "websocket")
        head.headers.add(name: "youtube-restrict", value: "Off")
        head.headers.add(name: "Content-Length", value: "4")
        let sent = InspectedRequests.upstreamHead(head, setting: [HeaderField(name: "YouTube-Restrict", value: "Strict")])
        #expect(sent.version == .http1_1 && sent.method == .POST && sent.uri == "/youtubei/v1/player")
        #expect(sent.headers.map(\.name) == ["Host", "Content-Length", "YouTube-Restrict"], "\(sent.headers)")
        #expect(sent.headers["youtube-restrict"] == ["Strict"])
        // A Connection header cannot make the framing or the Host go.
        var sly = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/")
        sly.headers.add(name: "Host", value: "www.youtube.com")
        sly.headers.add(name: "Connection", value: "content-length, host, transfer-encoding")
        sly.headers.add(name: "Transfer-Encoding", value: "chunked")
        #expect(InspectedRequests.upstreamHead(sly, setting: []).headers.map(\.name) == ["Host", "Transfer-Encoding"])
    }

    /// What a server reads from the bytes the proxy sends for the first request
    /// of `raw` (the browser's bytes): read with NIO's server codec as the proxy
    /// reads them, its head passed through `upstreamHead`, written with NIO's
    /// request encoder as the proxy writes it; the heads of the requests the server finds.
    static func serverReads(_ raw: String) throws -> [HTTPRequestHead] {
        let browser = EmbeddedChannel(handler: ByteToMessageHandler(HTTPRequestDecoder()))
        try browser.writeInbound(ByteBuffer(string: raw))
        let upstream = EmbeddedChannel(handler: HTTPRequestEncoder())
        read: while let part = try browser.readInbound(as: HTTPServerRequestPart.self) {
            switch part {
            case .head(let head): try upstream.writeOutbound(HTTPClientRequestPart.head(InspectedRequests.upstreamHead(head, setting: [])))
            case .body(let body): try upstream.writeOutbound(HTTPClientRequestPart.body(.byteBuffer(body)))
            case .end(let trailers):
                try upstream.writeOutbound(HTTPClientRequestPart.end(trailers))
                break read
            }
        }
        var wire = ByteBuffer()
        while let data = try upstream.readOutbound(as: IOData.self) {
            guard case .byteBuffer(var bytes) = data else { continue }
            wire.writeBuffer(&bytes)
        }
        let server = EmbeddedChannel(handler: ByteToMessageHandler(HTTPRequestDecoder()))
        try server.writeInbound(wire)
        var heads: [HTTPRequestHead] = []
        while let part = try server.readInbound(as: HTTPServerRequestPart.self) {
            if case .head(let head) = part { heads.append(head) }
        }
        return heads
    }

    @Test func aRequestsBodyReachesTheServerAsABodyHoweverItWasFramed() throws {
        // A body that reads as the end of a chunked body and a second request: the server
        // must read it as the body it is, never as a request the proxy did not decide.
        let smuggled = "0\r\n\r\nGET /watch?v=BLOCKEDvid1 HTTP/1.1\r\nHost: www.youtube.com\r\n\r\n"
        let chunked = String(smuggled.utf8.count, radix: 16) + "\r\n" + smuggled + "\r\n0\r\n\r\n"
        for (method, encoding) in [("GET", "gzip, chunked"), ("GET", "chunked"), ("POST", "gzip, chunked"), ("DELETE", "deflate, chunked")] {
            let heads = try Self.serverReads(
                "\(method) / HTTP/1.1\r\nHost: www.youtube.com\r\nTransfer-Encoding: \(encoding)\r\n\r\n" + chunked)
            #expect(heads.map(\.uri) == ["/"], "\(method) with Transfer-Encoding: \(encoding): the server read \(heads.map(\.uri))")
            #expect(heads.first?.headers["transfer-encoding"] == ["chunked"] && heads.first?.headers["content-length"] == [])
        }
        let counted = try Self.serverReads(
            "OPTIONS / HTTP/1.1\r\nHost: www.youtube.com\r\nContent-Length: \(smuggled.utf8.count)\r\n\r\n" + smuggled)
        #expect(counted.map(\.uri) == ["/"] && counted.first?.headers["content-length"] == [String(smuggled.utf8.count)])
        // TRACE, whose body NIO's encoder would leave unframed, is not passed on at all.
        let trace = try decide("www.youtube.com", "/", method: .TRACE)
        #expect(!trace.forwards && trace.report.reason.source == .inspectBlock, "\(trace.decision.decision)")
    }

    @Test func theBrowserGetsNoAltSvcAndTheConnectionsOwnEnd() {
        var head = HTTPResponseHead(version: .http1_1, status: .ok)
        head.headers.add(name: "Content-Type", value: "text/html")
        head.headers.add(name: "Alt-Svc", value: "h3=\":443\"")
        head.headers.add(name: "Connection", value: "close")
        let kept = InspectedRequests.browserHead(head, version: .http1_1, keepAlive: true)
        #expect(kept.headers.map(\.name) == ["Content-Type"] && kept.status == .ok)
        let ending = InspectedRequests.browserHead(head, version: .http1_0, keepAlive: false)
        #expect(ending.version == .http1_0 && ending.headers["connection"] == ["close"])
    }

    @Test func aServerThatCannotBeCheckedIsABlockedRequest() throws {
        let failed = InspectedRequests.certificateFailure(try decide("www.youtube.com", "/watch?v=ALLOWEDvid1"), detail: "the certificate does not verify")
        #expect(!failed.forwards && failed.report.verdict == .drop && failed.report.reason.category == "certificate")
        let shown = InspectedRequests.blockedRequest(failed, serverName: try HostName("www.youtube.com"))
        #expect(shown.reason == "the site's certificate could not be checked" && shown.rule == "the certificate does not verify")
        let page = ProxyPages.builtIn.renderer.blockPage(for: shown, acceptLanguage: nil)
        let head = InspectedRequests.responseHead(for: page, version: .http1_1, keepAlive: true)
        #expect(head.status == .forbidden && head.headers["content-length"] == [String(page.body.count)])
    }
}

/// The leaves the browsers are shown, and what the server side trusts.
@Suite struct InterceptionTests {
    final class Clock: Sendable {
        let now = Mutex(Date())
        func advance(_ seconds: TimeInterval) { now.withLock { $0 += seconds } }
    }

    static func authority() throws -> InterceptionAuthority {
        try InterceptionAuthority.make(names: ["youtube.com", "www.google.com"], organization: "Lakeside", now: Date())
    }

    @Test func aLeafIsKeptForItsNameUntilItGrowsOld() throws {
        let clock = Clock()
        var policy = LeafPolicy()
        policy.capacity = 2
        let leaves = try LeafCertificates(authority: try Self.authority(), policy: policy, clock: { clock.now.withLock { $0 } })
        let first = try leaves.chain(for: "www.youtube.com")
        let again = try leaves.chain(for: "WWW.YOUTUBE.COM")
        #expect(first.count == 2 && again == first, "one leaf for a name, however it is written")
        let leaf = try Certificate(derEncoded: try first[0].toDERBytes())
        #expect(try leaf.extensions.subjectAlternativeNames == SubjectAlternativeNames([.dnsName("www.youtube.com")]))
        #expect(leaf.notValidAfter.timeIntervalSince(leaf.notValidBefore) == policy.lifetime + policy.backdating)
        clock.advance(policy.renewalAge + 1)
        let renewed = try leaves.chain(for: "www.youtube.com")
        #expect(renewed != first, "an old leaf is made again")
        // Bounded: a third name drops the one used longest ago.
        _ = try leaves.chain(for: "m.youtube.com")
        _ = try leaves.chain(for: "www.google.com")
        #expect(leaves.count == 2)
    }

    @Test func hallpasssOwnCAsAreNeverTrustedUpstream() throws {
        let authority = try Self.authority()
        let other = try InterceptionAuthority.make(names: ["example.org"], organization: "Elsewhere", now: Date())
        let third = try InterceptionAuthority.make(names: ["example.net"], organization: "Public", now: Date())
        let roots = try [authority, other, third].map { try NIOSSLCertificate(bytes: $0.certificateDER, format: .der) }
        let (key, certificate) = authority.handover
        // The CA handed over is left out though the hand-over does not name it; `other` because it does.
        let interception = try Interception(
            handover: InterceptionHandover(key: key, certificate: certificate, untrustedKeys: [other.keyHash]), trustRoots: roots, inspected: { _ in true })
        #expect(interception.untrustedRootsLeftOut == 2)
        #expect(Interception.keyHash(of: roots[2]) == third.keyHash)
    }

    /// A TLS handshake from a client naming `name` with the browser's side of
    /// `interception`, on two embedded channels; the leaf the client was shown, nil when it got none.
    static func handshake(_ name: String, with interception: Interception) throws -> NIOSSLCertificate? {
        let server = EmbeddedChannel()
        try server.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: interception.serverContext))
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .none
        let client = EmbeddedChannel()
        let tls = try NIOSSLClientHandler(context: try NIOSSLContext(configuration: configuration), serverHostname: name)
        try client.pipeline.syncOperations.addHandler(tls)
        defer {
            // NIOSSL's close waits for the peer's close_notify or its own timeout: the embedded clock moves on to it.
            for channel in [client, server] {
                channel.close(promise: nil)
                channel.embeddedEventLoop.advanceTime(by: .seconds(60))
            }
        }
        client.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 443), promise: nil)
        server.connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: 40_000), promise: nil)
        // The two sides' bytes go back and forth until neither has more to say (or one fails).
        for _ in 0..<20 {
            var moved = false
            while let bytes = try client.readOutbound(as: ByteBuffer.self) {
                moved = true
                do { try server.writeInbound(bytes) } catch { return nil }
                server.embeddedEventLoop.run()
            }
            while let bytes = try server.readOutbound(as: ByteBuffer.self) {
                moved = true
                do { try client.writeInbound(bytes) } catch { return nil }
            }
            if !moved { break }
        }
        return tls.peerCertificate
    }

    @Test func aLeafIsMadeOnlyForANameSomePlanInspects() throws {
        let (key, certificate) = try Self.authority().handover
        let interception = try Interception(
            handover: InterceptionHandover(key: key, certificate: certificate, untrustedKeys: []), trustRoots: [],
            inspected: { $0 == "www.youtube.com" || $0 == "accounts.google.com" })
        // The placeholder the TLS configuration needs (never sent) is the one leaf so far.
        let before = interception.leaves.count
        let leaf = try #require(try Self.handshake("www.youtube.com", with: interception))
        let shown = try Certificate(derEncoded: try leaf.toDERBytes())
        #expect(try shown.extensions.subjectAlternativeNames == SubjectAlternativeNames([.dnsName("www.youtube.com")]))
        // Not inspected (though the CA's constraints cover it), and inspected but outside the CA's constraints: no leaf.
        #expect(try Self.handshake("m.youtube.com", with: interception) == nil)
        #expect(try Self.handshake("accounts.google.com", with: interception) == nil)
        #expect(interception.leaves.count == before + 1)
    }
}
