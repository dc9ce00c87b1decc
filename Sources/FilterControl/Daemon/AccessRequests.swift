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
/// `filterctl requests approve|deny`.
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
    /// For an approval with `--for`: when the allow entry ends.
    public var allowUntil: Date?

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
    /// Decided requests older than this are dropped from the file.
    public static let keepDecided: TimeInterval = 90 * 86_400

    public let path: String
    private let requests: Mutex<[AccessRequest]>

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
    /// the first waits gets the first one's id.
    public func submit(host: String, url: String, category: String?, reason: String, user: String?, now: Date = Date()) throws(Failure)
        -> AccessRequest
    {
        try requests.withLock { requests throws(Failure) in
            if let existing = requests.first(where: { $0.state == .pending && $0.host == host && $0.user == user }) {
                return existing
            }
            guard requests.count(where: { $0.state == .pending }) < Self.maximumPending else {
                throw Failure(code: "requests.full", message: "\(Self.maximumPending) requests are waiting already")
            }
            let request = AccessRequest(
                id: Self.newID(), host: host, url: url, category: category, reason: reason, user: user, createdAt: now, state: .pending)
            let cutoff = now.addingTimeInterval(-Self.keepDecided)
            var changed = requests.filter { $0.state == .pending || ($0.decidedAt ?? $0.createdAt) >= cutoff }
            changed.append(request)
            try save(changed)
            requests = changed
            return request
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
            try save(changed)
            requests = changed
            return changed[index]
        }
    }

    /// The local allow entries the approvals add: each approved host and the names below it.
    public func allowEntries(at now: Date = Date()) -> [RulePattern] {
        let hosts = requests.withLock { $0.filter { $0.allows(at: now) }.map(\.host) }
        return Set(hosts).sorted().compactMap { try? RulePattern($0) }
    }

    /// The next moment an approval runs out, if any.
    public func nextExpiry(after now: Date = Date()) -> Date? {
        requests.withLock { $0.compactMap { $0.state == .approved ? $0.allowUntil : nil }.filter { $0 > now }.min() }
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
