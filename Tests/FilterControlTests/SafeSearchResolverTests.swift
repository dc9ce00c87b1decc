import FilterData
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
        let next = Mutex<[String: (addresses: [IPAddress], timeToLive: UInt32)?]>([:])
        let asked = Mutex<[String]>([])
    }

    func resolver(_ answers: Answers) -> SafeSearchResolver {
        SafeSearchResolver { host in
            answers.asked.withLock { $0.append(host) }
            return answers.next.withLock { $0[host] ?? nil }
        }
    }

    @Test func anAnswerBecomesTheTargetAndIsAskedAgainAtItsTimeToLive() async {
        let answers = Answers()
        let google = [IPAddress("216.239.38.120")!]
        answers.next.withLock { $0["forcesafesearch.google.com"] = (google, 120) }
        let resolver = resolver(answers)
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(await resolver.refresh(engines: [.google], now: start).isEmpty)
        #expect(resolver.targets(for: [.google], now: start) == [.google: SafeSearchTarget(addresses: google, timeToLive: 120)])
        #expect(resolver.targets(for: [.bing], now: start).isEmpty, "an engine never looked up has no target")
        // Not due yet: no question.
        _ = await resolver.refresh(engines: [.google], now: start.addingTimeInterval(60))
        #expect(answers.asked.withLock { $0 } == ["forcesafesearch.google.com"])
        _ = await resolver.refresh(engines: [.google], now: start.addingTimeInterval(121))
        #expect(answers.asked.withLock { $0.count } == 2)
    }

    @Test func addressesSeenInTheLastHourStayAndAFailureKeepsThem() async {
        let answers = Answers()
        let first = IPAddress("192.0.2.1")!
        let second = IPAddress("192.0.2.2")!
        answers.next.withLock { $0["restrict.youtube.com"] = ([first], 7200) }
        let resolver = resolver(answers)
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        _ = await resolver.refresh(engines: [.youtubeStrict], now: start)
        // Long times to live are asked again within the hour, and answers carry at most 300 s.
        #expect(resolver.targets(for: [.youtubeStrict], now: start)[.youtubeStrict]?.timeToLive == 300)

        answers.next.withLock { $0["restrict.youtube.com"] = ([second], 5) }
        _ = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3600))
        #expect(resolver.targets(for: [.youtubeStrict], now: start.addingTimeInterval(3600))[.youtubeStrict]?.addresses == [first, second])
        #expect(resolver.targets(for: [.youtubeStrict], now: start.addingTimeInterval(3600))[.youtubeStrict]?.timeToLive == 30, "at least 30 s")

        // The resolver fails: what was known stays, the failure is reported, and it is tried again after 30 s.
        answers.next.withLock { $0["restrict.youtube.com"] = nil }
        let failures = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3630))
        #expect(failures.count == 1 && failures[0].contains("restrict.youtube.com"), "\(failures)")
        #expect(resolver.targets(for: [.youtubeStrict], now: start.addingTimeInterval(3630))[.youtubeStrict]?.addresses == [second])
        _ = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3640))
        #expect(answers.asked.withLock { $0.count } == 3, "not again before 30 s")
        _ = await resolver.refresh(engines: [.youtubeStrict], now: start.addingTimeInterval(3661))
        #expect(answers.asked.withLock { $0.count } == 4)
        // An hour after the last answer that named it, an address is gone.
        #expect(resolver.targets(for: [.youtubeStrict], now: start.addingTimeInterval(3600 + 3601)).isEmpty)
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
