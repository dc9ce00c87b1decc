import CHallpassSys
import FilterControl
import Foundation
import HallpassIPC
import Logging
import NIOCore
import NIOPosix
import Testing
import VerdictCore

extension TestNetwork {
    /// rsyslogd (Debian's package) in the server namespace with
    /// docs/examples/rsyslog-collector.conf, the school's collector of the
    /// fleet guide, listening on TCP and UDP port 514 of the server. Returns
    /// the folder where it writes one file per machine (`<machine>.log`).
    func startCollector() throws -> String {
        guard access("/usr/sbin/rsyslogd", X_OK) == 0 else {
            throw TestNetworkError("rsyslogd is missing: scripts/install-deps.sh installs Debian's rsyslog")
        }
        let collected = folder + "/collector"
        let example = try String(contentsOfFile: TestNetwork.packageRoot + "/docs/examples/rsyslog-collector.conf", encoding: .utf8)
        guard example.contains("/var/log/hallpass-collector") else {
            throw TestNetworkError("docs/examples/rsyslog-collector.conf no longer writes under /var/log/hallpass-collector")
        }
        let configuration =
            "global(workDirectory=\"\(folder)/rsyslog-work\")\n"
            + example.replacingOccurrences(of: "/var/log/hallpass-collector", with: collected)
        try FileManager.default.createDirectory(atPath: folder + "/rsyslog-work", withIntermediateDirectories: true)
        try configuration.write(toFile: folder + "/rsyslog.conf", atomically: true, encoding: .utf8)
        try start(["ip", "netns", "exec", server, "rsyslogd", "-n", "-f", folder + "/rsyslog.conf", "-i", folder + "/rsyslog.pid"], log: "rsyslog")
        try waitFor("rsyslog to listen") {
            try shell("ip netns exec \(server) ss -ltn | grep -q ':514 '").status == 0
                && shell("ip netns exec \(server) ss -lun | grep -q ':514 '").status == 0
        }
        return collected
    }
}

/// The audit log and the desktop notice against real peers: rsyslog (the
/// school's collector, with docs/examples/rsyslog-collector.conf) in a
/// server namespace, and a real session bus (dbus-daemon) of a test uid with
/// a listener that owns org.freedesktop.Notifications.
@Suite(.serialized) struct AuditIntegrationTests {
    /// A blocked HTTPS flow to casino.example as filter-data reports it.
    static func blockedReport(uid: UInt32?) -> FlowReport {
        FlowReport(
            flow: FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.2")!, sourcePort: 40_000, destination: IPAddress("192.0.2.7")!, destinationPort: 443),
            uid: uid, kind: "tls", host: "casino.example", path: nil, verdict: .drop,
            reason: Reason(source: .category, category: "gambling", rule: "casino.example"))
    }

    let logger = Logger(label: "hallpass.audit.integration")

    /// An event loop whose one thread lives in the network namespace `name`:
    /// every socket NIO makes on it is made there.
    static func eventLoopGroup(inNamespace name: String) throws -> MultiThreadedEventLoopGroup {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let entered = try group.next().submit { () -> Bool in
            let descriptor = open("/run/netns/\(name)", O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { return false }
            defer { close(descriptor) }
            return hp_enter_network_namespace(descriptor) == 0
        }.wait()
        guard entered else {
            try? group.syncShutdownGracefully()
            throw TestNetworkError("cannot enter the namespace \(name)")
        }
        return group
    }

    @Test func rsyslogReceivesTheRecordsOverTCPAndUDP() async throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let collected = try network.startCollector()

        let group = try Self.eventLoopGroup(inNamespace: network.client)
        do {
            try await sendThroughRsyslog(network: network, group: group, collected: collected)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    func sendThroughRsyslog(network: TestNetwork, group: any EventLoopGroup, collected: String) async throws {
        for transport in [AuditSettings.SyslogTarget.Transport.tcp, .udp] {
            var settings = AuditSettings()
            settings.file = network.folder + "/audit-\(transport.rawValue).jsonl"
            settings.journald = false
            settings.machine = "lab-\(transport.rawValue)"
            settings.syslog = AuditSettings.SyslogTarget(transport: transport, host: network.serverIPv4, port: 514)
            let log = try AuditLog(
                settings: settings, rulesDirectory: network.folder, logger: logger, lookup: { _ in ("alice", "students") },
                eventLoopGroup: group)
            let running = Task { await log.run() }
            log.record(AuditRecord(report: Self.blockedReport(uid: 1001), time: Date(), rulesVersion: 9))
            let received = collected + "/lab-\(transport.rawValue).log"
            var found = false
            for _ in 0..<40 where !found {
                found = ((try? String(contentsOfFile: received, encoding: .utf8)) ?? "").contains("host=\"casino.example\"")
                if !found { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(found, "rsyslog wrote no record from \(transport) within 2 s: \(network.log("rsyslog"))")
            let line = (try? String(contentsOfFile: received, encoding: .utf8)) ?? ""
            for field in [
                "[hallpass@32473 ", "uid=\"1001\"", "user=\"alice\"", "group=\"students\"", "kind=\"tls\"", "destination=\"192.0.2.7\"",
                "port=\"443\"", "action=\"block\"", "category=\"gambling\"", "rule=\"casino.example\"", "reason=\"category\"",
                "rulesVersion=\"9\"", "block tls casino.example:443",
            ] {
                #expect(line.contains(field), "\(field) missing in \(line)")
            }
            log.finish()
            await running.value
            let counters = await log.counters()
            #expect(counters.syslog?.sent == 1 && counters.syslog?.dropped == 0)
            if transport == .tcp { #expect(counters.syslog?.connections == 1) }
        }
    }

    @Test func aBlockedFlowBecomesANoticeOnThePersonsSessionBus() async throws {
        guard getuid() == 0 else { throw TestNetworkError("the notice test needs root (it runs a bus as another uid)") }
        // A uid no account has: dbus-daemon learns it from a passwd file
        // mounted over /etc/passwd in its own mount namespace only.
        var uid = UInt32.random(in: 50_000...59_000)
        while getpwuid(uid) != nil { uid += 1 }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-notice-\(uid)-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        var processes: [ChildProcess] = []
        defer {
            for process in processes.reversed() { _ = process.stop() }
            try? FileManager.default.removeItem(atPath: folder)
        }
        let passwd = try String(contentsOfFile: "/etc/passwd", encoding: .utf8) + "hallpass-test:x:\(uid):\(uid):test:/nonexistent:/usr/sbin/nologin\n"
        let groups = try String(contentsOfFile: "/etc/group", encoding: .utf8) + "hallpass-test:x:\(uid):\n"
        try passwd.write(toFile: folder + "/passwd", atomically: true, encoding: .utf8)
        try groups.write(toFile: folder + "/group", atomically: true, encoding: .utf8)
        let bus = folder + "/bus"
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:path=\(bus)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """.write(toFile: folder + "/session.conf", atomically: true, encoding: .utf8)
        chmod(folder + "/passwd", 0o644)
        chmod(folder + "/group", 0o644)
        chmod(folder + "/session.conf", 0o644)
        chown(folder, uid, uid)
        chmod(folder, 0o700)
        let identity = ["setpriv", "--reuid=\(uid)", "--regid=\(uid)", "--clear-groups"]
        processes.append(
            try ChildProcess(
                [
                    "unshare", "--mount", "--propagation", "private", "sh", "-c",
                    "mount --bind \(folder)/passwd /etc/passwd && mount --bind \(folder)/group /etc/group && exec "
                        + identity.joined(separator: " ") + " dbus-daemon --config-file=\(folder)/session.conf --nofork",
                ], logPath: folder + "/bus.log"))
        func logs() -> String {
            ["bus", "listener"].map { ((try? String(contentsOfFile: folder + "/\($0).log", encoding: .utf8)) ?? "") }.joined(separator: "\n")
        }
        try await waitFor("the session bus") { access(bus, F_OK) == 0 }
        let calls = folder + "/calls.jsonl"
        let listener = TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/notification_listener.py"
        processes.append(
            try ChildProcess(
                identity + ["/usr/bin/python3", listener, "--address", "unix:path=\(bus)", "--out", calls],
                logPath: folder + "/listener.log"))
        try await waitFor("the notification listener") { access(calls + ".ready", F_OK) == 0 }

        // What dbus-daemon accepts: root, as itself, is turned away by a session bus.
        let asRoot = try SessionBus(address: "unix:path=\(bus)", uid: 0, gid: 0)
        #expect(throws: SessionBus.Failure.self) {
            _ = try asRoot.call(NoticeText(organization: "x", requestAccessURL: nil, blockPageURL: "").notifyCall(for: AuditRecord(report: Self.blockedReport(uid: nil), time: Date()), user: nil))
        }

        let notifier = DesktopNotifier(
            rule: NoticeRule(interval: 600, noticeForDNS: false),
            text: NoticeText(
                organization: "Example School", requestAccessURL: "https://help.example.org/unblock?url={url}", blockPageURL: "http://127.0.0.1:8080/"),
            logger: logger, locate: { _ in "unix:path=\(bus)" })
        let running = Task { await notifier.run() }
        let blocked = AuditRecord(report: Self.blockedReport(uid: uid), time: Date())
        notifier.consider(blocked)
        notifier.consider(blocked)  // the same person and name again: rate limited
        var lookedUp = blocked
        lookedUp.report.kind = "dns"
        lookedUp.report.host = "other.example"
        notifier.consider(lookedUp)  // a DNS answer points at the block page: no notice
        try await waitFor("the notice") { notifier.counters().sent + notifier.counters().failed >= 1 }
        notifier.finish()
        await running.value
        let counters = notifier.counters()
        #expect(counters.sent == 1 && counters.failed == 0 && counters.rateLimited == 1, "\(counters) \(logs())")
        let received = ((try? String(contentsOfFile: calls, encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(received.count == 1)
        let call = try #require(try JSONSerialization.jsonObject(with: Data((received.first ?? "").utf8)) as? [String: Any])
        #expect(call["app_name"] as? String == "hallpass")
        #expect(call["summary"] as? String == "Blocked: casino.example")
        #expect(
            call["body"] as? String
                == "Example School blocked casino.example: it is in the category gambling.\nTo ask for access: https://help.example.org/unblock?url=https%3A%2F%2Fcasino.example%2F"
        )
        #expect((call["actions"] as? [Any])?.isEmpty == true)
        #expect((call["hints"] as? [String: Any])?["urgency"] as? Int == 1)
        #expect(call["expire_timeout"] as? Int == 15_000)
        #expect(call["sender_uid"] as? Int == Int(uid), "the bus saw the person's uid, not root's")
    }

    /// Waits without holding a thread: the notifier runs on the same
    /// cooperative pool (two threads on a two-core machine).
    func waitFor(_ what: String, attempts: Int = 300, _ condition: () throws -> Bool) async throws {
        for _ in 0..<attempts {
            if try condition() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw TestNetworkError("timed out waiting for \(what)")
    }
}
