public import FilterData
public import Foundation
public import Prometheus
import Synchronization

/// What filter-control counts for Prometheus, in swift-prometheus's
/// registry (its own, no global bootstrap), each metric with its help text
/// (`promtool check metrics` asks for one). Counters that filter-data or the
/// kernel keep (rewrites, netlink errors, queue drops, restarts, audit
/// drops) are brought up to their source's total at each scrape; a source
/// that started over (filter-data restarted) adds what it counted since.
public final class HallpassMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    /// The last value seen of each mirrored total, by metric name.
    private let mirrored = Mutex<[String: UInt64]>([:])
    private let roundTrip: DurationHistogram
    private let rulesVersion: Gauge
    private let lastSuccess: Gauge

    /// Every metric's help text (docs/fleet.md lists the same).
    public static let help: [String: String] = [
        "hallpass_decisions_total": "Decisions filter-data reported: a flow's first decision or a DNS query, by action, category and how the flow showed its name.",
        "hallpass_flows_total": "Flows judged (DNS queries aside), by how they showed their name.",
        "hallpass_needrules_round_trip_seconds": "Time from filter-data's needRules question to filter-control's answer.",
        "hallpass_rules_refused_total": "Bundles or rules refused, by the reason's code.",
        "hallpass_rules_version": "Version of the rules in force.",
        "hallpass_rules_last_success_timestamp_seconds": "When rules were last installed or found current (Unix time).",
        "hallpass_dns_rewrites_total": "DNS answers filter-data rewrote (block page, SafeSearch, bypass names).",
        "hallpass_netlink_errors_total": "Errors on filter-data's queue socket.",
        "hallpass_queue_drops_total": "Packets the kernel dropped because the queue was full or filter-data's socket overran.",
        "hallpass_filter_data_restarts_total": "Times filter-control started filter-data again after it ended.",
        "hallpass_audit_dropped_total": "Audit records dropped (queue full or a collector's buffer full).",
        "hallpass_reports_dropped_total": "Decision reports filter-data dropped rather than wait on the control channel.",
    ]

    public init() {
        roundTrip = registry.makeDurationHistogram(
            descriptor: Self.descriptor("hallpass_needrules_round_trip_seconds"), labels: [],
            buckets: [
                .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
                .milliseconds(10), .milliseconds(50), .milliseconds(100), .milliseconds(500), .seconds(1), .seconds(2),
            ])
        rulesVersion = registry.makeGauge(descriptor: Self.descriptor("hallpass_rules_version"), labels: [])
        lastSuccess = registry.makeGauge(descriptor: Self.descriptor("hallpass_rules_last_success_timestamp_seconds"), labels: [])
    }

    /// `name` whole (no unit suffix added) with its help text.
    private static func descriptor(_ name: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help[name] ?? "")
    }

    /// The registry's counter (it keeps one per name and labels).
    private func counter(_ name: String, _ labels: [(String, String)] = []) -> Counter {
        registry.makeCounter(descriptor: Self.descriptor(name), labels: labels)
    }

    /// A decision filter-data reported (a flow's first, or a blocked DNS query).
    public func record(_ report: FlowReport) {
        let action = report.verdict == .allow ? "allow" : "block"
        let category = report.reason.category ?? "-"
        counter("hallpass_decisions_total", [("action", action), ("category", category), ("kind", report.kind)]).increment()
        guard report.kind != "dns" else { return }
        counter("hallpass_flows_total", [("kind", report.kind)]).increment()
    }

    /// A needRules question answered, from filter-data's question to filter-control's answer.
    public func answered(after duration: Duration) {
        roundTrip.record(duration)
    }

    public func rulesRefused(code: String) {
        counter("hallpass_rules_refused_total", [("code", code)]).increment()
    }

    public func rules(version: UInt64, lastSuccess: Date?) {
        rulesVersion.set(Double(version))
        if let lastSuccess { self.lastSuccess.set(lastSuccess.timeIntervalSince1970) }
    }

    /// Brings a counter kept elsewhere up to `total`.
    public func mirror(_ name: String, total: UInt64) {
        let increase: UInt64 = mirrored.withLock { seen in
            let previous = seen[name] ?? 0
            seen[name] = total
            // A total below the last one: its source started over (filter-data restarted).
            return total >= previous ? total - previous : total
        }
        // Made at the first scrape even at zero, so the series exists from the start.
        let counter = counter(name)
        if increase > 0 { counter.increment(by: Int64(clamping: increase)) }
    }

    /// The text Prometheus scrapes.
    public func exposition() -> [UInt8] {
        registry.emitToBuffer()
    }
}
