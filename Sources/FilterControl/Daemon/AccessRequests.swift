#if canImport(Glibc)
import Glibc
#endif
import HallpassSystem
import SharedStore
import Synchronization
public import Foundation
public import VerdictCore

/// A student's request for access to a blocked site, made on the block page
/// (`blockPage.requestAccess.url: builtin`) and decided by an admin with
/// `filterctl requests approve|deny` or, on an enrolled machine, in the
/// school's console (the decision comes back in the live state).
public struct AccessRequest: Codable, Sendable, Hashable {
    public enum State: String, Codable, Sendable {
        case pending, approved, denied
    }

    public var id: String
    public var host: String
    public var url: String
    public var category: String?
    public var reason: String
    public var user: String?
    public var createdAt: Date
    public var state: State
    public var decidedAt: Date?
    /// For an approval with `--for` (or the school's minutes): when the allow ends.
    public var allowUntil: Date?
    /// The school's policy group the user was placed in, for the server.
    public var group: String?
    /// When the school's server took the request; nil: not sent yet (or the machine is not enrolled).
    public var sentAt: Date?
    /// The message of the person who decided it in the console.
    public var message: String?
    /// Decided in the school's console: the live item the approval made
    /// opens the site for the scope the teacher chose, so the request adds
    /// no allow entry of its own for everyone on the machine.
    public var decidedBySchool: Bool?

    /// An approval whose time has not run out.
    public func allows(at now: Date) -> Bool {
        state == .approved && (allowUntil.map { $0 > now } ?? true)
    }
}

/// The requests, kept in one JSON file (mode 0600: reasons and user names
/// are personal) written atomically after every change, so they survive a
/// restart. A file that cannot be read is moved aside, not overwritten.
public final class AccessRequestStore: Sendable {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var code: String
        public var message: String
        public var description: String { message }
    }

    /// At most this many requests wait at once (a student cannot fill the disk).
    public static let maximumPending = 1000

    /// How many requests one person may make (`blockPage.requestAccess.perUser`).
    public struct Limits: Sendable, Hashable {
        /// Waiting at once.
        public var pending: Int
        /// Made in the last 24 hours (waiting or decided).
        public var perDay: Int

        public init(pending: Int = 5, perDay: Int = 20) {
            self.pending = pending
            self.perDay = perDay
        }
    }

    /// A decision on a request made in the school's console, as the live state carries it.
    public struct Decision: Sendable, Hashable {
        public var id: String
        /// `approved` or `denied`.
        public var state: AccessRequest.State
        public var message: String?
        /// For an approval: when it ends.
        public var until: Date?

        public init(id: String, state: AccessRequest.State, message: String? = nil, until: Date? = nil) {
            self.id = id
            self.state = state
            self.message = message
            self.until = until
        }
    }
    /// Decided requests older than this are dropped from the file.
    public static let keepDecided: TimeInterval = 90 * 86_400

    public let path: String
    private let requests: Mutex<[AccessRequest]>
    /// Signalled when a request is recorded, for the service that sends them to the school.
    let submitted = Wakeup()

    /// Loads `path`; a missing file is an empty list. `log` hears about a file moved aside.
    public init(path: String, log: (String) -> Void = { _ in }) {
        self.path = path
        requests = Mutex(AccessRequestStore.load(path: path, log: log))
    }

    private static func load(path: String, log: (String) -> Void) -> [AccessRequest] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        do {
            return try AccessRequestStore.decoder.decode([AccessRequest].self, from: data)
        } catch {
            let aside = path + ".unreadable-\(Int(Date().timeIntervalSince1970))"
            try? FileSystem.rename(path, to: aside)
            log("access requests: \(path) cannot be read (\(error)); moved to \(aside), starting with none")
            return []
        }
    }

    public func list() -> [AccessRequest] { requests.withLock { $0 } }

    /// Records a request; the same user asking again for the same host while
    /// the first waits gets the first one's id. Refused: a user with
    /// `limits.pending` requests waiting (`requests.user-pending`) or
    /// `limits.perDay` made in the last 24 hours (`requests.user-daily`),
    /// and any request once `maximumPending` wait (`requests.full`).
    public func submit(
        host: String, url: String, category: String?, reason: String, user: String?, group: String? = nil, limits: Limits = Limits(),
        now: Date = Date()
    ) throws(Failure) -> AccessRequest {
        let request = try requests.withLock { requests throws(Failure) in
            if let existing = requests.first(where: { $0.state == .pending && $0.host == host && $0.user == user }) {
                return existing
            }
            guard requests.count(where: { $0.state == .pending && $0.user == user }) < limits.pending else {
                throw Failure(code: "requests.user-pending", message: "\(user ?? "an unknown user") has \(limits.pending) requests waiting already")
            }
            let dayAgo = now.addingTimeInterval(-86_400)
            guard requests.count(where: { $0.user == user && $0.createdAt > dayAgo }) < limits.perDay else {
                throw Failure(code: "requests.user-daily", message: "\(user ?? "an unknown user") made \(limits.perDay) requests in the last 24 hours")
            }
            guard requests.count(where: { $0.state == .pending }) < Self.maximumPending else {
                throw Failure(code: "requests.full", message: "\(Self.maximumPending) requests are waiting already")
            }
            let request = AccessRequest(
                id: Self.newID(), host: host, url: url, category: category, reason: reason, user: user, createdAt: now, state: .pending,
                group: group)
            let cutoff = now.addingTimeInterval(-Self.keepDecided)
            var changed = requests.filter { $0.state == .pending || ($0.decidedAt ?? $0.createdAt) >= cutoff }
            changed.append(request)
            try save(changed)
            requests = changed
            return request
        }
        submitted.signal()
        return request
    }

    /// The newest request of `user` for `host` that the block page is to
    /// show: one waiting, an approval still in force, or a denial of the
    /// last day. nil: none (the page offers the form).
    public func latest(host: String, user: String?, now: Date = Date()) -> AccessRequest? {
        let dayAgo = now.addingTimeInterval(-86_400)
        return requests.withLock { requests in
            requests.filter { $0.host == host && $0.user == user }.max { $0.createdAt < $1.createdAt }
        }.flatMap { request in
            switch request.state {
            case .pending: request
            case .approved: request.allows(at: now) ? request : nil
            case .denied: (request.decidedAt ?? request.createdAt) > dayAgo ? request : nil
            }
        }
    }

    /// The requests waiting that the school's server does not have yet, oldest first.
    public func unsent() -> [AccessRequest] {
        requests.withLock { $0.filter { $0.state == .pending && $0.sentAt == nil }.sorted { $0.createdAt < $1.createdAt } }
    }

    /// Notes that the school's server has taken the requests `ids`.
    public func markSent(_ ids: Set<String>, at now: Date = Date()) throws(Failure) {
        try requests.withLock { requests throws(Failure) in
            var changed = requests
            for index in changed.indices where ids.contains(changed[index].id) && changed[index].sentAt == nil {
                changed[index].sentAt = now
            }
            guard changed != requests else { return }
            try save(changed)
            requests = changed
        }
    }

    /// Takes the decisions the school's live state carries: each names a
    /// request made here; one that is not known, or says what the request
    /// says already, changes nothing. Returns the requests changed. The
    /// live service calls it with every live state it applies.
    @discardableResult
    public func applyDecisions(_ decisions: [Decision], now: Date = Date()) throws(Failure) -> [AccessRequest] {
        try requests.withLock { requests throws(Failure) in
            var changed = requests
            var updated: [AccessRequest] = []
            for decision in decisions where decision.state != .pending {
                guard let index = changed.firstIndex(where: { $0.id == decision.id.lowercased() }) else { continue }
                var request = changed[index]
                let allowUntil = decision.state == .approved ? decision.until : nil
                guard request.state != decision.state || request.message != decision.message || request.allowUntil != allowUntil else { continue }
                request.state = decision.state
                request.message = decision.message
                request.allowUntil = allowUntil
                request.decidedAt = request.decidedAt ?? now
                request.decidedBySchool = true
                changed[index] = request
                updated.append(request)
            }
            guard !updated.isEmpty else { return [] }
            try save(changed)
            requests = changed
            return updated
        }
    }

    /// Approves (for `duration`, or until revoked) or denies a pending or decided request.
    public func decide(_ id: String, approve: Bool, for duration: TimeInterval? = nil, now: Date = Date()) throws(Failure) -> AccessRequest {
        try requests.withLock { requests throws(Failure) in
            guard let index = requests.firstIndex(where: { $0.id == id.lowercased() }) else {
                throw Failure(code: "requests.unknown", message: "no request has the id '\(id)' ('filterctl requests list' shows them)")
            }
            var changed = requests
            changed[index].state = approve ? .approved : .denied
            changed[index].decidedAt = now
            changed[index].allowUntil = approve ? duration.map { now.addingTimeInterval($0) } : nil
            changed[index].decidedBySchool = nil
            try save(changed)
            requests = changed
            return changed[index]
        }
    }

    /// The local allow entries the approvals add: each approved host and the
    /// names below it. Not those decided in the school's console: their live
    /// item opens the site, for the audience the teacher chose.
    public func allowEntries(at now: Date = Date()) -> [RulePattern] {
        let hosts = requests.withLock { $0.filter { $0.allows(at: now) && $0.decidedBySchool != true }.map(\.host) }
        return Set(hosts).sorted().compactMap { try? RulePattern($0) }
    }

    /// The next moment an approval runs out, if any.
    public func nextExpiry(after now: Date = Date()) -> Date? {
        requests.withLock { $0.compactMap { $0.state == .approved && $0.decidedBySchool != true ? $0.allowUntil : nil }.filter { $0 > now }.min() }
    }

    private func save(_ list: [AccessRequest]) throws(Failure) {
        let data: Data
        do {
            data = try AccessRequestStore.encoder.encode(list)
        } catch {
            throw Failure(code: "requests.io", message: "cannot encode the requests: \(error)")
        }
        do {
            try AtomicFile.write(Array(data), to: path, mode: 0o600)
        } catch {
            throw Failure(code: "requests.io", message: error.description)
        }
    }

    /// Eight hex digits: short enough to type, random enough not to guess.
    static func newID() -> String {
        String(format: "%08x", UInt32.random(in: 0...UInt32.max))
    }

    static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        return encoder
    }

    static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
