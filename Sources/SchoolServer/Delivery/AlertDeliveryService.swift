import Foundation
import VerdictCore
public import Logging
public import ServiceLifecycle

/// Where the worker finds alerts that have no deliveries yet: the alerts
/// table of the ingest (`undispatchedAlerts(limit:)` and
/// `markAlertsDispatched`), joined in `buildApplication`. Enqueueing is
/// idempotent, so an alert read twice (two instances, or a stop between
/// the deliveries and the mark) is delivered once.
public protocol AlertOutbox: Sendable {
    /// Alerts not dispatched yet, oldest first, at most `limit`.
    func undispatched(limit: Int) async throws -> [AlertMessage]
    func markDispatched(ids: [String]) async throws
}

/// When a failed delivery is tried again: 10 s, 30 s, 1 min, 2 min, 5 min,
/// then every 10 minutes, for 24 hours from when it was made; a failure
/// whose next try would fall later is the last (`failed`).
public enum AlertRetrySchedule {
    public static let delays: [Int64] = [10, 30, 60, 120, 300]
    public static let every: Int64 = 600
    public static let giveUpAfter: Int64 = 86_400

    /// After the `failures`th failed attempt, made at `now`, of a delivery
    /// made at `createdAt`: when to try again (Unix seconds), or nil: failed for good.
    public static func next(failures: Int, createdAt: Int64, now: Int64) -> Int64? {
        let delay = (1...delays.count).contains(failures) ? delays[failures - 1] : every
        let next = now + delay
        return next > createdAt + giveUpAfter ? nil : next
    }
}

/// Who an alert goes to (docs/server.md, "Alert delivery"): by email, when its
/// severity is one of `alerts.email`, every safeguarding account that is
/// enabled, has an address and whose scope holds the alert's room or group,
/// and for a danger alert the group's `alerts.escalation` list (a failed
/// filtering test's alert, rule `filtering-test`, goes to every enabled admin
/// with an address as well); by webhook,
/// when one is set and the severity is one of its own. Each address once,
/// whatever its case.
public enum AlertRecipients {
    public static func plan(_ message: AlertMessage, people: [StoredPerson], alerts: AlertsConfiguration) -> [(channel: AlertChannel, target: String)] {
        var targets: [(AlertChannel, String)] = []
        var seen: Set<String> = []
        func add(_ address: String) {
            if seen.insert(address.lowercased()).inserted { targets.append((.email, address)) }
        }
        if alerts.email.contains(message.severity) {
            // A failed filtering test is the filter's own failure: the admins who mend it are told too.
            let filter = message.rule == SafeguardingPolicy.filteringTestRuleID
            for person in people.sorted(by: { $0.login < $1.login })
            where person.disabledAt == nil
                && ((person.role == .safeguarding && person.scope.contains(room: message.room, group: message.group)) || (filter && person.role == .admin))
            {
                if let email = person.email, MailAddress.refusal(email) == nil { add(email) }
            }
            if message.severity == .danger, let group = message.group {
                for address in alerts.escalation[group] ?? [] { add(address) }
            }
        }
        if let webhook = alerts.webhook, webhook.severities.contains(message.severity) {
            targets.append((.webhook, webhook.url))
        }
        return targets
    }
}

/// The alerts' outbox and its worker, one service of the server's group.
///
/// `enqueue` writes an alert's deliveries (one per email address, one for
/// the webhook) in one transaction and wakes the worker. The worker wakes
/// on that, on `wake()` (the ingest's signal) and every 5 seconds: it takes
/// the alerts of its `AlertOutbox` not dispatched yet and enqueues them,
/// then takes the deliveries that are due with a lease (60 s, longer than
/// any one attempt: sendmail's 30 s, the webhook's 10 s), so that two
/// server instances on one PostgreSQL never send one delivery at once, sends
/// them and writes each outcome. A failure is tried again on
/// `AlertRetrySchedule`; after 24 hours it is `failed`, counted and logged.
/// The safeguarding digests' emails share the outbox (`DigestService`): a
/// delivery of kind `digest` holds its whole email and is sent as it is.
public final class AlertDeliveryService: Service, Sendable {
    public struct Settings: Sendable {
        public var alerts: AlertsConfiguration
        /// `console.url` (no slash at its end).
        public var consoleURL: String
        /// Whether the safeguarding role sees pseudonyms (`console.pseudonyms`): then the emails name the pseudonym.
        public var pseudonyms: Bool
        /// How often the worker looks without being woken.
        public var interval: Duration = .seconds(5)
        /// Seconds a taken delivery is the taker's.
        public var lease: Int64 = 60
        /// Deliveries sent at once.
        public var batch: Int = 4

        public init(alerts: AlertsConfiguration, consoleURL: String, pseudonyms: Bool) {
            self.alerts = alerts
            self.consoleURL = consoleURL
            self.pseudonyms = pseudonyms
        }
    }

    let storage: any ServerStorage
    let settings: Settings
    let sendmail: SendmailCommand
    let webhookSecret: [UInt8]?
    let webhook: (any AlertWebhookTransport)?
    let outbox: (any AlertOutbox)?
    let metrics: AlertDeliveryMetrics
    let logger: Logger
    let clock: @Sendable () -> Int64
    /// This worker's name on the leases it holds.
    public let owner: String
    private let wakeUps: AsyncStream<Void>
    private let doorbell: AsyncStream<Void>.Continuation

    /// `webhookSecret` and `webhook` are needed when `settings.alerts.webhook` is set.
    public init(
        settings: Settings, storage: any ServerStorage, sendmail: SendmailCommand, webhookSecret: [UInt8]? = nil,
        webhook: (any AlertWebhookTransport)? = nil, outbox: (any AlertOutbox)? = nil, metrics: ServerMetrics, logger: Logger,
        clock: @escaping @Sendable () -> Int64
    ) {
        self.settings = settings
        self.storage = storage
        self.sendmail = sendmail
        self.webhookSecret = webhookSecret
        self.webhook = webhook
        self.outbox = outbox
        self.metrics = AlertDeliveryMetrics(metrics)
        self.logger = logger
        self.clock = clock
        owner = "w-" + Secrets.randomBase32(count: 16)
        // Wakes that come while a pass runs are one more pass, not one each.
        (wakeUps, doorbell) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        doorbell.yield()
    }

    /// The service as server.yaml describes it: `alerts:`, `console.url`,
    /// the webhook's secret read now (a missing or world-readable file stops the start).
    public static func make(
        configuration: ServerConfiguration, storage: any ServerStorage, outbox: (any AlertOutbox)? = nil, metrics: ServerMetrics,
        logger: Logger, clock: @escaping @Sendable () -> Int64
    ) throws -> AlertDeliveryService {
        let alerts = configuration.alerts
        var secret: [UInt8]?
        var transport: (any AlertWebhookTransport)?
        if let webhook = alerts.webhook {
            secret = try AlertWebhook.readSecret(webhook.secretFile)
            transport = HTTPClientWebhookTransport()
        }
        return AlertDeliveryService(
            settings: Settings(
                alerts: alerts, consoleURL: configuration.consoleURL, pseudonyms: configuration.consolePages.pseudonyms.contains(.safeguarding)),
            storage: storage, sendmail: SendmailCommand(command: alerts.sendmail), webhookSecret: secret, webhook: transport, outbox: outbox,
            metrics: metrics, logger: logger, clock: clock)
    }

    // MARK: The input

    /// Writes the alert's deliveries for its recipients now (one
    /// transaction; an alert enqueued before adds nothing) and wakes the
    /// worker; returns how many deliveries were added.
    @discardableResult
    public func enqueue(_ message: AlertMessage) async throws -> Int {
        let added = try await add(message)
        wake()
        return added
    }

    /// Asks the worker to look now (an alert was stored).
    public func wake() {
        doorbell.yield()
    }

    private func add(_ message: AlertMessage) async throws -> Int {
        if let refusal = message.refusal { throw ServerError(code: "alerts.message", message: refusal) }
        let targets = AlertRecipients.plan(message, people: try await storage.people(), alerts: settings.alerts)
        guard !targets.isEmpty else { return 0 }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let json = String(decoding: try encoder.encode(message), as: UTF8.self)
        return try await storage.addAlertDeliveries(
            targets.map { NewAlertDelivery(alertID: message.id, channel: $0.channel, target: $0.target, message: json) }, now: clock())
    }

    // MARK: The worker

    public func run() async throws {
        let interval = settings.interval
        let doorbell = self.doorbell
        // A graceful shutdown ends the stream: the pass under way finishes
        // (it takes nothing new), then the loop ends.
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: interval)
                        doorbell.yield()
                    }
                }
                group.addTask {
                    for await _ in self.wakeUps where !Task.isCancelled { await self.runOnce() }
                }
                await group.next()
                group.cancelAll()
            }
        } onGracefulShutdown: {
            doorbell.finish()
        }
        try? await webhook?.shutdown()
    }

    /// One pass: the outbox's new alerts enqueued, then every due delivery
    /// sent (a few at a time), then the gauges.
    public func runOnce() async {
        if let outbox { await dispatch(outbox) }
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let now = clock()
            let claimed: [StoredAlertDelivery]
            do {
                claimed = try await storage.claimAlertDeliveries(owner: owner, now: now, leaseUntil: now + settings.lease, limit: settings.batch)
            } catch {
                // Cancelled: the server stops; its storage may be closing under the query. Nothing to report.
                if !Task.isCancelled {
                    logger.error("cannot read the alert deliveries that are due", metadata: ["hallpass.error": "\(String(reflecting: error))"])
                }
                return
            }
            if claimed.isEmpty { break }
            await withTaskGroup(of: Void.self) { group in
                for delivery in claimed { group.addTask { await self.deliver(delivery) } }
            }
        }
        guard !Task.isCancelled else { return }
        do {
            metrics.update(try await storage.alertDeliveryCounts())
            metrics.updateDigests(try await storage.digestDeliveryCounts())
        } catch where !Task.isCancelled {
            logger.warning("cannot count the alert deliveries", metadata: ["hallpass.error": "\(String(reflecting: error))"])
        } catch {}
    }

    private func dispatch(_ outbox: any AlertOutbox) async {
        let limit = 100
        do {
            let messages = try await outbox.undispatched(limit: limit)
            var done: [String] = []
            for message in messages {
                do {
                    _ = try await add(message)
                    done.append(message.id)
                } catch let error as ServerError where error.code == "alerts.message" {
                    // It can never be sent (its id or rule is not one a link or a subject takes): marked, not read again every pass.
                    logger.error("an alert cannot be delivered: \(error.message)", metadata: ["hallpass.alert": "\(message.id.prefix(64))"])
                    done.append(message.id)
                } catch {
                    logger.error(
                        "cannot write an alert's deliveries", metadata: ["hallpass.alert": "\(message.id)", "hallpass.error": "\(error)"])
                }
            }
            if !done.isEmpty { try await outbox.markDispatched(ids: done) }
            // A full batch: there may be more; the next pass takes them.
            if messages.count == limit { wake() }
        } catch {
            if !Task.isCancelled {
                logger.error("cannot read the alerts waiting for delivery", metadata: ["hallpass.error": "\(String(reflecting: error))"])
            }
        }
    }

    /// One attempt at one delivery, and its outcome written (by this lease's holder only).
    func deliver(_ delivery: StoredAlertDelivery) async {
        let sent: AlertSendOutcome
        let what = delivery.kind == .digest ? "a digest" : "an alert"
        if delivery.kind == .digest {
            // The whole email, written when the digest was made: sent as it is, the same on every try.
            sent =
                delivery.channel == .email
                ? await sendmail.send(Array(delivery.message.utf8)) : .notSent(reason: "a digest is sent by email only")
        } else if let message = try? JSONDecoder().decode(AlertMessage.self, from: Data(delivery.message.utf8)) {
            switch delivery.channel {
            case .email: sent = await email(message, delivery)
            case .webhook: sent = await post(message, delivery)
            }
        } else {
            sent = .notSent(reason: "the stored message cannot be read")
        }
        let now = clock()
        let outcome: AlertDeliveryOutcome
        switch sent {
        case .sent:
            outcome = .sent
        case .notSent(let reason):
            // Nothing to post with any more (webhook taken out of server.yaml): failed now, not for a day.
            let hopeless = delivery.channel == .webhook && (settings.alerts.webhook == nil || webhook == nil || webhookSecret == nil)
            if !hopeless, let next = AlertRetrySchedule.next(failures: delivery.attempts + 1, createdAt: delivery.createdAt, now: now) {
                outcome = .retry(error: reason, next: next)
            } else {
                outcome = .failed(error: reason)
            }
        }
        if delivery.kind == .digest { metrics.digestAttempt(outcome) } else { metrics.attempt(delivery.channel, outcome) }
        let metadata: Logger.Metadata = [
            delivery.kind == .digest ? "hallpass.digest" : "hallpass.alert": "\(delivery.alertID)", "hallpass.delivery": "\(delivery.id)",
            "hallpass.channel": "\(delivery.channel.rawValue)", "hallpass.attempt": "\(delivery.attempts + 1)",
        ]
        switch outcome {
        case .sent:
            logger.info("delivered \(what)", metadata: metadata)
        case .retry(let error, let next):
            logger.warning("\(what)'s delivery failed; it is tried again in \(next - now) s: \(error)", metadata: metadata)
        case .failed(let error):
            logger.error("\(what) could not be delivered and is given up: \(error)", metadata: metadata)
        }
        do {
            if try await !storage.finishAlertDelivery(id: delivery.id, owner: owner, outcome, now: now) {
                logger.warning("\(what)'s delivery was taken by another worker before its outcome was written", metadata: metadata)
            }
        } catch {
            logger.error("cannot write the outcome of \(what)'s delivery; it is tried again when its lease ends", metadata: metadata.merging(["hallpass.error": "\(error)"]) { $1 })
        }
    }

    private func email(_ message: AlertMessage, _ delivery: StoredAlertDelivery) async -> AlertSendOutcome {
        var shown = message.user
        if settings.pseudonyms, let user = message.user {
            do {
                shown = Pseudonyms(key: try await storage.pseudonymKey()).of(user)
            } catch {
                return .notSent(reason: "cannot read the pseudonyms' key: \(error)")
            }
        }
        let email = AlertEmail(
            message: message, from: settings.alerts.sender, to: delivery.target, consoleURL: settings.consoleURL, deliveryID: delivery.id,
            date: clock(), shownUser: shown)
        return await sendmail.send(Array(email.render().utf8))
    }

    private func post(_ message: AlertMessage, _ delivery: StoredAlertDelivery) async -> AlertSendOutcome {
        guard settings.alerts.webhook != nil, let webhook, let webhookSecret else {
            return .notSent(reason: "alerts.webhook is no longer set in server.yaml")
        }
        let body = AlertWebhook.body(message, consoleURL: settings.consoleURL)
        let headers = AlertWebhook.headers(secret: webhookSecret, timestamp: clock(), body: body)
        do {
            let status = try await webhook.post(url: delivery.target, body: body, headers: headers)
            return (200..<300).contains(status) ? .sent : .notSent(reason: "the webhook answered HTTP \(status)")
        } catch let error as ServerError {
            return .notSent(reason: "the webhook: \(error.message)")
        } catch {
            return .notSent(reason: "the webhook: " + AlertEmail.clean("\(error)", 300))
        }
    }
}
