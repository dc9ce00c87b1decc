import CoreMetrics
public import HallpassIPC
public import Foundation
public import Prometheus
import Synchronization

/// What filter-control counts for Prometheus: recorded through swift-metrics
/// (CoreMetrics), kept in swift-prometheus's registry (its own, no global
/// bootstrap) by `DescribedPrometheusFactory`, which gives every metric its
/// help text (`promtool check metrics` asks for one). Counters that
/// filter-data or the kernel keep (rewrites, netlink errors, queue drops,
/// restarts, audit drops) are brought up to their source's total at each
/// scrape; a source that started over (filter-data restarted) adds what it
/// counted since.
public final class HallpassMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    private let factory: DescribedPrometheusFactory
    /// The last value seen of each mirrored total, by metric name.
    private let mirrored = Mutex<[String: UInt64]>([:])
    private let roundTrip: CoreMetrics.Timer
    private let rulesVersion: CoreMetrics.Gauge
    private let lastSuccess: CoreMetrics.Gauge

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
        "hallpass_school_records_waiting": "Audit records in the outbox that the school's server has not stored yet.",
        "hallpass_school_records_sent_total": "Audit records the school's server said it stored.",
        "hallpass_school_records_dropped_total": "Audit records the outbox dropped unsent (school.queueMaxSize, school.queueMaxAge).",
    ]

    public init() {
        factory = DescribedPrometheusFactory(
            registry: registry, help: Self.help,
            durationBuckets: [
                "hallpass_needrules_round_trip_seconds": [
                    .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
                    .milliseconds(10), .milliseconds(50), .milliseconds(100), .milliseconds(500), .seconds(1), .seconds(2),
                ]
            ])
        roundTrip = CoreMetrics.Timer(label: "hallpass_needrules_round_trip_seconds", factory: factory)
        rulesVersion = CoreMetrics.Gauge(label: "hallpass_rules_version", factory: factory)
        lastSuccess = CoreMetrics.Gauge(label: "hallpass_rules_last_success_timestamp_seconds", factory: factory)
    }

    /// A decision filter-data reported (a flow's first, or a blocked DNS query).
    public func record(_ report: FlowReport) {
        record(contentsOf: FlowReportLines(CollectionOfOne(report)))
    }

    /// The decisions of a batch of reports: counted by labels first, so each
    /// counter is looked up and increased once per batch, not once per
    /// report; a label is made a String once per run of equal labels (a
    /// batch is mostly one kind of flow, allowed, in no category).
    public func record(contentsOf reports: FlowReportLines) {
        var decisions: [DecisionLabels: Int64] = [:]
        var flows: [String: Int64] = [:]
        var run: (line: FlowReport.Fields, labels: DecisionLabels, count: Int64)? = nil
        func close() {
            guard let run else { return }
            decisions[run.labels, default: 0] += run.count
            if run.labels.kind != "dns" { flows[run.labels.kind, default: 0] += run.count }
        }
        for index in 0..<reports.count {
            guard let fields = reports.summary(index) else { continue }
            let allowed = fields.verdict == .allow
            if let current = run, current.labels.allowed == allowed, current.line.kind.elementsEqual(fields.kind),
                current.line.category.elementsEqual(fields.category)
            {
                run?.count += 1
                continue
            }
            close()
            let category = fields.category.elementsEqual("-".utf8) ? "-" : String(decoding: fields.category, as: UTF8.self)
            run = (fields, DecisionLabels(allowed: allowed, category: category, kind: String(decoding: fields.kind, as: UTF8.self)), 1)
        }
        close()
        guard !decisions.isEmpty else { return }
        counters.withLock { cache in
            for (labels, count) in decisions {
                let counter =
                    cache.decisions[labels]
                    ?? CoreMetrics.Counter(
                        label: "hallpass_decisions_total",
                        dimensions: [("action", labels.allowed ? "allow" : "block"), ("category", labels.category), ("kind", labels.kind)], factory: factory)
                // Bounded by what the labels can be: categories of the rules, kinds of flows.
                if cache.decisions.count < Self.maximumLabelSets { cache.decisions[labels] = counter }
                counter.increment(by: count)
            }
            for (kind, count) in flows {
                let counter = cache.flows[kind] ?? CoreMetrics.Counter(label: "hallpass_flows_total", dimensions: [("kind", kind)], factory: factory)
                if cache.flows.count < Self.maximumLabelSets { cache.flows[kind] = counter }
                counter.increment(by: count)
            }
        }
    }

    private struct DecisionLabels: Hashable {
        var allowed: Bool
        var category: String
        var kind: String
    }

    /// Counters kept at hand per label set (the registry would find them again, at a cost per lookup).
    private let counters = Mutex<(decisions: [DecisionLabels: CoreMetrics.Counter], flows: [String: CoreMetrics.Counter])>(([:], [:]))
    private static let maximumLabelSets = 4096

    /// A needRules question answered, from filter-data's question to filter-control's answer.
    public func answered(after duration: Duration) {
        let (seconds, attoseconds) = duration.components
        roundTrip.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    public func rulesRefused(code: String) {
        CoreMetrics.Counter(label: "hallpass_rules_refused_total", dimensions: [("code", code)], factory: factory).increment()
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
        // Made at the first scrape even at zero, so the series exists from the start.
        let counter = CoreMetrics.Counter(label: name, factory: factory)
        if increase > 0 { counter.increment(by: Int64(clamping: increase)) }
    }

    /// Sets a gauge kept elsewhere to `value`.
    public func gauge(_ name: String, value: Double) {
        CoreMetrics.Gauge(label: name, factory: factory).record(value)
    }

    /// The text Prometheus scrapes.
    public func exposition() -> [UInt8] {
        registry.emitToBuffer()
    }
}

/// swift-metrics' factory over a swift-prometheus registry, like
/// swift-prometheus's own `PrometheusMetricsFactory` but with each metric's
/// help text from a table (that one registers every metric without one, and
/// the registry refuses two help texts for one name).
struct DescribedPrometheusFactory: CoreMetrics.MetricsFactory {
    let registry: PrometheusCollectorRegistry
    let help: [String: String]
    let durationBuckets: [String: [Duration]]

    private func descriptor(_ label: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: label, unitName: "", helpText: help[label] ?? "")
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        // hallpass records values only as gauges.
        registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        registry.makeDurationHistogram(
            descriptor: descriptor(label), labels: dimensions, buckets: durationBuckets[label] ?? [.milliseconds(1), .milliseconds(10), .milliseconds(100), .seconds(1)])
    }

    // The metrics live as long as filter-control.
    func destroyCounter(_ handler: any CounterHandler) {}
    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {}
    func destroyRecorder(_ handler: any RecorderHandler) {}
    func destroyMeter(_ handler: any MeterHandler) {}
    func destroyTimer(_ handler: any TimerHandler) {}
}
