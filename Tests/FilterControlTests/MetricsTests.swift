import HallpassIPC
@testable import FilterControl
import Foundation
import Logging
import NIOPosix
import ServiceLifecycle
import Testing
import VerdictCore

#if canImport(Glibc)
import Glibc
#endif

/// The Prometheus endpoint: what HallpassMetrics counts, and the service
/// answering a scrape over a real socket on loopback. The integration test
/// `prometheusScrapesABlockedRequestIntoTheDecisionCounter` has the real
/// Prometheus and promtool.
@Suite struct MetricsTests {
    func report(_ verdict: Verdict, category: String?, kind: String) -> FlowReport {
        FlowReport(
            flow: FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.1")!, sourcePort: 40000, destination: IPAddress("192.0.2.7")!, destinationPort: 443),
            uid: 1001, kind: kind, host: "casino.example", path: nil, verdict: verdict,
            reason: Reason(source: category == nil ? .unknownHost : .category, category: category, rule: category == nil ? nil : "casino.example"))
    }

    func text(_ metrics: HallpassMetrics) -> String { String(decoding: metrics.exposition(), as: UTF8.self) }

    @Test func aBatchIsCountedByItsRunsOfEqualLabels() {
        let metrics = HallpassMetrics()
        metrics.record(contentsOf: FlowReportLines([
            report(.drop, category: "gambling", kind: "tls"), report(.drop, category: "gambling", kind: "tls"),
            report(.allow, category: nil, kind: "http"), report(.drop, category: "gambling", kind: "tls"),
            report(.drop, category: "gambling", kind: "dns"), report(.allow, category: "gambling", kind: "tls"),
            report(.allow, category: nil, kind: "http"),
        ]))
        let lines = text(metrics).split(separator: "\n").map(String.init)
        #expect(lines.contains(#"hallpass_decisions_total{action="block",category="gambling",kind="tls"} 3"#), "\(lines)")
        #expect(lines.contains(#"hallpass_decisions_total{action="block",category="gambling",kind="dns"} 1"#))
        #expect(lines.contains(#"hallpass_decisions_total{action="allow",category="gambling",kind="tls"} 1"#))
        #expect(lines.contains(#"hallpass_decisions_total{action="allow",category="-",kind="http"} 2"#))
        #expect(lines.contains(#"hallpass_flows_total{kind="tls"} 4"#) && lines.contains(#"hallpass_flows_total{kind="http"} 2"#))
    }

    @Test func decisionsAreCountedByActionCategoryAndKind() {
        let metrics = HallpassMetrics()
        metrics.record(report(.drop, category: "gambling", kind: "tls"))
        metrics.record(report(.drop, category: "gambling", kind: "tls"))
        metrics.record(report(.drop, category: "gambling", kind: "dns"))
        metrics.record(report(.allow, category: nil, kind: "http"))
        let lines = text(metrics).split(separator: "\n").map(String.init)
        #expect(lines.contains(#"hallpass_decisions_total{action="block",category="gambling",kind="tls"} 2"#), "\(lines)")
        #expect(lines.contains(#"hallpass_decisions_total{action="block",category="gambling",kind="dns"} 1"#))
        #expect(lines.contains(#"hallpass_decisions_total{action="allow",category="-",kind="http"} 1"#))
        // A DNS query is a decision, not a flow.
        #expect(lines.contains(#"hallpass_flows_total{kind="tls"} 2"#) && lines.contains(#"hallpass_flows_total{kind="http"} 1"#))
        #expect(!lines.contains { $0.hasPrefix(#"hallpass_flows_total{kind="dns"}"#) })
    }

    @Test func everyMetricHasItsHelpAndTypeAndIsInTheFleetGuide() throws {
        let metrics = HallpassMetrics()
        metrics.record(report(.drop, category: "gambling", kind: "tls"))
        metrics.answered(after: .milliseconds(3))
        metrics.rulesRefused(code: "bundle.expired")
        metrics.rules(version: 7, lastSuccess: Date())
        for name in ["hallpass_dns_rewrites_total", "hallpass_netlink_errors_total", "hallpass_queue_drops_total",
            "hallpass_filter_data_restarts_total", "hallpass_audit_dropped_total", "hallpass_reports_dropped_total",
            "hallpass_school_records_sent_total", "hallpass_school_records_dropped_total"] {
            metrics.mirror(name, total: 0)
        }
        metrics.gauge("hallpass_school_records_waiting", value: 0)
        let lines = text(metrics).split(separator: "\n").map(String.init)
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let guide = try String(contentsOf: root.appendingPathComponent("docs/fleet.md"), encoding: .utf8)
        #expect(HallpassMetrics.help.count == 15)
        for (name, help) in HallpassMetrics.help {
            #expect(lines.contains("# HELP \(name) \(help)"), "\(name) has no help line")
            #expect(lines.contains { $0.hasPrefix("# TYPE \(name) ") }, "\(name) is not in the exposition")
            #expect(guide.contains("`\(name)`"), "\(name) is not listed in docs/fleet.md")
        }
    }

    @Test func aMirroredTotalThatStartsOverKeepsCounting() {
        let metrics = HallpassMetrics()
        metrics.mirror("hallpass_audit_dropped_total", total: 5)
        metrics.mirror("hallpass_audit_dropped_total", total: 7)
        // filter-data restarted: its count starts again from 0 and has reached 3.
        metrics.mirror("hallpass_audit_dropped_total", total: 3)
        #expect(text(metrics).split(separator: "\n").contains("hallpass_audit_dropped_total 10"), "\(text(metrics))")
    }

    @Test func aScrapeGetsTheExpositionAndAnythingElseA404() async throws {
        let metrics = HallpassMetrics()
        metrics.record(report(.drop, category: "gambling", kind: "quic"))
        let service = try await MetricsService(address: "127.0.0.1", port: 0, logger: Logger(label: "test")) { metrics.exposition() }
        let port = try #require(service.server.channel.localAddress?.port)
        let group = ServiceGroup(services: [service], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        // Blocking clients, on a thread of their own: the service answers on the cooperative pool.
        let scrape = try await NIOThreadPool.singleton.runIfActive { try Self.get("/metrics", port: port) }
        let missing = try await NIOThreadPool.singleton.runIfActive { try Self.get("/", port: port) }
        let again = try await NIOThreadPool.singleton.runIfActive { try Self.get("/metrics", port: port) }
        await group.triggerGracefulShutdown()
        try await running.value

        #expect(scrape.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(scrape)")
        #expect(scrape.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"))
        #expect(scrape.contains(#"hallpass_decisions_total{action="block",category="gambling",kind="quic"} 1"#), "\(scrape)")
        #expect(missing.hasPrefix("HTTP/1.1 404 Not Found\r\n"), "\(missing)")
        #expect(again.hasPrefix("HTTP/1.1 200 OK\r\n"), "the endpoint still answers after a scrape and a 404: \(again)")
    }

    /// One HTTP/1.1 GET on a fresh connection; the whole answer (the server closes the connection).
    static func get(_ path: String, port: Int) throws -> String {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw Failure("socket: \(errno)") }
        defer { close(descriptor) }
        // Generous: the service answers on the cooperative pool, which the rest of the
        // suite (integration tests included, in CI) keeps busy; this only guards against a hang.
        var timeout = timeval(tv_sec: 120, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw Failure("connect: \(errno)") }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard write(descriptor, request, request.count) == request.count else { throw Failure("write: \(errno)") }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0 { throw Failure("read: errno \(errno) after \(answer.count) bytes") }
            guard count > 0 else { break }
            answer += buffer[0..<count]
        }
        return String(decoding: answer, as: UTF8.self)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
