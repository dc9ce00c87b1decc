public import HallpassIPC
import Foundation
import HallpassSystem
import NIOCore
import NIOPosix
import SharedStore
import Synchronization
public import VerdictCore

/// What a lookup service says about one name.
public enum LookupResult: Sendable, Hashable {
    /// The categories the service lists the name in (empty: it knows the
    /// name and lists it nowhere), to be kept for `timeToLive` seconds.
    case categories([String], timeToLive: UInt32)
    /// No answer (the service is unreachable or answered nonsense): the
    /// waiting flows get `policy.askDefault` now, and nothing is kept.
    case unavailable(reason: String)
}

/// Where filter-control looks up the categories of a name that no rule
/// knows (`policy.unknown: ask`).
///
/// The protocol is tiny, the same over `https://` and `file://`: the lookup
/// folder sits next to the bundle (`<rules.source>lookup/`) and holds one
/// text file per name, `lookup/<name>` (the canonical, lower-case ASCII
/// form). Each non-empty line not starting with `#` is a category name; a
/// line `ttl SECONDS` sets how long the answer is kept (default one hour).
/// No file (HTTP 404) means the service does not know the name either: the
/// flow gets `policy.askDefault`, and that answer is kept for five minutes
/// only, so a file the school adds later is seen soon. Anything else
/// (unreachable, other statuses) is no answer: nothing is kept, and
/// filter-control logs why.
public protocol HostLookup: Sendable {
    func lookUp(_ host: HostName) async -> LookupResult
}

extension LookupResult {
    public static let defaultTimeToLive: UInt32 = 3600
    /// How long "the service does not know this name" is kept.
    public static let unknownTimeToLive: UInt32 = 300

    /// Reads a lookup file's text.
    public static func parse(_ text: String) -> LookupResult {
        var categories: [String] = []
        var timeToLive = defaultTimeToLive
        for rawLine in text.split(whereSeparator: \.isNewline).prefix(256) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("ttl ") {
                guard let seconds = UInt32(line.dropFirst(4).trimmingCharacters(in: .whitespaces)), seconds <= 7 * 86_400 else {
                    return .unavailable(reason: "a ttl line that is not a number of seconds up to a week")
                }
                timeToLive = seconds
                continue
            }
            let name = line.lowercased()
            guard name.count <= 64, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                return .unavailable(reason: "'\(line.prefix(64))' is not a category name")
            }
            if !categories.contains(name) { categories.append(name) }
        }
        return .categories(categories, timeToLive: timeToLive)
    }
}

/// A lookup folder on this machine (`file:///.../lookup/`).
public struct FolderLookup: HostLookup {
    public let folder: String

    public init(folder: String) {
        self.folder = folder.hasSuffix("/") ? String(folder.dropLast()) : folder
    }

    public func lookUp(_ host: HostName) async -> LookupResult {
        let path = folder + "/" + host.description
        do {
            let bytes = try BoundedFile.read(path, limit: 64 * 1024)
            return LookupResult.parse(String(decoding: bytes, as: UTF8.self))
        } catch .missing {
            return .categories([], timeToLive: LookupResult.unknownTimeToLive)
        } catch {
            return .unavailable(reason: "\(path): \(error)")
        }
    }
}

/// No lookup service is configured: every question gets no answer.
public struct NoLookup: HostLookup {
    public init() {}
    public func lookUp(_ host: HostName) async -> LookupResult { .unavailable(reason: "no lookup service (rules.source is not set)") }
}

/// Answers filter-data's needRules questions from a lookup service, with a
/// cache of the answers for their time to live. A cached answer is given
/// on the spot, on the caller's thread.
public final class NeedRulesAnswerer: Sendable {
    private struct State {
        // Times on the monotonic clock: a step of the wall clock neither keeps an
        // answer past its time to live nor drops it early.
        var cache: [HostName: (result: LookupResult, expires: ContinuousClock.Instant)] = [:]
        // Failed lookups are logged at most once per `failureLogInterval`; the
        // ones in between are counted and named in the next line.
        var lastFailureLogged: ContinuousClock.Instant?
        var failuresNotLogged = 0
    }

    private let lookup: any HostLookup
    private let state = Mutex(State())
    private let capacity: Int
    private let log: @Sendable (String) -> Void
    private static let failureLogInterval: TimeInterval = 10

    public init(lookup: any HostLookup, capacity: Int = 16_384, log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.lookup = lookup
        self.capacity = capacity
        self.log = log
    }

    /// The message that answers `host`: `answer` with categories, or `noanswer`.
    public static func message(for host: HostName, _ result: LookupResult) -> ControlCommand {
        switch result {
        case .categories(let categories, let timeToLive): .answer(host: host, categories: categories, timeToLive: timeToLive)
        case .unavailable: .noAnswer(host: host)
        }
    }

    /// Calls `reply` with the answer: at once when cached, else when the lookup returns.
    public func answer(_ question: NeedRulesQuestion, reply: @escaping @Sendable (ControlCommand) -> Void) {
        let host = question.host
        let cached: LookupResult? = state.withLock { state in
            let now = ContinuousClock.now
            guard let entry = state.cache[host], entry.expires > now else { return nil }
            // What is left of the time to live, so filter-data forgets it when this cache does.
            guard case .categories(let categories, _) = entry.result else { return entry.result }
            return .categories(categories, timeToLive: UInt32(max(1, Self.seconds(now.duration(to: entry.expires)).rounded(.up))))
        }
        if let cached {
            reply(NeedRulesAnswerer.message(for: host, cached))
            return
        }
        Task {
            let result = await lookup.lookUp(host)
            switch result {
            case .categories(_, let timeToLive) where timeToLive > 0:
                state.withLock { state in
                    if state.cache.count >= capacity { state.cache.removeAll(keepingCapacity: true) }
                    state.cache[host] = (result, ContinuousClock.now.advanced(by: .seconds(Int64(timeToLive))))
                }
            case .categories:
                break
            case .unavailable(let reason):
                noteFailure(host: host, reason: reason)
            }
            reply(NeedRulesAnswerer.message(for: host, result))
        }
    }
}

extension NeedRulesAnswerer {
    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    private func noteFailure(host: HostName, reason: String) {
        let line: String? = state.withLock { state in
            let now = ContinuousClock.now
            if let last = state.lastFailureLogged, Self.seconds(last.duration(to: now)) < NeedRulesAnswerer.failureLogInterval {
                state.failuresNotLogged += 1
                return nil
            }
            state.lastFailureLogged = now
            let earlier = state.failuresNotLogged
            state.failuresNotLogged = 0
            let more = earlier > 0 ? " (and \(earlier) more failed lookups since the last line)" : ""
            return "no lookup answer for \(host), so askDefault applies: \(reason)\(more)"
        }
        if let line { log(line) }
    }
}

/// The lookup folder on the rule server (`https://.../lookup/`), fetched with
/// the same TLS settings as bundles (system store plus `rules.caFile`, pins;
/// or the school's server's pinned key).
/// Short timeouts: a flow is waiting.
public struct HTTPSLookup: HostLookup {
    private let client: HTTPSClient
    private let host: String
    private let port: Int
    private let folder: String

    /// `path` is the bundle folder's path (starting and ending with `/`). The
    /// time limits are for filter-control; tests on a loaded machine give more.
    public init(
        host: String, port: Int, path: String, caFile: String?, pins: [String], serverKey: ServerFingerprint? = nil, socketMark: UInt32? = nil,
        connectTimeout: Duration = .seconds(2), requestTimeout: Duration = .seconds(3)
    ) throws(RuleUpdateError) {
        // The school's server (rules.serverKey): its pinned key, as for the bundles.
        let trust: HTTPSClient.Trust
        if let serverKey {
            trust = .pinnedKey(serverKey.bytes)
        } else {
            trust = .chain(try ServerTrust(caFile: caFile, pins: pins))
        }
        client = try HTTPSClient(
            trusting: trust, connectTimeout: connectTimeout, requestTimeout: requestTimeout, socketMark: socketMark,
            group: MultiThreadedEventLoopGroup.singleton)
        self.host = host
        self.port = port
        folder = path + "lookup/"
    }

    public func lookUp(_ host: HostName) async -> LookupResult {
        // The pieces come one after another, within this call: no lock.
        var body: [UInt8] = []
        do {
            _ = try await client.get(
                host: self.host, port: port, path: folder + host.description, file: "lookup/" + host.description, ifNoneMatch: nil,
                limit: 64 * 1024
            ) { buffer throws(RuleUpdateError) in
                body.append(contentsOf: buffer.readableBytesView)
            }
        } catch .httpStatus(_, 404) {
            return .categories([], timeToLive: LookupResult.unknownTimeToLive)
        } catch {
            return .unavailable(reason: error.description)
        }
        return LookupResult.parse(String(decoding: body, as: UTF8.self))
    }
}
