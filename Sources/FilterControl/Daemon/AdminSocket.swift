import CHallpassSys
public import Foundation
import HallpassSystem
import SharedStore
import SystemPackage

// The admin interface of filter-control (served by AdminService): a Unix
// stream socket (by default /run/hallpass/control.sock) that only root and
// the admin group may open (mode 0660, group `admin.group`; 0600 without
// one). One request per connection: a JSON object on one line; the answer
// is one JSON object on one line, then the connection closes.
//
//   {"command":"status"}                              -> AdminStatus
//   {"command":"reload"}                              -> AdminReply (fetch now)
//   {"command":"check","targets":[...],"json":false}  -> AdminReply (the lines of `filterctl check`)
//   {"command":"requests","all":false,"json":false}   -> AdminReply (the access requests)
//   {"command":"approve","id":"...","seconds":3600}   -> AdminReply
//   {"command":"deny","id":"..."}                     -> AdminReply

public struct AdminRequest: Codable, Sendable, Hashable {
    public enum Command: String, Codable, Sendable {
        case status, reload, check
        case requests, approve, deny
        case examStart = "exam-start", examStop = "exam-stop", examStatus = "exam-status"
        case allow, block, overrides, removeOverride = "remove-override"
        case policyShow = "policy-show"
    }

    public var command: Command
    public var targets: [String]?
    public var json: Bool?
    /// `approve`, `deny`, `remove-override`: which one.
    public var id: String?
    /// `approve`, `exam-start`, `allow`, `block`: how long it lasts; nil: until ended by hand.
    public var seconds: Int?
    /// `requests`: decided ones too.
    public var all: Bool?
    /// `check`, `policy-show`: whose view (a uid, or a user name resolved by filter-control).
    public var uid: UInt32?
    public var user: String?
    /// `check`: at this time on the school's clock (`2026-11-25T10:15`) instead of now.
    public var at: String?
    /// `exam-start`, `allow`, `block`: the groups (none: the default ones, or everyone).
    public var groups: [String]?

    public init(
        command: Command, targets: [String]? = nil, json: Bool? = nil, id: String? = nil, seconds: Int? = nil, all: Bool? = nil, uid: UInt32? = nil,
        user: String? = nil, at: String? = nil, groups: [String]? = nil
    ) {
        self.command = command
        self.targets = targets
        self.json = json
        self.id = id
        self.seconds = seconds
        self.all = all
        self.uid = uid
        self.user = user
        self.at = at
        self.groups = groups
    }
}

/// The answer to `reload` and `check`: what filterctl prints and the exit code it ends with.
public struct AdminReply: Codable, Sendable, Hashable {
    public var exitCode: Int32
    public var output: String
    /// A stable code for the outcome (`reload.installed`, `reload.current`, a refusal's code).
    public var code: String?

    public init(exitCode: Int32, output: String, code: String? = nil) {
        self.exitCode = exitCode
        self.output = output
        self.code = code
    }
}

/// What `filterctl status` shows.
public struct AdminStatus: Codable, Sendable, Hashable {
    public struct Rules: Codable, Sendable, Hashable {
        public var version: UInt64?
        public var store: String
        public var installedAt: Date?
        public var source: String?
        public var lastFetchAt: Date?
        public var lastFetchResult: String?
        public var lastFetchCode: String?
    }

    public struct DataProcess: Codable, Sendable, Hashable {
        public var pid: Int32?
        public var startedAt: Date?
        public var restarts: Int
        public var lastExit: String?
        public var lastRulesRefusal: String?
        public var countersAt: Date?
        /// Whether filter-data answered this status's own request for its
        /// counters (false: they are the last ones it sent, of `countersAt`).
        public var countersFresh: Bool? = nil
    }

    /// The policy in force: where it comes from, schedules, exam, overrides.
    public struct PolicyStatus: Codable, Sendable, Hashable {
        /// `bundle version N` (the school's policy) or the configuration file's path.
        public var source: String
        public var groups: [String]
        /// `AUDIENCE: SCHEDULE, ...` for each audience with an active schedule.
        public var schedulesInForce: [String]
        public var exam: String
        public var overrides: Int
        /// Users filter-control has placed in a group so far.
        public var placedUsers: Int
        /// hallpass.yaml's policy keys without effect (the bundle brings the policy).
        public var ignoredLocalKeys: [String]
        /// The school's clock, now.
        public var clock: String
    }

    public var rules: Rules
    public var dataProcess: DataProcess
    public var queue: UInt16
    public var failMode: String
    /// filter-data's counters (packets, verdicts by action, held flows, ...) and the kernel queue's drops.
    public var counters: [String: UInt64]
    public var now: Date
    public var policy: PolicyStatus?
    /// The live channel to the school's server (`school:`); nil without one.
    public var live: LiveStatus? = nil

    /// The live channel: whether it reaches the server, the state held, the items in force, the refusals.
    public struct LiveStatus: Codable, Sendable, Hashable {
        public var connected: Bool
        public var lastContactAt: Date?
        public var lastError: String?
        /// The sequence of the live state held (0: none).
        public var sequence: Int64
        /// The machine's room as the server knows it.
        public var room: String?
        /// How many live keys the school's policy names (0: no `live:`, every item is refused).
        public var keys: Int
        public var items: [Item]
        /// The items of the state held that its checks refused.
        public var refusedInState: [String]
        public var statesRefused: UInt64
        public var itemsRefused: UInt64
        public var lastRefusal: String?

        public struct Item: Codable, Sendable, Hashable {
            public var id: String
            public var action: String
            public var targets: [String]
            public var scope: String
            public var by: String
            public var until: Date
            /// `until` on the school's clock.
            public var untilText: String
        }
    }
}

public enum AdminCoding {
    public static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }

    public static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}

public struct AdminSocketError: Error, CustomStringConvertible, Sendable {
    public var message: String
    /// The errno behind it, when there is one (ENOENT, ECONNREFUSED: no daemon; EACCES: not allowed).
    public var errno: Int32?

    public init(_ message: String, errno: Int32? = nil) {
        self.message = message
        self.errno = errno
    }

    public var description: String { message }
}

/// Reads and writes of the admin client.
enum AdminSocketIO {
    static func readLine(_ descriptor: FileDescriptor, limit: Int) -> Data? {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while data.count <= limit {
            guard let count = try? descriptor.readSome(into: &buffer), count > 0 else { return data.isEmpty ? nil : data }
            data.append(contentsOf: buffer[0..<count])
            if let newline = data.firstIndex(of: UInt8(ascii: "\n")) { return data[data.startIndex..<newline] }
        }
        return nil
    }

    /// Sends every byte; stops quietly when the daemon goes (its answer, or none, tells the rest).
    static func writeAll(_ descriptor: FileDescriptor, _ data: Data) {
        let bytes = Array(data)
        var offset = 0
        while offset < bytes.count, let sent = try? descriptor.send(bytes, from: offset, flags: .noSignal), sent > 0 {
            offset += sent
        }
    }
}

/// filterctl's side.
public enum AdminClient {
    /// Sends `request` and returns the answer's JSON. `timeout` bounds the whole exchange.
    public static func send(_ request: AdminRequest, to path: String, timeout: Int = 120) throws(AdminSocketError) -> Data {
        guard UnixSocket.fits(path) else { throw AdminSocketError("the socket path \(path) is too long") }
        let descriptor: FileDescriptor
        do {
            descriptor = try UnixSocket.connect(to: path)
        } catch {
            switch error {
            case .noSuchFileOrDirectory, .connectionRefused:
                throw AdminSocketError("filter-control is not running (no one answers on \(path))", errno: error.rawValue)
            case .permissionDenied, .notPermitted:
                throw AdminSocketError(
                    "not allowed to talk to filter-control on \(path): run as root or as a member of admin.group", errno: error.rawValue)
            default:
                throw AdminSocketError("cannot connect to \(path): \(error)", errno: error.rawValue)
            }
        }
        defer { descriptor.closeQuietly() }
        try? descriptor.setTimeouts(seconds: timeout)
        let body: Data
        do {
            body = try AdminCoding.encoder.encode(request)
        } catch {
            throw AdminSocketError("cannot encode the request: \(error)")
        }
        AdminSocketIO.writeAll(descriptor, body + Data("\n".utf8))
        guard let line = AdminSocketIO.readLine(descriptor, limit: 16 << 20) else {
            throw AdminSocketError("filter-control closed the connection without an answer (or took longer than \(timeout) s)")
        }
        return line
    }
}
