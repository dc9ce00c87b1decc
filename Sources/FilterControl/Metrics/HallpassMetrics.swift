public import CoreMetrics
public import FilterData
public import Foundation
public import Prometheus
import Synchronization

/// What filter-control counts for Prometheus, through swift-metrics with
/// swift-prometheus behind it (its own registry, no global bootstrap).
/// Counters that filter-data or the kernel keep (rewrites, netlink errors,
/// queue drops, restarts, audit drops) are brought up to their source's
/// total at each scrape; a source that started over (filter-data restarted)
/// adds what it counted since.
public final class HallpassMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let decisions = Mutex<[String: CoreMetrics.Counter]>([:])
    private let flows = Mutex<[String: CoreMetrics.Counter]>([:])
    private let refusals = Mutex<[String: CoreMetrics.Counter]>([:])
    /// The last value seen of each mirrored total, by metric name.
    private let mirrored = Mutex<[String: UInt64]>([:])
    private let roundTrip: CoreMetrics.Timer
    private let rulesVersion: CoreMetrics.Gauge
    private let lastSuccess: CoreMetrics.Gauge

    public init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["hallpass_needrules_round_trip_seconds"] = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
            .milliseconds(10), .milliseconds(50), .milliseconds(100), .milliseconds(500), .seconds(1), .seconds(2),
        ]
        self.factory = factory
        roundTrip = CoreMetrics.Timer(label: "hallpass_needrules_round_trip_seconds", factory: factory)
        rulesVersion = CoreMetrics.Gauge(label: "hallpass_rules_version", factory: factory)
        lastSuccess = CoreMetrics.Gauge(label: "hallpass_rules_last_success_timestamp_seconds", factory: factory)
    }

    /// A decision filter-data reported (a flow's first, or a blocked DNS query).
    public func record(_ report: FlowReport) {
        let action = report.verdict == .allow ? "allow" : "block"
        let category = report.reason.category ?? "-"
        let key = action + "\u{0}" + category + "\u{0}" + report.kind
        let counter = decisions.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = CoreMetrics.Counter(
                label: "hallpass_decisions_total", dimensions: [("action", action), ("category", category), ("kind", report.kind)], factory: factory)
            counters[key] = counter
            return counter
        }
        counter.increment()
        guard report.kind != "dns" else { return }
        let flow = flows.withLock { counters in
            if let counter = counters[report.kind] { return counter }
            let counter = CoreMetrics.Counter(label: "hallpass_flows_total", dimensions: [("kind", report.kind)], factory: factory)
            counters[report.kind] = counter
            return counter
        }
        flow.increment()
    }

    /// A needRules question answered, from filter-data's question to filter-control's answer.
    public func answered(after duration: Duration) {
        let (seconds, attoseconds) = duration.components
        roundTrip.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    public func rulesRefused(code: String) {
        let counter = refusals.withLock { counters in
            if let counter = counters[code] { return counter }
            let counter = CoreMetrics.Counter(label: "hallpass_rules_refused_total", dimensions: [("code", code)], factory: factory)
            counters[code] = counter
            return counter
        }
        counter.increment()
    }

    public func rules(version: UInt64, lastSuccess: Date?) {
        rulesVersion.record(Double(version))
        if let lastSuccess { self.lastSuccess.record(lastSuccess.timeIntervalSince1970) }
    }

    /// Brings a counter kept elsewhere up to `total`.
    public func mirror(_ name: String, total: UInt64) {
        let increase: UInt64 = mirrored.withLock { seen in
            let previous = seen[name] ?? 0
            seen[name] = total
            // A total below the last one: its source started over (filter-data restarted).
            return total >= previous ? total - previous : total
        }
        let counter = CoreMetrics.Counter(label: name, factory: factory)
        if increase > 0 { counter.increment(by: Int64(clamping: increase)) }
    }

    /// The text Prometheus scrapes.
    public func exposition() -> [UInt8] {
        registry.emitToBuffer()
    }
}
