public import Foundation
import HallpassSystem
public import Logging
import NIOCore
import NIOPosix
public import ServiceLifecycle
import SharedStore
#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

/// The admin socket (`admin.socket`, default /run/hallpass/control.sock),
/// served with NIO: only root and the admin group may open it (mode 0660 and
/// group `admin.group`; 0600 without one). One request per connection: a
/// JSON object on one line; the answer is one JSON object on one line, then
/// the connection closes. The peer's credentials (SO_PEERCRED) name who
/// asked, for the log of overrides and exams.
public struct AdminService: Service {
    public let path: String
    let answer: @Sendable (AdminRequest, AdminPeer) async -> Data
    let logger: Logger
    private let server: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>

    /// The longest request accepted (a `check` of many targets).
    static let maximumRequestBytes = 1 << 20

    /// Binds the socket (replacing a stale one) with the permissions above.
    public init(path: String, group: String?, logger: Logger, answer: @escaping @Sendable (AdminRequest, AdminPeer) async -> Data) async throws {
        self.path = path
        self.answer = answer
        self.logger = logger
        var groupID: gid_t? = nil
        if let group {
            guard let id = UserDirectory().groupID(named: group) else { throw AdminSocketError("admin.group: no group named '\(group)' on this machine") }
            groupID = id
        }
        let folder = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        // The socket is bound inside a fresh folder only root can enter, given
        // its owner and mode there, and then renamed into place (replacing a
        // stale one): nobody can connect before the mode is right. The umask
        // is process-wide and other tasks create files meanwhile, so it is
        // not the tool for this.
        let privateFolder: String
        do {
            privateFolder = try FileSystem.makeUniqueDirectory(prefix: folder + "/.admin-")
        } catch {
            throw AdminSocketError("cannot make a private folder in \(folder): \(error.errno?.description ?? error.reason)", errno: error.errno?.rawValue)
        }
        defer { FileSystem.removeDirectory(privateFolder) }
        let staging = privateFolder + "/control.sock"
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(unixDomainSocketPath: staging, cleanupExistingSocketFile: false) { channel in
                channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
            }
        do throws(FileError) {
            if let groupID {
                try FileSystem.setOwner(staging, uid: 0, gid: groupID)
                try FileSystem.setMode(staging, 0o660)
            } else {
                try FileSystem.setMode(staging, 0o600)
            }
            try FileSystem.rename(staging, to: path)
        } catch {
            FileSystem.remove(staging)
            try? await server.channel.close()
            throw AdminSocketError(
                "cannot place the admin socket at \(path): \(error.errno?.description ?? error.reason)", errno: error.errno?.rawValue)
        }
        self.server = server
        logger.info("admin socket \(path)")
    }

    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await server.executeThenClose { connections in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in connections {
                        group.addTask { await serve(connection) }
                    }
                }
            }
        } onGracefulShutdown: {
            server.channel.close(promise: nil)
        }
        FileSystem.remove(path)
    }

    private func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>) async {
        let peer = await Self.peer(of: connection.channel)
        try? await connection.executeThenClose { inbound, outbound in
            // A client that sends nothing does not hold a task for long.
            let line: [UInt8]? = try await withThrowingTaskGroup(of: [UInt8]?.self) { group in
                group.addTask {
                    var bytes: [UInt8] = []
                    for try await chunk in inbound {
                        bytes += chunk.readableBytesView
                        if let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) { return Array(bytes[..<newline]) }
                        if bytes.count > Self.maximumRequestBytes { return nil }
                    }
                    return bytes.isEmpty ? nil : bytes
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(10))
                    return nil
                }
                let first = try await group.next() ?? nil
                group.cancelAll()
                return first
            }
            guard let line else { return }
            let answer: Data
            do {
                let request = try AdminCoding.decoder.decode(AdminRequest.self, from: Data(line))
                answer = await self.answer(request, peer)
            } catch {
                let reply = AdminReply(exitCode: 64, output: "filter-control: not a request it knows: \(error)\n", code: "admin.bad-request")
                answer = (try? AdminCoding.encoder.encode(reply)) ?? Data()
            }
            try await outbound.write(ByteBuffer(bytes: Array(answer) + [UInt8(ascii: "\n")]))
        }
    }

    /// Who is on the other end: SO_PEERCRED of the accepted socket.
    static func peer(of channel: any Channel) async -> AdminPeer {
        guard let provider = channel as? any SocketOptionProvider,
            let credentials: PeerCredentials = try? await provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED)).get()
        else { return AdminPeer(uid: UInt32.max, name: nil) }
        return AdminPeer(uid: credentials.uid, name: UserDirectory().userName(uid: credentials.uid))
    }
}

/// `struct ucred` (declared by glibc only under _GNU_SOURCE): what SO_PEERCRED fills in.
struct PeerCredentials: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}
