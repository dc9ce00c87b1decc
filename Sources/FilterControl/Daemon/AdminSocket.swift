import CHallpassSys
public import Foundation
import SharedStore

// unsafe in this file (the socket calls): the sockaddr_un is a local filled
// with a bounds-checked copy of the path (NUL included) and passed by address
// for one call; group lookups copy the gid out at once; reads and sends touch
// an array's storage inside its closure, within its count.
//
// The admin interface of filter-control: a Unix stream socket (by default
// /run/hallpass/control.sock) that only root and the admin group may open
// (mode 0660, group `admin.group`; 0600 without one). One request per
// connection: a JSON object on one line; the answer is one JSON object on
// one line, then the connection closes.
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
    }

    public var command: Command
    public var targets: [String]?
    public var json: Bool?
    /// `approve`, `deny`: the request.
    public var id: String?
    /// `approve`: how long the access lasts; nil: until revoked.
    public var seconds: Int?
    /// `requests`: decided ones too.
    public var all: Bool?

    public init(command: Command, targets: [String]? = nil, json: Bool? = nil, id: String? = nil, seconds: Int? = nil, all: Bool? = nil) {
        self.command = command
        self.targets = targets
        self.json = json
        self.id = id
        self.seconds = seconds
        self.all = all
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
    }

    public var rules: Rules
    public var dataProcess: DataProcess
    public var queue: UInt16
    public var failMode: String
    /// filter-data's counters (packets, verdicts by action, held flows, ...) and the kernel queue's drops.
    public var counters: [String: UInt64]
    public var now: Date
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

/// filter-control's side: accepts connections on a thread, one thread per request.
public final class AdminServer: @unchecked Sendable {
    // @unchecked Sendable: `listener` is set once before the thread starts and closed once by `stop`.
    public let path: String
    private var listener: Int32 = -1
    private let handler: @Sendable (AdminRequest) -> Data
    private let lock = NSLock()
    private var stopped = false

    /// Binds the socket (replacing a stale one) with the permissions above.
    /// `handler` returns the answer's JSON for a request.
    public init(path: String, group: String?, handler: @escaping @Sendable (AdminRequest) -> Data) throws(AdminSocketError) {
        self.path = path
        self.handler = handler
        var groupID: gid_t? = nil
        if let group {
            guard let entry = unsafe getgrnam(group) else { throw AdminSocketError("admin.group: no group named '\(group)' on this machine") }
            groupID = unsafe entry.pointee.gr_gid
        }
        let folder = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw AdminSocketError("cannot create \(folder): \(error.localizedDescription)")
        }
        var address = try AdminServer.address(path)
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw AdminSocketError("socket: \(systemErrorText(errno))", errno: errno) }
        // A socket file left by a crashed filter-control would make bind fail.
        unsafe unlink(path)
        // Bind with a tight umask so that nobody else can connect before the chmod.
        let oldMask = umask(0o177)
        let bound = unsafe withUnsafePointer(to: &address) {
            unsafe $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { unsafe bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(oldMask)
        guard bound == 0 else {
            let code = errno
            close(descriptor)
            throw AdminSocketError("cannot bind \(path): \(systemErrorText(code))", errno: code)
        }
        if let groupID {
            guard unsafe chown(path, 0, groupID) == 0, unsafe chmod(path, 0o660) == 0 else {
                let code = errno
                close(descriptor)
                throw AdminSocketError("cannot give \(path) to the admin group: \(systemErrorText(code))", errno: code)
            }
        }
        guard listen(descriptor, 16) == 0 else {
            let code = errno
            close(descriptor)
            throw AdminSocketError("listen: \(systemErrorText(code))", errno: code)
        }
        listener = descriptor
    }

    static func address(_ path: String) throws(AdminSocketError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw AdminSocketError("the socket path \(path) is too long")
        }
        unsafe withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            unsafe buffer.copyBytes(from: bytes)
            unsafe buffer[bytes.count] = 0
        }
        return address
    }

    public func start() {
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "hallpass.admin"
        thread.start()
    }

    /// Stops accepting and removes the socket file.
    public func stop() {
        let descriptor: Int32 = lock.withLock {
            guard !stopped else { return -1 }
            stopped = true
            return listener
        }
        guard descriptor >= 0 else { return }
        shutdown(descriptor, Int32(SHUT_RDWR))
        close(descriptor)
        unsafe unlink(path)
    }

    private func acceptLoop() {
        while true {
            let connection = hp_accept_cloexec(listener)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return  // stopped
            }
            let thread = Thread { [self] in serve(connection) }
            thread.start()
        }
    }

    private func serve(_ connection: Int32) {
        defer { close(connection) }
        // A client that sends nothing does not keep a thread for long.
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        unsafe setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard let line = AdminServer.readLine(connection, limit: 1 << 20) else { return }
        let answer: Data
        do {
            answer = handler(try AdminCoding.decoder.decode(AdminRequest.self, from: line))
        } catch {
            let reply = AdminReply(exitCode: 64, output: "filter-control: not a request it knows: \(error)\n", code: "admin.bad-request")
            answer = (try? AdminCoding.encoder.encode(reply)) ?? Data()
        }
        AdminServer.writeAll(connection, answer + Data("\n".utf8))
    }

    static func readLine(_ descriptor: Int32, limit: Int) -> Data? {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while data.count <= limit {
            let count = unsafe buffer.withUnsafeMutableBytes { unsafe read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { return data.isEmpty ? nil : data }
            data.append(contentsOf: buffer[0..<count])
            if let newline = data.firstIndex(of: UInt8(ascii: "\n")) { return data[data.startIndex..<newline] }
        }
        return nil
    }

    static func writeAll(_ descriptor: Int32, _ data: Data) {
        var remaining = data[...]
        while !remaining.isEmpty {
            let written = unsafe remaining.withUnsafeBytes { unsafe send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            remaining = remaining.dropFirst(written)
        }
    }
}

/// filterctl's side.
public enum AdminClient {
    /// Sends `request` and returns the answer's JSON. `timeout` bounds the whole exchange.
    public static func send(_ request: AdminRequest, to path: String, timeout: Int = 120) throws(AdminSocketError) -> Data {
        var address = try AdminServer.address(path)
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw AdminSocketError("socket: \(systemErrorText(errno))", errno: errno) }
        defer { close(descriptor) }
        let connected = unsafe withUnsafePointer(to: &address) {
            unsafe $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { unsafe connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            switch code {
            case ENOENT, ECONNREFUSED:
                throw AdminSocketError("filter-control is not running (no one answers on \(path))", errno: code)
            case EACCES, EPERM:
                throw AdminSocketError("not allowed to talk to filter-control on \(path): run as root or as a member of admin.group", errno: code)
            default:
                throw AdminSocketError("cannot connect to \(path): \(systemErrorText(code))", errno: code)
            }
        }
        var time = timeval(tv_sec: timeout, tv_usec: 0)
        unsafe setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        unsafe setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        let body: Data
        do {
            body = try AdminCoding.encoder.encode(request)
        } catch {
            throw AdminSocketError("cannot encode the request: \(error)")
        }
        AdminServer.writeAll(descriptor, body + Data("\n".utf8))
        guard let line = AdminServer.readLine(descriptor, limit: 16 << 20) else {
            throw AdminSocketError("filter-control closed the connection without an answer (or took longer than \(timeout) s)")
        }
        return line
    }
}
