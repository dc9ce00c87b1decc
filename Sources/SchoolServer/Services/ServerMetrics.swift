public import Prometheus
import VerdictCore

/// What hallpass-server counts for Prometheus (`GET /metrics`). The
/// server's own counters are made on the registry directly, so they count
/// also where swift-metrics is not bootstrapped (tests); `main` bootstraps
/// swift-metrics on the same registry for Hummingbird's request metrics.
public struct ServerMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    let enrolments: Counter
    let recordsReceived: Counter
    let recordsStored: Counter
    let recordsDroppedByMachines: Counter
    let checkIns: Counter
    let recordsRemoved: Counter
    let liveStates: Counter
    let liveItems: Counter
    let alertsSuppressed: Counter

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        enrolments = registry.makeCounter(descriptor: Self.counter("enrolments", "Machines enrolled."))
        recordsReceived = registry.makeCounter(descriptor: Self.counter("records_received", "Records machines posted, re-sent ones included."))
        recordsStored = registry.makeCounter(descriptor: Self.counter("records_stored", "Records stored (each machine and sequence once)."))
        recordsDroppedByMachines = registry.makeCounter(descriptor: Self.counter("records_dropped_by_machines", "Records the machines' queues dropped, as they reported."))
        checkIns = registry.makeCounter(descriptor: Self.counter("checkins", "Check-ins received."))
        recordsRemoved = registry.makeCounter(descriptor: Self.counter("records_removed", "Records removed by retention."))
        liveStates = registry.makeCounter(descriptor: Self.counter("live_states", "Live states sent to machines."))
        liveItems = registry.makeCounter(descriptor: Self.counter("live_items", "Live items made (room rules and answers to requests)."))
        alertsSuppressed = registry.makeCounter(
            descriptor: Self.counter("alerts_suppressed", "Safeguarding rule matches kept quiet by the repeat limit (no alert made)."))
        // Every severity from the start, at 0: a dashboard sees the series before the first alert.
        for severity in SafeguardingSeverity.allCases { _ = alerts(severity) }
        _ = retentionRemoved("records")
        for kind in RetainedKind.allCases { _ = retentionRemoved(kind.rawValue) }
    }

    /// Safeguarding alerts made, by severity.
    func alerts(_ severity: SafeguardingSeverity) -> Counter {
        registry.makeCounter(
            descriptor: Self.counter("alerts", "Safeguarding alerts made, by severity."), labels: [("severity", severity.rawValue)])
    }

    /// Rows removed by retention, by kind (`records` as `records_removed` counts them, and each `RetainedKind`).
    func retentionRemoved(_ kind: String) -> Counter {
        registry.makeCounter(
            descriptor: Self.counter("retention_removed", "Rows removed by retention, by kind of record."), labels: [("kind", kind)])
    }

    /// Counts one pass of retention.
    func countRemoved(_ removed: Retention.Removed) {
        if removed.records > 0 {
            recordsRemoved.increment(by: removed.records)
            retentionRemoved("records").increment(by: removed.records)
        }
        for (kind, count) in removed.kinds { retentionRemoved(kind.rawValue).increment(by: count) }
    }

    /// Refusals by their API code (`signature-invalid`, `token-expired`, ...).
    func refused(_ code: String) {
        registry.makeCounter(descriptor: Self.counter("refusals", "Requests refused, by code."), labels: [("code", code)]).increment()
    }

    /// `hallpass_server_<name>_total`.
    static func counter(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "hallpass", subsystem: "server", metricName: name, unitName: "total", helpText: help)
    }

    /// The text exposition format.
    public func render() -> [UInt8] {
        registry.emitToBuffer()
    }
}
