import Foundation
import Testing

/// The control channel with real traffic: needRules answered by the lookup
/// folder, rule swaps without a restart, restarts after a crash, and IPv6
/// packets with extension headers. Part of the serialized suite: one test
/// network at a time.
extension FilterIntegrationTests {
    /// Compiles `names` (category demo) into a store with `version`.
    func compile(_ network: TestNetwork, _ names: [String], version: Int, to store: String) throws {
        let list = network.folder + "/list-\(version).txt"
        try (names.joined(separator: "\n") + "\n").write(toFile: list, atomically: true, encoding: .utf8)
        let compile = try shell("\(TestNetwork.binaries)/filterctl compile --quiet --version \(version) --out \(store) demo=\(list)")
        #expect(compile.status == 0, "\(compile.output)")
    }

    func filterData(_ network: TestNetwork) throws -> Int32 {
        try #require(network.processIDs(runningExecutable: "filter-data").first, "no filter-data\n\(network.log("filter-control"))")
    }

    @Test func unknownNamesAreAskedAboutAndAnsweredFromTheLookup() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (_, store) = try prepare(network)
        // The lookup folder next to the bundle: one file per name, listing its categories.
        let source = network.folder + "/source"
        try FileManager.default.createDirectory(atPath: source + "/lookup", withIntermediateDirectories: true)
        try "education\n".write(toFile: source + "/lookup/school.test", atomically: true, encoding: .utf8)
        try "gambling\nttl 600\n".write(toFile: source + "/lookup/casino.test", atomically: true, encoding: .utf8)
        try "gambling\n".write(toFile: source + "/lookup/poker.allowed.test", atomically: true, encoding: .utf8)
        let config = network.folder + "/ask.yaml"
        try """
            queue:
              # The build folder has no _hallpass (the package's user for filter-data).
              user: nobody
              number: 3
            rules:
              source: file://\(source)/
              directory: \(network.folder)/lib
            policy:
              block: [ demo, gambling ]
              unknown: ask
              askDefault: block
              askTimeout: 2s
            log:
              file: \(network.folder)/audit.jsonl
              journald: false
            admin:
              socket: \(network.folder)/control.sock
            """.write(toFile: config, atomically: true, encoding: .utf8)
        try network.startDNS()
        _ = try startHallpass(network, config: config, store: store)

        // A DNS query held for the lookup's answer and then blocked: its answer
        // points at the block page, as a query judged on arrival does.
        let held = try network.inClient("dig +short +time=3 +tries=1 @\(network.serverIPv4) poker.allowed.test A")
        #expect(held.status == 0 && held.output.trimmingCharacters(in: .whitespacesAndNewlines) == "127.0.0.1", "dig exit \(held.status): \(held.output)\n\(network.log("filter-control"))")

        let school = try network.curl("https", "school.test")
        #expect(school.status == 0 && school.output == "ok school.test\n", "\(school.output)\n\(network.log("filter-control"))")
        let casino = try network.curl("https", "casino.test", ipv6: true)
        #expect([35, 56].contains(casino.status), "casino.test: exit \(casino.status) \(casino.output)")
        // The lookup does not know the name: policy.askDefault (block).
        let nobody = try network.curl("http", "nobody.test")
        #expect([52, 56].contains(nobody.status), "nobody.test: exit \(nobody.status) \(nobody.output)")
        // The store still decides first: blocked.test is in demo, allowed.test asks and gets the default.
        #expect([35, 56].contains(try network.curl("https", "blocked.test").status))
        // A second flow to an answered name is decided from filter-data's overlay (no new question).
        let again = try network.curl("https", "school.test")
        #expect(again.status == 0, "\(again.output)")

        // filterctl status shows the questions, their answers and the round trip.
        let status = try shell("\(TestNetwork.binaries)/filterctl status --json --socket \(network.folder)/control.sock")
        #expect(status.status == 0, "\(status.output)")
        try network.waitFor("the counters of the next health check") {
            let text = try shell("\(TestNetwork.binaries)/filterctl status --json --socket \(network.folder)/control.sock").output
            guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
                let counters = object["counters"] as? [String: Any]
            else { return false }
            return (counters["questions"] as? Int ?? 0) >= 3 && (counters["answers"] as? Int ?? 0) >= 3
                && (counters["roundTrips"] as? Int ?? 0) >= 3
        }
    }

    @Test func newRulesTakeEffectWithoutARestartAndBadOnesAreRefused() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (config, store) = try prepare(network)
        try compile(network, ["blocked.test"], version: 1, to: store)
        let hallpass = try startHallpass(network, config: config, store: store)
        try network.waitFor("the first health check") { network.log("filter-control").contains("is filtering with rules version 1") }
        let pid = try filterData(network)
        #expect([35, 56].contains(try network.curl("https", "blocked.test").status))
        #expect(try network.curl("https", "allowed.test").status == 0)

        // New flows keep coming while the rules change under them: every one is answered.
        let load = try network.start(
            [
                "ip", "netns", "exec", network.client, "sh", "-c",
                "for i in $(seq 1 150); do curl -s -o /dev/null -w '%{http_code}\\n' -m 5 --resolve h$i.other.test:80:\(network.serverIPv4) http://h$i.other.test/; done",
            ], log: "swap-load")
        try compile(network, ["allowed.test"], version: 2, to: store + ".new")
        #expect(rename(store + ".new", store) == 0)
        let reload = try shell("\(TestNetwork.binaries)/filterctl reload --socket \(network.folder)/control.sock")
        #expect(reload.status == 0 && reload.output.contains("rules version 2 now in force (was 1)"), "\(reload.output)")
        try network.waitFor("version 2") { network.log("filter-control").contains("now uses rules version 2") }
        #expect(load.wait() == 0)
        let codes = network.log("swap-load").split(separator: "\n")
        #expect(codes.count == 150 && codes.allSatisfy { $0 == "200" }, "\(network.log("swap-load"))")

        // The same filter-data process, now with the new rules.
        #expect(try filterData(network) == pid)
        #expect(try network.curl("https", "blocked.test").status == 0)
        #expect([35, 56].contains(try network.curl("https", "allowed.test").status))

        // A damaged store is refused; version 2 stays in force.
        let bytes = try Data(contentsOf: URL(fileURLWithPath: store))
        var damaged = bytes
        damaged[damaged.count / 2] ^= 0xFF
        try damaged.write(to: URL(fileURLWithPath: store + ".bad"))
        #expect(rename(store + ".bad", store) == 0)
        let refused = try shell("\(TestNetwork.binaries)/filterctl reload --socket \(network.folder)/control.sock")
        #expect(refused.status == 65 && refused.output.contains("reload refused"), "\(refused.output)")
        // SIGHUP does the same as filterctl reload.
        kill(hallpass.pid, SIGHUP)
        try network.waitFor("the refusal") { network.log("filter-control").components(separatedBy: "reload refused").count == 3 }
        #expect([35, 56].contains(try network.curl("https", "allowed.test").status))
        #expect(try network.curl("https", "blocked.test").status == 0)
        #expect(try filterData(network) == pid)

        // The daemon answers check with the rules in force, and status shows them.
        let check = try shell("\(TestNetwork.binaries)/filterctl check --socket \(network.folder)/control.sock allowed.test blocked.test")
        #expect(check.status == 0)
        #expect(check.output.hasPrefix("block\tallowed.test\tcategory demo") && check.output.contains("allow\tblocked.test"), "\(check.output)")
        let status = try shell("\(TestNetwork.binaries)/filterctl status --socket \(network.folder)/control.sock")
        #expect(status.status == 0 && status.output.contains("version 2") && status.output.contains("pid \(pid)"), "\(status.output)")
        #expect(status.output.contains("reload refused"))
    }

    @Test func aKilledFilterDataComesBackAndClosedModeLetsNothingThrough() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (config, store) = try prepare(network, failMode: "closed")
        _ = try startHallpass(network, config: config, store: store)
        let first = try filterData(network)

        // Attempts on a blocked name before, during and after the crash.
        let attempts = try network.start(
            [
                "ip", "netns", "exec", network.client, "sh", "-c",
                "for i in $(seq 1 40); do curl -s -o /dev/null -m 1 --resolve blocked.test:80:\(network.serverIPv4) http://blocked.test/; echo $?; done",
            ], log: "attempts")
        usleep(300_000)
        #expect(kill(first, SIGKILL) == 0)
        try network.waitFor("a new filter-data") {
            let pids = network.processIDs(runningExecutable: "filter-data")
            return !pids.isEmpty && !pids.contains(first)
        }
        try network.waitFor("the new filter-data to bind the queue") {
            try network.inClient("cat /proc/net/netfilter/nfnetlink_queue").output.split(separator: "\n").contains {
                $0.split(separator: " ", omittingEmptySubsequences: true).first == "3"
            }
        }
        #expect(attempts.wait() == 0)
        let results = network.log("attempts").split(separator: "\n")
        #expect(results.count == 40)
        // Never a success (0): refused by the filter, or no answer while it was down.
        #expect(!results.contains("0"), "\(results)")
        #expect(network.log("filter-control").contains("restarting"))
        #expect(try network.curl("https", "allowed.test").status == 0)
        #expect([35, 56].contains(try network.curl("https", "blocked.test").status))
    }

    @Test func ipv6PacketsWithExtensionHeadersAreJudged() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (config, store) = try prepare(network)
        _ = try startHallpass(network, config: config, store: store)
        // Count what leaves with a Destination Options header (a rule with no target only counts).
        #expect(try network.inClient("ip6tables -w -A OUTPUT -m ipv6header --header dst --soft").status == 0)
        let script = TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/v6_options_client.py"
        let allowed = try network.inClient("\(TestNetwork.python) \(script) --address \(network.serverIPv6) --name allowed.test")
        #expect(allowed.status == 0 && allowed.output == "ok allowed.test\n", "\(allowed.output)\n\(network.log("filter-control"))")
        let blocked = try network.inClient("\(TestNetwork.python) \(script) --address \(network.serverIPv6) --name www.blocked.test")
        #expect(blocked.status == 3, "exit \(blocked.status): \(blocked.output)")
        let counted = try network.inClient("ip6tables -w -L OUTPUT -v -x -n | grep -i ipv6header || ip6tables -w -L OUTPUT -v -x -n")
        let packets = counted.output.split(separator: "\n").compactMap { line in
            line.split(separator: " ", omittingEmptySubsequences: true).first.flatMap { Int($0) }
        }.first ?? 0
        #expect(packets > 0, "no packet carried the extension header: \(counted.output)")
    }
}
