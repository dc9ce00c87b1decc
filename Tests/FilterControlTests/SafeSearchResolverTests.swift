import HallpassWire
import Foundation
import Synchronization
import Testing
import VerdictCore

@testable import FilterControl

/// The SafeSearch enforcement hosts' addresses that filter-control keeps
/// for filter-data, with the lookups faked (the machine's resolver is met
/// in the integration tests).
@Suite struct SafeSearchResolverTests {
    final class Answers: Sendable {
        let next = Mutex<[String: SafeSearchResolver.Answer]>([:])
        let asked = Mutex<[String]>([])
    }

    /// A resolver whose lookups answer what `answers` holds (nil: no server answered).
    func resolver(_ answers: Answers, published: [SafeSearchEngine: [IPAddress]] = [:]) -> SafeSearchResolver {
        SafeSearchResolver(published: published) { host in
            answers.asked.withLock { $0.append(host) }
            return answers.next.withLock { $0[host] }
        }
    }

    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func anAnswerBecomesTheTargetAndIsAskedAgainAtItsTimeToLive() async {
        let answers = Answers()
        let google = [IPAddress("198.51.100.7")!]
        answers.next.withLock { $0["forcesafesearch.google.com"] = .init(addresses: google, timeToLive: 120) }
        let resolver = resolver(answers)
        let start = Self.start
        #expect(resolver.targets(for: [.google], now: start).isEmpty, "nothing before the first lookup (no published addresses here)")
        let first = await resolver.refresh(engines: [.google], now: start)
        #expect(first == .init(changed: true, events: []), "a new target is a change, to hand over at once")
        #expect(resolver.targets(for: [.google], now: start) == [.google: SafeSearchTarget(addresses: google, timeToLive: 120)])
        #expect(resolver.targets(for: [.bing], now: start).isEmpty, "an engine never looked up has no target")
        // Not due yet: no question.
        #expect(await resolver.refresh(engines: [.google], now: start.addingTimeInterval(60)) == .init())
        #expect(answers.asked.withLock { $0 } == ["forcesafesearch.google.com"])
        // Due, and the same answer: asked, but nothing changed, nothing to hand over.
        #expect(await resolver.refresh(engines: [.google], now: start.addingTimeInterval(121)) == .init(changed: false, events: []))
        #expect(answers.asked.withLock { $0.count } == 2)
        // A new address is a change.
        answers.next.withLock { $0["forcesafesearch.google.com"] = .init(addresses: [IPAddress("198.51.100.8")!], timeToLive: 120) }
        #expect(await resolver.refresh(engines: [.google], now: start.addingTimeInterval(242)).changed)
    }

    @Test func addressesSeenInTheLastHourStayAndAFailureKeepsThemAndIsSaidOnce() async {
        let answers = Answers()
        let first = IPAddress("192.0.2.1")!
        let second = IPAddress("192.0.2.2")!
        answers.next.withLock { $0["restrict.youtube.com"] = .init(addresses: [first], timeToLive: 7200) }
        let resolver = resolver(answers)
        let start = Self.start
        _ = await resolver.refresh(engines: [.youtubeStrict], now: start)
        // Long times to live are asked again within the hour, and answers carry at most 300 s.
        #expect(resolver.targets(for: [.youtubeStrict], now: start)[.youtubeStrict]?.timeToLive == 300)

        answers.next.withLock { $0["restrict.youtube.com"] = .init(addresses: [second], timeToLive: 5) }
        _ = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3600))
        #expect(resolver.targets(for: [.youtubeStrict], now: start.addingTimeInterval(3600))[.youtubeStrict]?.addresses == [first, second])
        #expect(resolver.targets(for: [.youtubeStrict], now: start.addingTimeInterval(3600))[.youtubeStrict]?.timeToLive == 30, "at least 30 s")

        // The resolver fails: what was known stays, the failure is said once, and it is tried
        // again after 1 s, then 2 s, 4 s, ...
        answers.next.withLock { $0["restrict.youtube.com"] = nil }
        let failed = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3630))
        #expect(failed.events == [.unresolvable(.youtubeStrict, reason: "no name server answered", meanwhile: .known([second]))], "\(failed)")
        #expect(!failed.changed)
        #expect(resolver.targets(for: [.youtubeStrict], now: start.addingTimeInterval(3630))[.youtubeStrict]?.addresses == [second])
        #expect(await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3630.5)) == .init())
        #expect(answers.asked.withLock { $0.count } == 3, "not again before 1 s")
        #expect(await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3631)) == .init(), "the second failure is not said again")
        #expect(answers.asked.withLock { $0.count } == 4)
        _ = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3632))
        #expect(answers.asked.withLock { $0.count } == 4, "then after 2 s")
        _ = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3633))
        #expect(answers.asked.withLock { $0.count } == 5)
        // An hour after the last answer that named it, an address is gone.
        #expect(resolver.targets(for: [.youtubeStrict], now: start.addingTimeInterval(3600 + 3601)).isEmpty)
        // The host resolves again: said once, and handed over.
        answers.next.withLock { $0["restrict.youtube.com"] = .init(addresses: [first], timeToLive: 300) }
        let back = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3600 + 3601))
        #expect(back == .init(changed: true, events: [.resolved(.youtubeStrict, [first])]))
    }

    @Test func theRetryDelayDoublesUpTo30Seconds() {
        #expect((1...7).map { SafeSearchResolver.retryDelay(after: $0) } == [1, 2, 4, 8, 16, 30, 30])
    }

    @Test func anUnresolvableHostGetsThePublishedAddressesUntilTheResolvedOnesReplaceThem() async {
        let answers = Answers()
        // The test's own "published" addresses (documentation ranges); the real table is checked below.
        let published = [IPAddress("192.0.2.120")!, IPAddress("2001:db8::78")!]
        let resolver = resolver(answers, published: [.google: published])
        let start = Self.start
        #expect(
            resolver.targets(for: [.google, .bing], now: start) == [.google: SafeSearchTarget(addresses: published, timeToLive: 30)],
            "published addresses from the start, with a short time to live; bing has none and no target")

        let failed = await resolver.refresh(engines: [.google, .bing], now: start)
        #expect(
            failed.events == [
                .unresolvable(.bing, reason: "no name server answered", meanwhile: .blocked),
                .unresolvable(.google, reason: "no name server answered", meanwhile: .published(published)),
            ], "\(failed)")
        #expect(!failed.changed)
        #expect("\(failed.events[1])".contains("cannot resolve forcesafesearch.google.com") && "\(failed.events[1])".contains("192.0.2.120"))
        #expect("\(failed.events[0])".contains("stay blocked"))
        #expect(await resolver.refresh(engines: [.google, .bing], now: start.addingTimeInterval(1)).events.isEmpty, "said once")

        // The first answer replaces them: no published address is left in the target.
        let resolved = [IPAddress("10.77.1.3")!]
        answers.next.withLock { $0["forcesafesearch.google.com"] = .init(addresses: resolved, timeToLive: 300) }
        let back = await resolver.refresh(engines: [.google], now: start.addingTimeInterval(3))
        #expect(back == .init(changed: true, events: [.resolved(.google, resolved)]))
        #expect(resolver.targets(for: [.google], now: start.addingTimeInterval(3)) == [.google: SafeSearchTarget(addresses: resolved, timeToLive: 300)])
        #expect(resolver.describe([.google, .bing], now: start.addingTimeInterval(3)) == "bing blocked until strict.bing.com resolves; google -> forcesafesearch.google.com 10.77.1.3")
    }

    @Test func thePublishedAddressesAreGooglesOwnAndNoOtherEngineHasAny() {
        #expect(SafeSearchResolver.publishedAddresses == [.google: [IPAddress("216.239.38.120")!, IPAddress("2001:4860:4802:32::78")!]])
    }

    @Test func anAnswerWhoseAQuestionGotNoReplyIsNotTakenForIPv6Alone() async {
        let answers = Answers()
        let published = [IPAddress("192.0.2.120")!, IPAddress("2001:db8::78")!]
        let resolver = resolver(answers, published: [.google: published])
        let start = Self.start
        // Only the AAAA question was answered (the A query was lost): taking it would give an A
        // question a CNAME without an address.
        answers.next.withLock { $0["forcesafesearch.google.com"] = .init(addresses: [IPAddress("2001:db8::1")!], timeToLive: 300, complete: false) }
        let partial = await resolver.refresh(engines: [.google], now: start)
        #expect(partial.events == [.unresolvable(.google, reason: "no reply to the A question", meanwhile: .published(published))])
        #expect(resolver.targets(for: [.google], now: start)[.google]?.addresses == published)
        // IPv4 addresses without the AAAA answer are taken, and asked again soon (1 s), not at the time to live.
        let v4 = IPAddress("10.77.1.3")!
        answers.next.withLock { $0["forcesafesearch.google.com"] = .init(addresses: [v4], timeToLive: 300, complete: false) }
        #expect(await resolver.refresh(engines: [.google], now: start.addingTimeInterval(1)) == .init(changed: true, events: [.resolved(.google, [v4])]))
        #expect(resolver.targets(for: [.google], now: start.addingTimeInterval(1))[.google]?.addresses == [v4])
        let asked = answers.asked.withLock { $0.count }
        answers.next.withLock { $0["forcesafesearch.google.com"] = .init(addresses: [v4, IPAddress("2001:db8::1")!], timeToLive: 300) }
        _ = await resolver.refresh(engines: [.google], now: start.addingTimeInterval(4))
        #expect(answers.asked.withLock { $0.count } == asked + 1)
        #expect(resolver.targets(for: [.google], now: start.addingTimeInterval(4))[.google]?.addresses.count == 2)
        // An answer without any address (NXDOMAIN, NODATA for both) is a failure too.
        let noData = Answers()
        noData.next.withLock { $0["strict.bing.com"] = .init(addresses: [], timeToLive: 0) }
        let empty = await self.resolver(noData).refresh(engines: [.bing], now: start)
        #expect(empty.events == [.unresolvable(.bing, reason: "no addresses in the answer", meanwhile: .blocked)])
    }

    @Test func aBoundedRefreshEndsWhileALookupHangsAndCountsItAsFailed() async {
        let resolver = SafeSearchResolver(published: [.google: [IPAddress("192.0.2.120")!]]) { _ in
            // A resolver that never answers (cancelled by the bound).
            try? await Task.sleep(for: .seconds(3600))
            return nil
        }
        let outcome = await resolver.refresh(engines: [.google], now: Self.start, within: .milliseconds(200))
        #expect(outcome.events == [.unresolvable(.google, reason: "no name server answered", meanwhile: .published([IPAddress("192.0.2.120")!]))])
        #expect(resolver.targets(for: [.google], now: Self.start)[.google]?.addresses == [IPAddress("192.0.2.120")!])
    }

    @Test func theQueryAsksForTheHostWithRecursion() throws {
        let bytes = try #require(MarkedDNSClient.query(id: 0x1234, host: "strict.bing.com", type: 28))
        guard case .success(let message) = DNSMessageParser.parse(bytes) else {
            Issue.record("not a DNS message")
            return
        }
        #expect(message.header.id == 0x1234 && !message.header.isResponse && message.header.questionCount == 1)
        #expect(bytes[2] & 0x01 == 1, "recursion desired")
        #expect(message.question?.name == Array("strict.bing.com".utf8))
        #expect(message.question?.type == 28)
        #expect(MarkedDNSClient.query(id: 1, host: "bad..name", type: 1) == nil)
        #expect(MarkedDNSClient.query(id: 1, host: String(repeating: "a", count: 64) + ".example", type: 1) == nil)
        #expect(MarkedDNSClient.query(id: 1, host: "schüler.example", type: 1) == nil)
    }

    @Test func nameserversComeFromResolvConf() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("resolv-\(UInt32.random(in: 0...UInt32.max)).conf").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try "# comment\nsearch school.example\nnameserver 10.0.0.53\nnameserver fe80::1%eth0\nnameserver\tbad\nnameserver 10.0.0.54\nnameserver 10.0.0.55\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
        #expect(MarkedDNSClient.systemNameservers(path: path) == [IPAddress("10.0.0.53")!, IPAddress("fe80::1")!, IPAddress("10.0.0.54")!])
        // resolv.conf is often a link (systemd-resolved, resolvconf): it is read through.
        let link = path + ".link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        defer { try? FileManager.default.removeItem(atPath: link) }
        #expect(MarkedDNSClient.systemNameservers(path: link).count == 3)
    }
}
