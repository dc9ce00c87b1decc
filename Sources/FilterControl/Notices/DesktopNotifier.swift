#if canImport(Glibc)
import Glibc
#endif
public import Foundation
import HallpassSystem
public import Logging
import HallpassIPC
import NIOPosix
import Synchronization
import SystemPackage
import VerdictCore

/// Which blocked flows get a desktop notice, and how often: a pure value
/// the notifier asks, tested on its own.
public struct NoticeRule: Sendable {
    /// At most one notice per person and name in this many seconds.
    public var interval: TimeInterval
    /// At most this many notices per person a minute, whatever the names (a page full of blocked trackers is one notice, not twenty).
    public var perUserPerMinute = 3
    /// Whether a blocked DNS lookup gets a notice: it does when the block
    /// page cannot answer HTTPS (no local CA), since a browser sent there
    /// by the rewritten answer then shows only a connection error.
    public var noticeForDNS: Bool
    /// The most (person, name) pairs remembered.
    public var capacity = 4096

    private var lastNotice: [Key: Date] = [:]
    private var recent: [UInt32: [Date]] = [:]

    private struct Key: Hashable {
        var uid: UInt32
        var name: String
    }

    public init(interval: TimeInterval, noticeForDNS: Bool) {
        self.interval = interval
        self.noticeForDNS = noticeForDNS
    }

    /// Whether `decision` gets a notice now; a yes is remembered for the rate limits.
    public mutating func admit(_ decision: AuditRecord, now: Date) -> Admission {
        guard decision.action == .block, let uid = decision.report.uid else { return .notWanted }
        let name = decision.report.host ?? decision.destination
        // A blocked plain-HTTP, TLS or QUIC flow that reaches filter-data
        // went to the real address (not the block page's) and is refused;
        // a blocked DNS answer points a browser at the block page.
        if decision.kind == .dns, !noticeForDNS { return .notWanted }
        let key = Key(uid: uid, name: name)
        if let last = lastNotice[key], now.timeIntervalSince(last) < interval { return .rateLimited }
        let minute = (recent[uid] ?? []).filter { now.timeIntervalSince($0) < 60 }
        guard minute.count < perUserPerMinute else { return .rateLimited }
        if lastNotice.count >= capacity {
            lastNotice = lastNotice.filter { now.timeIntervalSince($0.value) < interval }
            recent = recent.filter { $0.value.contains { now.timeIntervalSince($0) < 60 } }
            guard lastNotice.count < capacity else { return .rateLimited }
        }
        lastNotice[key] = now
        recent[uid] = minute + [now]
        return .notify
    }

    public enum Admission: Sendable, Hashable {
        case notify, rateLimited, notWanted
    }
}

/// What a notice says: the name, the reason, the organization and how to ask for access.
public struct NoticeText: Sendable, Hashable {
    public var organization: String
    /// `blockPage.requestAccess`: the link's template ({url} {host} {category} {user} {org}), or `builtin`.
    public var requestAccessURL: String?
    /// The block page's own address as served, for `builtin` (`BlockPage.pageURL`: `http://127.0.0.1/`,
    /// on a privileged port no local user can take while filter-control is down; `httpPort`'s when
    /// `blockPage.port` is one they could).
    public var blockPageURL: String

    public init(organization: String, requestAccessURL: String?, blockPageURL: String) {
        self.organization = organization
        self.requestAccessURL = requestAccessURL
        self.blockPageURL = blockPageURL
    }

    public func summary(for decision: AuditRecord) -> String {
        "Blocked: \(decision.report.host ?? decision.destination)"
    }

    /// The body, with `&`, `<` and `>` written as entities (notification servers read simple markup in bodies).
    public func body(for decision: AuditRecord, user: String?) -> String {
        let name = decision.report.host ?? decision.destination
        var lines = ["\(organization) blocked \(name): \(reasonText(decision))."]
        if let link = requestLink(for: decision, user: user) {
            lines.append("To ask for access: \(link)")
        } else {
            lines.append("If you need it for your work, ask your teacher.")
        }
        return lines.joined(separator: "\n").replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }

    func reasonText(_ decision: AuditRecord) -> String {
        let reason = decision.report.reason
        return switch reason.source {
        case .category, .lookup: "it is in the category \(reason.category ?? "?")"
        case .localDenyList: "it is on this machine's deny list"
        case .overrideBlock: "a teacher blocked it"
        case .exam: "an exam is in progress and it is not on the exam's list"
        case .focus: "a teacher set a focus or a pause, and it is not on its list"
        case .unknownHost, .lookupUnknown, .askTimeout: "the school's rules do not know it"
        case .noName: "the connection does not say which site it is for"
        default: "the school's rules (\(reason.source.rawValue))"
        }
    }

    func requestLink(for decision: AuditRecord, user: String?) -> String? {
        guard let template = requestAccessURL else { return nil }
        let host = decision.report.host ?? decision.destination
        let url = decision.url ?? "https://\(host)/"
        let encode = PercentEncoding.encode
        if template == "builtin" { return blockPageURL + "?url=" + encode(url) }
        return template.replacingOccurrences(of: "{url}", with: encode(url)).replacingOccurrences(of: "{host}", with: encode(host))
            .replacingOccurrences(of: "{category}", with: encode(decision.report.reason.category ?? "")).replacingOccurrences(of: "{user}", with: encode(user ?? ""))
            .replacingOccurrences(of: "{org}", with: encode(organization))
    }

    /// The org.freedesktop.Notifications.Notify call (signature `susssasa{sv}i`).
    public func notifyCall(for decision: AuditRecord, user: String?) -> DBusMessage {
        DBusMessage(
            serial: 0, path: "/org/freedesktop/Notifications", interface: "org.freedesktop.Notifications", member: "Notify",
            destination: "org.freedesktop.Notifications",
            body: [
                .string("hallpass"),  // app_name
                .uint32(0),  // replaces_id
                .string("dialog-warning"),  // app_icon
                .string(summary(for: decision)),
                .string(body(for: decision, user: user)),
                .array(elementSignature: "s", []),  // actions
                .array(
                    elementSignature: "{sv}",
                    [
                        .dictEntry(.string("urgency"), .variant(.byte(1))),
                        .dictEntry(.string("category"), .variant(.string("network"))),
                        .dictEntry(.string("desktop-entry"), .variant(.string("hallpass"))),
                    ]),
                .int32(15_000),  // expire_timeout, milliseconds
            ])
    }
}

/// Sends the desktop notices: `consider` (never waits) checks the rule and
/// the rate limits and queues at most 64 notices; `run` takes them off in
/// order and delivers each to the person's session bus on a thread of its own.
///
/// Why a thread: `SessionBus.call` blocks (connect, then the D-Bus write and
/// read, up to 2 s each), and it connects with the person's uid through
/// `hp_connect_unix_as`, which switches the kernel's credentials of the
/// calling thread: that must happen where no other work runs, never on a
/// shared pool thread or the tasks' threads.
///
/// To run it as a service: `run()` until shutdown, with `finish()` on
/// graceful shutdown (the notices queued are still delivered, then `run`
/// returns).
public final class DesktopNotifier: Sendable {
    public struct Counters: Sendable, Hashable, Codable {
        public var sent: UInt64 = 0
        /// Wanted, but within a rate limit.
        public var rateLimited: UInt64 = 0
        /// The person has no session bus (not logged in to a desktop).
        public var noSession: UInt64 = 0
        public var failed: UInt64 = 0
        /// The queue was full.
        public var dropped: UInt64 = 0
        public var lastError: String?
    }

    /// The session bus address of a uid; nil: none.
    public typealias BusLocator = @Sendable (_ uid: UInt32) -> String?

    private struct Notice: Sendable {
        var decision: AuditRecord
    }

    private struct State {
        var rule: NoticeRule
        var counters = Counters()
        var finished = false
    }

    public let text: NoticeText
    private let logger: Logger
    private let locate: BusLocator
    private let state: Mutex<State>
    /// The notices waiting, at most `queueCapacity` (the one being delivered is no longer in it).
    private let queue: AsyncStream<Notice>
    private let queueInput: AsyncStream<Notice>.Continuation
    public static let queueCapacity = 64

    public init(rule: NoticeRule, text: NoticeText, logger: Logger, locate: @escaping BusLocator = DesktopNotifier.runtimeBus) {
        self.text = text
        self.logger = logger
        self.locate = locate
        self.state = Mutex(State(rule: rule))
        (queue, queueInput) = AsyncStream.makeStream(of: Notice.self, bufferingPolicy: .bufferingOldest(DesktopNotifier.queueCapacity))
    }

    /// systemd's per-user bus, `/run/user/UID/bus`, when that socket exists.
    public static let runtimeBus: BusLocator = { uid in
        let path = "/run/user/\(uid)/bus"
        guard (try? FileSystem.status(path))?.type == .socket else { return nil }
        return "unix:path=" + path
    }

    /// Queues a notice for `decision` if it wants one and no rate limit holds it back; never waits.
    public func consider(_ decision: AuditRecord, now: Date = Date()) {
        state.withLock { state in
            guard !state.finished else { return }
            switch state.rule.admit(decision, now: now) {
            case .notWanted: return
            case .rateLimited:
                state.counters.rateLimited += 1
            case .notify:
                // Under the lock: a notice admitted before `finish()` is in the queue before it ends.
                switch queueInput.yield(Notice(decision: decision)) {
                case .enqueued: break
                case .dropped: state.counters.dropped += 1
                // `run` was cancelled, which finishes: not counted, as after `finish()`.
                case .terminated: break
                @unknown default: state.counters.dropped += 1
                }
            }
        }
    }

    public func counters() -> Counters { state.withLock { $0.counters } }

    /// Stops: notices already queued are still delivered, then `run` returns.
    public func finish() {
        state.withLock { state in
            state.finished = true
            queueInput.finish()
        }
    }

    /// Delivers notices until `finish()` or cancellation (after either, the ones queued still go).
    public func run() async {
        // One thread, this notifier's alone: `SessionBus.call` blocks in connect (as the
        // person, `hp_connect_unix_as` changes this thread's credentials), write and read.
        let bus = NIOThreadPool(numberOfThreads: 1)
        bus.start()
        await withTaskCancellationHandler {
            for await notice in queue {
                // `submit`, not `runIfActive`: a cancelled task still delivers what was queued.
                await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                    bus.submit { work in
                        if case .active = work { self.deliver(notice.decision) }
                        done.resume()
                    }
                }
            }
        } onCancel: {
            finish()
        }
        try? await bus.shutdownGracefully()
    }

    private func deliver(_ decision: AuditRecord) {
        guard let uid = decision.report.uid, let address = locate(uid) else {
            state.withLock { $0.counters.noSession += 1 }
            return
        }
        let users = UserDirectory()
        let user = users.userName(uid: uid)
        let gid = users.primaryGroupID(uid: uid) ?? uid
        do {
            let bus = try SessionBus(address: address, uid: uid, gid: gid)
            _ = try bus.call(text.notifyCall(for: decision, user: user))
            state.withLock { $0.counters.sent += 1 }
        } catch {
            let first: Bool = state.withLock { state in
                state.counters.failed += 1
                defer { state.counters.lastError = error.description }
                return state.counters.lastError != error.description
            }
            if first {
                logger.warning(
                    "notice: cannot reach a session bus", metadata: ["hallpass.notice.uid": "\(uid)", "hallpass.error": "\(error)"])
            }
        }
    }
}
