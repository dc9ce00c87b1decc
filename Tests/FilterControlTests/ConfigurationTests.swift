import FilterControl
import Foundation
import SharedStore
import Logging
import NIOPosix
import ServiceLifecycle
import Testing
import VerdictCore

@Suite struct ConfigurationTests {
    @Test func theExampleParsesToWhatItSays() throws {
        let configuration = try Configuration(yaml: Configuration.example)
        #expect(configuration.queue.number == 0)
        #expect(configuration.queue.failMode == .open)
        // The rule source and its key are the school's to fill in: commented out.
        #expect(configuration.rules.source == nil)
        #expect(configuration.rules.trustedKeys.isEmpty)
        #expect(configuration.rules.refresh == 1800)
        #expect(configuration.rules.maxBundleBytes == 256 << 20)
        #expect(configuration.policy.blockedCategories == .only(["adult", "gambling"]))
        #expect(configuration.policy.allow == [try RulePattern("khanacademy.org")])
        #expect(configuration.policy.unknown == .allow)
        #expect(configuration.policy.askDefault == .allow && configuration.policy.askTimeoutMilliseconds == 2000)
        var bypass = BypassPolicy()
        bypass.safeSearch = [.google, .youtubeStrict]
        #expect(configuration.policy.bypass == bypass, "the bypass keys as written are the defaults")
        #expect(configuration.blockPage.organization == "Example School")
        #expect(configuration.blockPage.requestAccess?.url == "https://help.example.org/unblock?url={url}")
        #expect(configuration.blockPage.requestAccess?.perUser == AccessRequestStore.Limits(pending: 5, perDay: 20))
        #expect(configuration.admin.socket == "/run/hallpass/control.sock")
        // The audit log, the notice and the metrics endpoint, as written.
        let log = configuration.log
        #expect(log.file == "/var/log/hallpass/audit.jsonl" && log.maxFileBytes == 16 << 20 && log.keepFiles == 10 && log.retentionDays == 365)
        #expect(log.journald && log.syslog == nil && log.caFile == nil, "the collector is an example")
        #expect(log.facility == .local0 && log.syslogBuffer == 10_000)
        #expect(log.users == .name && log.allowed == .none)
        #expect(log.pseudonymKey == nil && log.machine == nil, "the key's path and the machine's name are examples")
        #expect(configuration.notify.enabled && configuration.notify.interval == 600)
        #expect(configuration.metrics == nil, "the metrics endpoint is an example: none unless written")
    }

    @Test func theExamplesRuleSourceLinesAreValidOnceUncommented() throws {
        let text = Configuration.example
            .replacingOccurrences(of: "  # source: ", with: "  source: ")
            .replacingOccurrences(of: "  # trustedKeys: ", with: "  trustedKeys: ")
        let configuration = try Configuration(yaml: text)
        #expect(configuration.rules.source == "https://rules.example.org/hallpass/")
        #expect(configuration.rules.trustedKeys.count == 1)
    }

    @Test func theProxysCAAndTrustStore() throws {
        let defaults = try Configuration(yaml: Configuration.example)
        #expect(defaults.proxy.ca == "/var/lib/hallpass/inspect-ca" && defaults.proxy.trustFile == "/etc/ssl/certs/ca-certificates.crt")
        let set = try Configuration(yaml: "proxy:\n  ca: /srv/inspect-ca\n  trustFile: /srv/roots.pem\n")
        #expect(set.proxy.ca == "/srv/inspect-ca" && set.proxy.trustFile == "/srv/roots.pem")
        #expect(throws: ConfigurationError.self) { try Configuration(yaml: "proxy:\n  ca: relative/folder\n") }
    }

    @Test func anEmptyFileGivesTheDefaults() throws {
        let configuration = try Configuration(yaml: "")
        #expect(configuration == Configuration())
        #expect(configuration.policy.blockedCategories == .all)
    }

    @Test(arguments: [
        ("policy:\n  unknown: maybe\n", "policy.unknown"),
        ("policy:\n  blok: [a]\n", "policy.blok"),
        ("queue:\n  failMode: sideways\n", "queue.failMode"),
        ("queue:\n  number: 70000\n", "queue.number"),
        ("rules:\n  source: http://rules.example.org/\n", "rules.source"),
        ("rules:\n  source: https://rules.example.org/x?y=1\n", "rules.source"),
        ("rules:\n  source: https://user@rules.example.org/\n", "rules.source"),
        ("rules:\n  maxBundleBytes: 1000\n", "rules.maxBundleBytes"),
        ("rules:\n  pins: [ \"sha256/!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\" ]\n", "rules.pins[0]"),
        ("rules:\n  trustedKeys: [ \"ed25519:short\" ]\n", "rules.trustedKeys[0]"),
        ("rules:\n  refresh: 5s\n", "rules.refresh"),
        ("rules:\n  directory: relative/path\n", "rules.directory"),
        ("policy:\n  allow: [ \"bad host\" ]\n", "policy.allow[0]"),
        ("policy:\n  block: [ \"Bad Category\" ]\n", "policy.block[0]"),
        ("blockPage:\n  requestAccess:\n    text: x\n", "blockPage.requestAccess"),
        ("blockPage:\n  address: not-an-ip\n", "blockPage.address"),
        ("blockPage:\n  requestAccess:\n    text: x\n    url: builtin\n    perUser:\n      pending: 0\n", "blockPage.requestAccess.perUser.pending"),
        ("blockPage:\n  requestAccess:\n    text: x\n    url: builtin\n    perUser:\n      daily: 3\n", "blockPage.requestAccess.perUser.daily"),
        ("surprise: 1\n", "surprise"),
        ("policy:\n  askDefault: ask\n", "policy.askDefault"),
        ("policy:\n  askTimeout: 2h\n", "policy.askTimeout"),
        ("policy:\n  askTimeout: 5ms\n", "policy.askTimeout"),
        ("policy:\n  blockedDNS: redirect\n", "policy.blockedDNS"),
        ("blockPage:\n  address: \"::1\"\n", "blockPage.address"),
        ("blockPage:\n  address6: 127.0.0.1\n", "blockPage.address6"),
        ("blockPage:\n  httpsPort: 0\n", "blockPage.httpsPort"),
        ("blockPage:\n  templates: relative/folder\n", "blockPage.templates"),
        ("proxy:\n  ca: /etc/hallpass/ca/\n", "proxy.ca"),
        ("blockPage:\n  ca: /srv/ca\nproxy:\n  ca: /srv/ca\n", "proxy.ca"),
    ])
    func errorsNameTheKey(yaml: String, key: String) {
        do {
            _ = try Configuration(yaml: yaml)
            Issue.record("accepted \(yaml)")
        } catch {
            #expect(error.key == key)
            #expect(error.description.contains(key))
        }
    }

    @Test func thePerUserLimitsOfTheFormDefaultAndCanBeSet() throws {
        let plain = try Configuration(yaml: "blockPage:\n  requestAccess:\n    text: Ask\n    url: builtin\n")
        #expect(plain.blockPage.requestAccess?.perUser == AccessRequestStore.Limits(pending: 5, perDay: 20))
        let set = try Configuration(yaml: "blockPage:\n  requestAccess:\n    text: Ask\n    url: builtin\n    perUser:\n      pending: 2\n      perDay: 7\n")
        #expect(set.blockPage.requestAccess?.perUser == AccessRequestStore.Limits(pending: 2, perDay: 7))
    }

    @Test func plainHTTPSourcesAreRefusedWithAReason() {
        #expect(throws: ConfigurationError.self) { try Configuration(yaml: "rules:\n  source: http://x.example/\n") }
        do {
            _ = try Configuration(yaml: "rules:\n  source: http://x.example/\n")
        } catch {
            #expect(error.message.contains("https://"))
            #expect(error.line == 2)
        }
    }

    @Test func blockAllAndNoLink() throws {
        let configuration = try Configuration(yaml: "policy:\n  block: all\n  noName: block\nblockPage:\n  requestAccess: null\n")
        #expect(configuration.policy.blockedCategories == .all)
        #expect(configuration.policy.noName == .block)
        #expect(configuration.blockPage.requestAccess == nil)
    }

    @Test func invalidYAMLIsAnError() {
        #expect(throws: ConfigurationError.self) { try Configuration(yaml: "policy: [unclosed\n") }
    }
}

extension ConfigurationTests {
    @Test func blockedNamesResolveToTheBlockPageUnlessTold() throws {
        let defaults = try Configuration(yaml: "")
        #expect(defaults.policy.dnsRewrite == Policy.DNSRewrite(ipv4: IPAddress("127.0.0.1")!, ipv6: IPAddress("::1")!))
        let moved = try Configuration(yaml: "blockPage:\n  address: 127.0.0.9\n  address6: \"fd00::9\"\n")
        #expect(moved.policy.dnsRewrite?.ipv4 == IPAddress("127.0.0.9") && moved.policy.dnsRewrite?.ipv6 == IPAddress("fd00::9"))
        #expect(try Configuration(yaml: "policy:\n  blockedDNS: drop\n").policy.dnsRewrite == nil)
    }

    @Test func askDurations() throws {
        #expect(try Configuration(yaml: "policy:\n  askTimeout: 750ms\n").policy.askTimeoutMilliseconds == 750)
        #expect(try Configuration(yaml: "policy:\n  askTimeout: 3s\n").policy.askTimeoutMilliseconds == 3000)
        #expect(try Configuration(yaml: "policy:\n  askTimeout: 1500\n  askDefault: block\n").policy.askDefault == .block)
    }

    @Test func lookupFilesAreParsedStrictly() {
        #expect(LookupResult.parse("# comment\ngambling\n\nGames\nttl 60\n") == .categories(["gambling", "games"], timeToLive: 60))
        #expect(LookupResult.parse("") == .categories([], timeToLive: LookupResult.defaultTimeToLive))
        if case .unavailable = LookupResult.parse("<html>not found</html>") {} else { Issue.record("HTML taken for a category") }
        if case .unavailable = LookupResult.parse("ttl forever\n") {} else { Issue.record("a bad ttl taken") }
    }
}

@Suite struct AdminSocketTests {
    @Test func aRequestAndItsAnswerCrossTheSocket() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-admin-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/control.sock"
        let server = try await AdminService(path: path, group: nil, logger: Logger(label: "test")) { request, peer in
            let reply = AdminReply(exitCode: 0, output: "\(request.command.rawValue) \(request.targets ?? []) uid \(peer.uid)\n")
            return try! AdminCoding.encoder.encode(reply)
        }
        let group = ServiceGroup(services: [server], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        defer {
            Task { await group.triggerGracefulShutdown() }
        }
        var status = stat()
        #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o600, "only the owner may connect without an admin group")
        // The client blocks its thread while the service answers on the
        // cooperative pool (two threads on a two-core machine): the client
        // goes to a thread of its own.
        let data = try await NIOThreadPool.singleton.runIfActive {
            try AdminClient.send(AdminRequest(command: .check, targets: ["a.example"]), to: path)
        }
        let reply = try AdminCoding.decoder.decode(AdminReply.self, from: data)
        #expect(reply.output == "check [\"a.example\"] uid \(getuid())\n", "the peer's uid comes from SO_PEERCRED")
        // Nonsense gets an answer saying so, not a hang or a crash.
        let client = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(connected == 0)
        _ = "not json\n".withCString { write(client, $0, 9) }
        let answer = try await NIOThreadPool.singleton.runIfActive {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = read(client, &buffer, buffer.count)
            return String(decoding: buffer[0..<max(0, count)], as: UTF8.self)
        }
        #expect(answer.contains("admin.bad-request"))
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(stat(path, &status) != 0, "the socket file goes with the service")
    }

    @Test func noDaemonIsAClearError() {
        #expect(throws: AdminSocketError.self) {
            try AdminClient.send(AdminRequest(command: .status), to: "/tmp/hallpass-no-such-\(UUID().uuidString).sock")
        }
    }
}
