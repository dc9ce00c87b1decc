import Prometheus

/// The outbox's numbers for Prometheus (docs/server.md, "Metrics"):
/// `hallpass_server_alert_deliveries{channel,state}`, how many deliveries
/// are waiting, sent and failed now (a gauge, counted after each pass of
/// the worker), and `hallpass_server_alert_delivery_attempts_total{channel,outcome}`,
/// each attempt by what came of it (`sent`, `retry`, `failed`); the
/// digests' emails apart, `hallpass_server_digest_deliveries{state}` and
/// `hallpass_server_digest_delivery_attempts_total{outcome}`.
struct AlertDeliveryMetrics: Sendable {
    let registry: PrometheusCollectorRegistry

    init(_ metrics: ServerMetrics) {
        registry = metrics.registry
        // Every series from the start, at 0: an alerting rule on "failed > 0" needs the series before the first failure.
        update([])
        for channel in AlertChannel.allCases {
            for outcome in ["sent", "retry", "failed"] { _ = attempts(channel, outcome) }
        }
        updateDigests([:])
        for outcome in ["sent", "retry", "failed"] { _ = digestAttempts(outcome) }
    }

    /// `hallpass_server_digest_deliveries{state}`: the digests' emails in the outbox.
    func updateDigests(_ counts: [AlertDeliveryState: Int64]) {
        for state in AlertDeliveryState.allCases {
            registry.makeGauge(
                descriptor: MetricNameDescriptor(
                    namespace: "hallpass", subsystem: "server", metricName: "digest_deliveries", unitName: "",
                    helpText: "Safeguarding digest emails by state (waiting, sent, failed)."),
                labels: [("state", state.rawValue)]
            ).set(to: Double(counts[state] ?? 0))
        }
    }

    func digestAttempt(_ outcome: AlertDeliveryOutcome) {
        switch outcome {
        case .sent: digestAttempts("sent").increment()
        case .retry: digestAttempts("retry").increment()
        case .failed: digestAttempts("failed").increment()
        }
    }

    private func digestAttempts(_ outcome: String) -> Counter {
        registry.makeCounter(
            descriptor: ServerMetrics.counter("digest_delivery_attempts", "Attempts to send a safeguarding digest's email, by outcome (sent, retry, failed)."),
            labels: [("outcome", outcome)])
    }

    func update(_ counts: [AlertDeliveryCount]) {
        for channel in AlertChannel.allCases {
            for state in AlertDeliveryState.allCases {
                let count = counts.first { $0.channel == channel && $0.state == state }?.count ?? 0
                registry.makeGauge(
                    descriptor: MetricNameDescriptor(
                        namespace: "hallpass", subsystem: "server", metricName: "alert_deliveries", unitName: "",
                        helpText: "Alert deliveries by channel and state (waiting, sent, failed)."),
                    labels: [("channel", channel.rawValue), ("state", state.rawValue)]
                ).set(to: Double(count))
            }
        }
    }

    func attempt(_ channel: AlertChannel, _ outcome: AlertDeliveryOutcome) {
        switch outcome {
        case .sent: attempts(channel, "sent").increment()
        case .retry: attempts(channel, "retry").increment()
        case .failed: attempts(channel, "failed").increment()
        }
    }

    private func attempts(_ channel: AlertChannel, _ outcome: String) -> Counter {
        registry.makeCounter(
            descriptor: ServerMetrics.counter("alert_delivery_attempts", "Attempts to deliver an alert, by channel and outcome (sent, retry, failed)."),
            labels: [("channel", channel.rawValue), ("outcome", outcome)])
    }
}
