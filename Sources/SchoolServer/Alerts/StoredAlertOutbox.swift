import ServiceLifecycle
import VerdictCore

/// The alerts table as the delivery's outbox: the alerts the ingest wrote
/// and no worker has taken yet, as the messages the email and the webhook
/// say. The ingest writes an alert in the records' transaction with
/// `dispatched` 0; the worker writes its deliveries, then marks it here.
struct StoredAlertOutbox: AlertOutbox {
    let storage: any ServerStorage

    func undispatched(limit: Int) async throws -> [AlertMessage] {
        try await storage.undispatchedAlerts(limit: limit).map(Self.message)
    }

    func markDispatched(ids: [String]) async throws {
        _ = try await storage.markAlertsDispatched(ids: ids)
    }

    static func message(_ alert: StoredAlert) -> AlertMessage {
        let severity: AlertMessage.Severity =
            switch alert.severity {
            case .danger: .danger
            case .caution: .caution
            case .advisory: .advisory
            }
        return AlertMessage(
            id: alert.id, time: alert.time, severity: severity, rule: alert.ruleID, user: alert.user, group: alert.group, room: alert.room,
            machine: alert.machine, action: alert.action, host: alert.host, url: alert.url, category: alert.category,
            searchTerm: alert.searchTerm)
    }
}

/// Wakes the delivery whenever the ingest pokes the signal, until either ends.
struct AlertSignalRelay: Sendable {
    let signal: AlertSignal
    let delivery: AlertDeliveryService

    func run() async {
        for await _ in signal.pokes { delivery.wake() }
    }
}

/// The relay as a service: it ends with the server's graceful shutdown
/// (a stream of pokes never ends by itself while the ingest may still poke).
struct AlertWakeService: Service {
    let relay: AlertSignalRelay

    func run() async throws {
        await cancelWhenGracefulShutdown { await relay.run() }
    }
}
