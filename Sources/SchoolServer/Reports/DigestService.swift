public import Foundation
public import Logging
public import ServiceLifecycle
import Synchronization

/// The safeguarding digests on their schedule (docs/server.md,
/// "Safeguarding digests"), one service of the server's group.
///
/// At each look (every `interval`, and at the next due time) it takes, for
/// each digest that is on, the last time it was due; when that is not
/// before the digests began (`ServerStorage.digestsStart`), it makes the
/// digest of the period just ended for each recipient who has not had it:
/// the figures of their scope (`DigestFigures`), the text, HTML and PDF
/// (`DigestDocument`), the email (`DigestEmail`), and claims it with the
/// email in one transaction (`ServerStorage.claimDigest`). The outbox's
/// worker sends it, with its retries; `wake` tells it there is work.
///
/// So a digest is made once per person and period, whoever makes it: a
/// restart finds the claims, two instances on one PostgreSQL race for the
/// claim and one wins. A server that was down when a digest was due makes
/// it when it starts, for the last period only (an older one is not the
/// last due time any more).
public final class DigestService: Service, Sendable {
    public struct Settings: Sendable {
        public var schedule: DigestSchedule
        /// `console.schoolName`: in the subject and the title.
        public var schoolName: String
        /// `console.url`, without a slash at its end.
        public var consoleURL: String
        public var from: AlertsConfiguration.Sender
        /// The roles that see pseudonyms instead of names (`console.pseudonyms`): their digests name pseudonyms too.
        public var pseudonyms: Set<Role>
        /// The school's wall clock: the console's time zone (the server's).
        public var timeZone: TimeZone = .current
        /// How often the service looks without a due time coming (it also wakes at each due time).
        public var interval: Duration = .seconds(60)

        public init(schedule: DigestSchedule, schoolName: String, consoleURL: String, from: AlertsConfiguration.Sender, pseudonyms: Set<Role>) {
            self.schedule = schedule
            self.schoolName = schoolName
            self.consoleURL = consoleURL
            self.from = from
            self.pseudonyms = pseudonyms
        }

        /// Until the next look: `interval`, or less when a digest is due sooner (at least a second).
        func pause(now: Int64) -> Duration {
            var wait = interval
            for kind in schedule.kinds {
                if let next = schedule.nextDue(kind, after: now, timeZone: timeZone) { wait = min(wait, .seconds(max(1, next - now))) }
            }
            return wait
        }
    }

    /// The roles that receive digests: the safeguarding lead and the
    /// teachers (pastoral staff), each for their scope. Admins run the
    /// system and auditors review it; either is given a safeguarding or
    /// teacher account to receive them.
    public static let roles: Set<Role> = [.safeguarding, .teacher]

    let settings: Settings
    let storage: any ServerStorage
    let logger: Logger
    let clock: @Sendable () -> Int64
    let wake: @Sendable () -> Void
    /// `digestsStart` per kind, read once.
    private let starts = Mutex<[DigestKind: Int64]>([:])

    public init(
        settings: Settings, storage: any ServerStorage, logger: Logger, clock: @escaping @Sendable () -> Int64,
        wake: @escaping @Sendable () -> Void = {}
    ) {
        self.settings = settings
        self.storage = storage
        self.logger = logger
        self.clock = clock
        self.wake = wake
    }

    /// The service as server.yaml describes it: `alerts.digests`, `alerts.from`,
    /// `console.schoolName`, `console.url`, `console.pseudonyms`.
    public static func make(
        configuration: ServerConfiguration, storage: any ServerStorage, logger: Logger, clock: @escaping @Sendable () -> Int64,
        timeZone: TimeZone = .current, wake: @escaping @Sendable () -> Void
    ) -> DigestService {
        var settings = Settings(
            schedule: configuration.alerts.digests, schoolName: configuration.consolePages.schoolName, consoleURL: configuration.consoleURL,
            from: configuration.alerts.sender, pseudonyms: configuration.consolePages.pseudonyms)
        settings.timeZone = timeZone
        return DigestService(settings: settings, storage: storage, logger: logger, clock: clock, wake: wake)
    }

    var time: ConsoleTime { ConsoleTime(timeZone: settings.timeZone) }

    public func run() async throws {
        guard !settings.schedule.kinds.isEmpty else {
            // Nothing to send: wait for the server's end (a service that returned would end the group).
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await self.runOnce()
                do {
                    try await Task.sleep(for: self.settings.pause(now: self.clock()))
                } catch {
                    break
                }
            }
        }
    }

    /// One look: each digest that is due and not made yet, made and
    /// queued. Returns how many were queued.
    @discardableResult
    public func runOnce() async -> Int {
        let now = clock()
        var made = 0
        for kind in settings.schedule.kinds where !Task.isCancelled {
            do {
                made += try await makeDue(kind, now: now)
            } catch {
                // Cancelled: the server stops, and its storage may be closing under the query.
                if !Task.isCancelled {
                    logger.error(
                        "cannot make the \(kind.rawValue) safeguarding digests; they are tried again at the next look",
                        metadata: ["hallpass.error": "\(String(reflecting: error))"])
                }
            }
        }
        if made > 0 { wake() }
        if !Task.isCancelled {
            do {
                _ = try await storage.removeDigestEmails(before: now - Self.keepEmails)
            } catch where !Task.isCancelled {
                logger.warning("cannot remove old digest emails", metadata: ["hallpass.error": "\(String(reflecting: error))"])
            } catch {}
        }
        return made
    }

    /// How long a digest's email is kept once sent (or failed for good): 30 days.
    static let keepEmails: Int64 = 30 * 86_400

    /// The digests of `kind` due at `now` and not claimed yet, made and claimed.
    func makeDue(_ kind: DigestKind, now: Int64) async throws -> Int {
        let since: Int64
        if let known = starts.withLock({ $0[kind] }) {
            since = known
        } else {
            since = try await storage.digestsStart(kind: kind, now: now)
            starts.withLock { $0[kind] = since }
        }
        guard let due = settings.schedule.lastDue(kind, now: now, timeZone: settings.timeZone), due >= since,
            let periods = kind.periods(now: due, time: time)
        else { return 0 }
        let claimed = Set(try await storage.digestClaims(kind: kind, periodStart: periods.current.lowerBound).map(\.login))
        let recipients = try await storage.people().filter { Self.receives($0) && !claimed.contains($0.login) }
        guard !recipients.isEmpty else { return 0 }
        var pseudonyms: Pseudonyms? = nil
        var made = 0
        for person in recipients where !Task.isCancelled {
            guard let address = person.email else { continue }
            let metadata: Logger.Metadata = [
                "hallpass.digest.kind": "\(kind.rawValue)", "hallpass.digest.period": "\(time.day(periods.current.lowerBound))",
                "hallpass.person": "\(person.login)",
            ]
            do {
                let document = try await document(kind, periods: periods, scope: person.scope, role: person.role, now: now, pseudonyms: &pseudonyms)
                let deliveryID = AlertDeliveryID.make()
                let email = try DigestEmail(document: document, from: settings.from, to: address, deliveryID: deliveryID, date: now)
                let claim = NewDigestClaim(
                    kind: kind, period: periods.current, login: person.login, address: address, deliveryID: deliveryID, message: email.render())
                if try await storage.claimDigest(claim, now: now) {
                    made += 1
                    logger.info("made a safeguarding digest", metadata: metadata)
                }
            } catch where Task.isCancelled {
                break
            } catch {
                logger.error(
                    "cannot make a safeguarding digest; it is tried again at the next look",
                    metadata: metadata.merging(["hallpass.error": "\(String(reflecting: error))"]) { $1 })
            }
        }
        return made
    }

    /// The digest of `kind` over `periods` for a reader of `role` with
    /// `scope`: the figures of the scope, and the text, HTML and PDF, with
    /// pseudonyms for the roles of `console.pseudonyms` (the key read once
    /// into `pseudonyms`). What `makeDue` sends, and what the console previews.
    func document(
        _ kind: DigestKind, periods: (current: Range<Int64>, previous: Range<Int64>), scope: Scope, role: Role, now: Int64,
        pseudonyms: inout Pseudonyms?
    ) async throws -> DigestDocument {
        var names: @Sendable (String) -> String = { $0 }
        if settings.pseudonyms.contains(role) {
            if pseudonyms == nil { pseudonyms = Pseudonyms(key: try await storage.pseudonymKey()) }
            if let keyed = pseudonyms {
                // A record that names no one is counted by its machine, which is no one's name.
                names = { $0.hasPrefix("machine:") ? $0 : keyed.of($0) }
            }
        }
        let figures = try await figures(kind, periods: periods, scope: scope)
        return DigestDocument(
            figures: figures, schoolName: settings.schoolName, scopeText: Self.scopeText(scope), consoleURL: settings.consoleURL,
            time: time, created: now, readsAlerts: role.may(.viewAlerts), names: names)
    }

    /// The digest of `kind` so far (today, or this week from Monday, against
    /// the whole day or week before) for `principal`'s scope and role, as
    /// the console's preview shows it; nil when the calendar gives no period.
    func preview(_ kind: DigestKind, for principal: Principal, now: Int64) async throws -> DigestDocument? {
        guard let last = kind.periods(now: now, time: time) else { return nil }
        let start = last.current.upperBound
        let periods = (current: start..<max(start + 1, now * 1000), previous: last.current)
        var pseudonyms: Pseudonyms?
        return try await document(kind, periods: periods, scope: principal.scope, role: principal.role, now: now, pseudonyms: &pseudonyms)
    }

    /// Whether `person` gets digests: an enabled account of a digest role
    /// with an address the server sends to.
    static func receives(_ person: StoredPerson) -> Bool {
        guard person.disabledAt == nil, roles.contains(person.role), let email = person.email else { return false }
        return MailAddress.refusal(email) == nil
    }

    /// "the whole school", or "rooms lab1, lab2; groups 7a".
    static func scopeText(_ scope: Scope) -> String {
        if scope.isWholeSchool { return "the whole school" }
        var parts: [String] = []
        if !scope.rooms.isEmpty { parts.append((scope.rooms.count == 1 ? "room " : "rooms ") + scope.rooms.joined(separator: ", ")) }
        if !scope.groups.isEmpty { parts.append((scope.groups.count == 1 ? "group " : "groups ") + scope.groups.joined(separator: ", ")) }
        return parts.joined(separator: "; ")
    }

    /// The figures of `scope` for the two periods: the alerts of each (by
    /// the record's time, as the alerts API's scope keeps them: the alert's
    /// room or its person's group) and the bypass attempts of the current one.
    func figures(_ kind: DigestKind, periods: (current: Range<Int64>, previous: Range<Int64>), scope: Scope) async throws -> DigestFigures {
        let current = try await alerts(in: periods.current, scope: scope)
        let previous = try await alerts(in: periods.previous, scope: scope)
        let bypass = try await storage.bypassAttempts(
            since: periods.current.lowerBound, until: periods.current.upperBound, scope: scope, limit: DigestFigures.topStudents)
        return DigestFigures(
            kind: kind, current: periods.current, previous: periods.previous, alerts: current.alerts, previousAlerts: previous.alerts,
            bypass: bypass, cut: current.cut || previous.cut)
    }

    /// The alerts of `period` in `scope`, page by page, at most `DigestFigures.maximumAlerts`.
    func alerts(in period: Range<Int64>, scope: Scope) async throws -> (alerts: [StoredAlert], cut: Bool) {
        var alerts: [StoredAlert] = []
        var query = AlertQuery(since: period.lowerBound, until: period.upperBound, limit: 1000, scope: scope)
        while true {
            let page = try await storage.alerts(query)
            alerts += page.alerts
            if alerts.count > DigestFigures.maximumAlerts || (alerts.count == DigestFigures.maximumAlerts && page.next != nil) {
                return (Array(alerts.prefix(DigestFigures.maximumAlerts)), true)
            }
            guard let next = page.next else { return (alerts, false) }
            query.after = next
        }
    }
}
