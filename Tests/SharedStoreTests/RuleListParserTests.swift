import Foundation
import SharedStore
import Testing
import VerdictCore

@Suite struct RuleListParserTests {
    func compile(_ text: String, urlList: Bool = false) throws -> (RuleStore, RuleListParser.Report) {
        var builder = RuleStoreBuilder()
        let category = try builder.category(named: "list")
        let report = RuleListParser().parse(Array(text.utf8), sourceName: "t", category: category, urlList: urlList, into: &builder)
        return (try RuleStore(bytes: try builder.build(version: 1).bytes), report)
    }

    func blocks(_ store: RuleStore, _ target: String) throws -> Bool {
        VerdictEngine(rules: store, policy: Policy()).decide(try CheckTarget(target).facts).verdict == .drop
    }

    @Test func hostsFiles() throws {
        let (store, report) = try compile("""
            # Title: test hosts
            127.0.0.1 localhost
            ::1 ip6-localhost ip6-loopback
            0.0.0.0 0.0.0.0
            0.0.0.0 ads.example tracker.example # two names
            127.0.0.1\tWWW.Mixed.Example.
            """)
        #expect(report.domainRules == 3)
        #expect(report.skippedLines == 0)
        for target in ["ads.example", "x.tracker.example", "www.mixed.example"] { #expect(try blocks(store, target)) }
        for target in ["localhost", "ip6-localhost", "example"] { #expect(try !blocks(store, target)) }
    }

    @Test func adblockAndDnsmasqLines() throws {
        let (store, report) = try compile("""
            [Adblock Plus 2.0]
            ! comment
            ||ads.example^
            ||third.example^$third-party
            ||path.example/ads^
            @@||allowed.example^
            server=/dns1.example/dns2.example/
            address=/dns3.example/0.0.0.0
            """)
        #expect(report.domainRules == 4)
        #expect(report.skippedLines == 3)
        for target in ["ads.example", "a.dns1.example", "dns2.example", "dns3.example"] { #expect(try blocks(store, target)) }
        #expect(try !blocks(store, "third.example"))
        #expect(report.skippedSamples.map(\.lineNumber) == [4, 5, 6])
    }

    @Test func plainListsWithEveryEntryKind() throws {
        let (store, report) = try compile("\u{FEFF}example.com\r\n=exact.example\r\n*.subs.example\n.dotted.example\nbücher.example\n10.0.0.0/8\nsite.example/path\n  \n\tspaced.example  \nhttp://scheme.example/p\n")
        #expect(report.skippedLines == 0)
        #expect(report.domainRules == 6)
        #expect(report.networkRules == 1)
        #expect(report.urlRules == 2)
        #expect(try blocks(store, "www.example.com"))
        #expect(try blocks(store, "exact.example") && !blocks(store, "www.exact.example"))
        #expect(try blocks(store, "a.subs.example") && !blocks(store, "subs.example"))
        #expect(try blocks(store, "www.dotted.example") && blocks(store, "xn--bcher-kva.example"))
        #expect(try blocks(store, "10.1.2.3") && blocks(store, "http://site.example/path/x") && blocks(store, "spaced.example"))
        #expect(try blocks(store, "http://scheme.example/p"))
    }

    @Test func badLinesAreCountedWithTheirLineNumbersAndTheRestIsKept() throws {
        let (store, report) = try compile("good.example\nbad host here\nex ample.com\n1.2.3.4/99\nalso-good.example\n")
        #expect(report.domainRules == 2)
        #expect(report.skippedLines == 3)
        #expect(report.skippedSamples.map(\.lineNumber) == [2, 3, 4])
        #expect(try blocks(store, "also-good.example"))
    }

    @Test func urlListsReadAddressesWithPathsAsURLs() throws {
        let (store, report) = try compile("192.0.2.7/42\nexample.com/a\n", urlList: true)
        #expect(report.urlRules == 2 && report.skippedLines == 0)
        #expect(try blocks(store, "http://192.0.2.7/42/x"))
        #expect(try !blocks(store, "http://192.0.2.7/43"))
    }

    @Test func duplicatesAreStoredOnce() throws {
        let (store, report) = try compile("a.example\nA.example\na.example.\n||a.example^\n")
        #expect(report.domainRules == 4)
        #expect(store.domainNameCount == 1)
    }

    @Test func realListsFromTestdata() throws {
        let hosts = try Data(contentsOf: TestData.url("blocklistproject/tiktok.txt"))
        let adguard = try Data(contentsOf: TestData.url("blocklistproject/adguard/tiktok-ags.txt"))
        let plain = try Data(contentsOf: TestData.url("blocklistproject/alt-version/tiktok-nl.txt"))
        var stores: [RuleStore] = []
        for data in [hosts, adguard, plain] {
            var builder = RuleStoreBuilder()
            let category = try builder.category(named: "tiktok")
            let report = RuleListParser().parse([UInt8](data), sourceName: "tiktok", category: category, into: &builder)
            // The README counts 3,725 entries in every format.
            #expect(report.domainRules == 3725)
            #expect(report.skippedLines == 0)
            stores.append(try RuleStore(bytes: try builder.build(version: 1).bytes))
        }
        #expect(stores.allSatisfy { $0.domainNameCount == stores[0].domainNameCount })
    }
}

enum TestData {
    /// ../shared/testdata from the package root, or $HALLPASS_TESTDATA.
    static var root: URL {
        if let override = ProcessInfo.processInfo.environment["HALLPASS_TESTDATA"] { return URL(fileURLWithPath: override) }
        return URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("shared/testdata")
    }

    static func url(_ relative: String) -> URL { root.appendingPathComponent(relative) }
}
