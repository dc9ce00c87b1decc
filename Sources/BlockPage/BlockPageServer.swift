#if canImport(Glibc)
import Glibc
#endif
import Foundation
import HallpassIPC
public import NIOCore
import NIOHTTP1
public import NIOPosix
import NIOSSL
import HallpassSystem
import SharedStore
import Synchronization
import VerdictCore

/// Serves the block page over HTTP and, with the school's local CA, HTTPS,
/// on the addresses blocked names resolve to and on the page's own port.
/// One request per connection (the answer closes it), bodies bounded by
/// the form's limit, an idle connection closed after 10 s.
///
/// HTTPS: one TLS context for every HTTPS listener; each handshake gets a
/// certificate for the name it asked for (or, without a name, for the first
/// HTTPS listener's address) from `BlockPageCertificates`, which makes it
/// again when it grows old or the CA changes. No restart is needed for
/// either, nor for a CA made after start (`useAuthority(_:)`).
public final class BlockPageServer: Sendable {
    public struct Listener: Sendable, Hashable, CustomStringConvertible {
        public var address: String
        public var port: Int
        public var tls: Bool

        public init(address: String, port: Int, tls: Bool) {
            self.address = address
            self.port = port
            self.tls = tls
        }

        public var description: String { (tls ? "https://" : "http://") + (address.contains(":") ? "[\(address)]" : address) + ":\(port)" }
    }

    private let responder: CurrentResponder
    private let channels = Mutex<[(listener: Listener, channel: any Channel)]>([])
    /// The HTTPS side once there is a CA; until then, the HTTPS listeners waiting for one.
    private let https = Mutex<HTTPS>(.waiting([]))
    private let group: any EventLoopGroup
    private let certificatePolicy: LeafCertificatePolicy
    private let clock: any CertificateClock
    private let report: @Sendable (BlockPageCertificateEvent) -> Void

    private enum HTTPS {
        case waiting([Listener])
        case serving(context: NIOSSLContext, certificates: BlockPageCertificates)
    }

    /// `certificates` and `clock` decide when HTTPS certificates are made
    /// again; `report` hears of CA changes found while serving.
    public init(
        responder: BlockPageResponder, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        certificates: LeafCertificatePolicy = LeafCertificatePolicy(), clock: any CertificateClock = WallClock(),
        report: @escaping @Sendable (BlockPageCertificateEvent) -> Void = { _ in }
    ) {
        self.responder = CurrentResponder(responder)
        self.group = group
        self.certificatePolicy = certificates
        self.clock = clock
        self.report = report
    }

    /// New pages (templates, strings, organization) for the next requests.
    public func use(_ responder: BlockPageResponder) {
        self.responder.pages.withLock { $0 = responder }
    }

    /// Binds every listener it can; HTTPS ones need `authority` (one set of
    /// certificates serves them all) and without it wait for
    /// `useAuthority(_:)`. Returns the problems (one per listener that could
    /// not be set up); the other listeners serve.
    public func start(_ listeners: [Listener], authority: LocalCertificateAuthority?) -> [BlockPageError] {
        var problems: [BlockPageError] = []
        for listener in listeners where !listener.tls {
            problems += bind([listener], tls: nil)
        }
        let secure = listeners.filter(\.tls)
        guard !secure.isEmpty else { return problems }
        https.withLock { $0 = .waiting(secure) }
        guard let authority else {
            problems.append(
                BlockPageError(
                    code: "ca.missing",
                    message: "\(secure.map(\.description).joined(separator: ", ")) wait for the local CA ('filterctl ca init', then 'filterctl reload')"))
            return problems
        }
        return problems + useAuthority(authority).problems
    }

    /// What `useAuthority(_:)` did.
    public struct AuthorityChange: Sendable {
        /// The HTTPS listeners started now (they were waiting for a CA).
        public var started: [String] = []
        /// The certificates come from this CA from now on (it replaced another).
        public var replaced = false
        public var problems: [BlockPageError] = []
    }

    /// Uses `authority` for HTTPS from now on: the HTTPS listeners waiting
    /// for a CA start; when serving already, names get certificates from
    /// the new CA at their next handshake (nothing changes when it is the
    /// CA in use). filter-control calls it on `filterctl reload`.
    @discardableResult
    public func useAuthority(_ authority: LocalCertificateAuthority) -> AuthorityChange {
        // Under the lock throughout: two callers never both start the waiting listeners.
        https.withLock { https in
            var change = AuthorityChange()
            switch https {
            case .serving(_, let certificates):
                change.replaced = certificates.use(authority)
            case .waiting(let listeners):
                guard let first = listeners.first else { return change }
                let context: NIOSSLContext
                let certificates: BlockPageCertificates
                do {
                    certificates = try BlockPageCertificates(authority: authority, policy: certificatePolicy, clock: clock, report: report)
                    context = try Self.tlsContext(certificates: certificates, defaultName: first.address)
                } catch {
                    change.problems.append(BlockPageError(code: "tls.setup", message: "cannot set up HTTPS for the block page: \(error)"))
                    return change
                }
                https = .serving(context: context, certificates: certificates)
                change.problems = bind(listeners, tls: context)
                let bound = Set(listening)
                change.started = listeners.map(\.description).filter(bound.contains)
            }
            return change
        }
    }

    /// Whether HTTPS has a CA (its listeners started, or tried to).
    public var servesHTTPS: Bool { certificates != nil }

    /// The certificates of the HTTPS listeners, once they serve.
    var certificates: BlockPageCertificates? {
        if case .serving(_, let certificates) = https.withLock({ $0 }) { return certificates }
        return nil
    }

    /// Closes every listener (open connections finish their answer).
    public func stop() {
        let open = channels.withLock { channels in
            defer { channels.removeAll() }
            return channels
        }
        for (_, channel) in open { try? channel.close().wait() }
    }

    /// The listeners that are serving, as URLs.
    public var listening: [String] {
        channels.withLock { $0.map(\.listener.description) }
    }

    /// The ports the listeners are bound to (a listener asked for port 0 gets one from the kernel).
    var boundPorts: [Listener: Int] {
        channels.withLock { Dictionary($0.map { ($0.listener, $0.channel.localAddress?.port ?? $0.listener.port) }, uniquingKeysWith: { a, _ in a }) }
    }

    /// Binds each listener; a problem for each that cannot.
    private func bind(_ listeners: [Listener], tls: NIOSSLContext?) -> [BlockPageError] {
        var problems: [BlockPageError] = []
        for listener in listeners {
            do {
                try bind(listener, tls: tls)
            } catch {
                problems.append(BlockPageError(code: "listen", message: "the block page cannot listen on \(listener): \(error)"))
            }
        }
        return problems
    }

    private func bind(_ listener: Listener, tls: NIOSSLContext?) throws {
        let responder = self.responder
        let scheme = listener.tls ? "https" : "http"
        let channel = try ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .childChannelOption(.allowRemoteHalfClosure, value: false)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    if let tls { try pipeline.addHandler(NIOSSLServerHandler(context: tls)) }
                    try pipeline.addHandler(IdleStateHandler(readTimeout: .seconds(10)))
                    try pipeline.configureHTTPServerPipeline(withErrorHandling: true)
                    try pipeline.addHandler(BlockPageHTTPHandler(responder: responder, scheme: scheme))
                }
            }
            .bind(host: listener.address, port: listener.port).wait()
        channels.withLock { $0.append((listener, channel)) }
    }

    static func tlsContext(certificates: BlockPageCertificates, defaultName: String) throws -> NIOSSLContext {
        // The configuration needs a certificate, but every handshake gets its
        // own below: this one is never sent (it would never be renewed).
        let initial = try certificates.override(for: defaultName)
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: initial.certificateChain ?? [], privateKey: initial.privateKey!)
        configuration.minimumTLSVersion = .tlsv12
        configuration.applicationProtocols = ["http/1.1"]
        configuration.sslContextCallback = { values, promise in
            // A certificate for the name the browser asked for (SNI); none
            // (a visit by address): the block page's own address. Renewal
            // and a new CA happen here, when a certificate is picked.
            let name = values.serverHostname.flatMap { $0.isEmpty ? nil : $0 } ?? defaultName
            do {
                promise.succeed(try certificates.override(for: name))
            } catch {
                promise.fail(error)
            }
        }
        return try NIOSSLContext(configuration: configuration)
    }
}

/// The pages served now: the server replaces them (`use(_:)`), and every
/// connection's handler reads them at its request.
final class CurrentResponder: Sendable {
    let pages: Mutex<BlockPageResponder>

    init(_ responder: BlockPageResponder) {
        pages = Mutex(responder)
    }
}

/// Reads one request (head and a bounded body), answers it, closes.
final class BlockPageHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let responder: CurrentResponder
    private let scheme: String
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false

    init(responder: CurrentResponder, scheme: String) {
        self.responder = responder
        self.scheme = scheme
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(let buffer):
            if body.count + buffer.readableBytes > AccessRequestForm.maximumBodyBytes {
                tooLarge = true
            } else {
                body.append(contentsOf: buffer.readableBytesView)
            }
        case .end:
            guard let head else { return context.close(promise: nil) }
            let responder = responder.pages.withLock { $0 }
            var response: BlockPageResponse
            if tooLarge {
                response = responder.renderer.errorPage(status: 413, acceptLanguage: head.headers.first(name: "accept-language"))
            } else {
                let hostHeader = head.headers.first(name: "host").map(Self.hostWithoutPort)
                let user = LocalPeer.userName(client: context.channel.remoteAddress, server: context.channel.localAddress)
                let request = BlockPageRequest(
                    method: head.method.rawValue, target: head.uri, host: hostHeader,
                    acceptLanguage: head.headers.first(name: "accept-language"), body: body, scheme: scheme, user: user)
                response = responder.respond(to: request)
            }
            write(response, head: head, context: context)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func write(_ response: BlockPageResponse, head: HTTPRequestHead, context: ChannelHandlerContext) {
        var headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.count))
        headers.replaceOrAdd(name: "Connection", value: "close")
        let status = HTTPResponseStatus(statusCode: response.status)
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if head.method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { [context] _ in context.close(promise: nil) }
    }

    /// `example.org:8080` → `example.org`, `[::1]:80` → `::1`.
    static func hostWithoutPort(_ value: String) -> String {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("["), let end = trimmed.firstIndex(of: "]") {
            return String(trimmed[trimmed.index(after: trimmed.startIndex)..<end])
        }
        if trimmed.filter({ $0 == ":" }).count == 1, let colon = trimmed.firstIndex(of: ":") {
            return String(trimmed[..<colon])
        }
        return trimmed
    }
}

/// Who is on the other end of a local connection: the owner of the client
/// socket, found in /proc/net/tcp and tcp6 by the connection's two
/// addresses and ports. Ports alone are not enough: anyone may bind a local
/// port another user's connection to some server on 443 also uses, and put
/// that user's name on an access request.
enum LocalPeer {
    /// The connection as the client socket's row of /proc/net/tcp or tcp6
    /// keys it: TCP, the client's end as the source. An IPv4-mapped IPv6
    /// address (a dual-stack listener's view of an IPv4 client) counts as its
    /// IPv4 address, as the kernel's IPv4 table shows it.
    static func connection(client: IPAddress, clientPort: UInt16, server: IPAddress, serverPort: UInt16) -> FlowKey {
        FlowKey(protocolNumber: 6, source: client.unmappingIPv4, sourcePort: clientPort, destination: server.unmappingIPv4, destinationPort: serverPort)
    }

    /// The connection between two socket addresses, nil for a Unix socket.
    static func connection(client: SocketAddress?, server: SocketAddress?) -> FlowKey? {
        guard let client = endpoint(client), let server = endpoint(server) else { return nil }
        return connection(client: client.address, clientPort: client.port, server: server.address, serverPort: server.port)
    }

    /// A table row's local and remote `ADDRESS:PORT` fields as the connection they key.
    static func connection(procLocal local: Substring, procRemote remote: Substring) -> FlowKey? {
        guard let local = endpoint(procField: local), let remote = endpoint(procField: remote) else { return nil }
        return connection(client: local.address, clientPort: local.port, server: remote.address, serverPort: remote.port)
    }

    private static func endpoint(_ socketAddress: SocketAddress?) -> (address: IPAddress, port: UInt16)? {
        guard let port = socketAddress?.port.flatMap({ UInt16(exactly: $0) }), let text = socketAddress?.ipAddress, let address = IPAddress(text)
        else { return nil }
        return (address, port)
    }

    /// A table's `ADDRESS:PORT` field: the address as 32-bit words in hex,
    /// each printed as the host reads the network-order bytes in memory.
    private static func endpoint(procField field: Substring) -> (address: IPAddress, port: UInt16)? {
        let parts = field.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1], radix: 16), parts[0].count == 8 || parts[0].count == 32 else { return nil }
        var bytes: [UInt8] = []
        var rest = parts[0]
        while !rest.isEmpty {
            guard let word = UInt32(rest.prefix(8), radix: 16) else { return nil }
            let memoryOrder = word.littleEndian
            bytes += [0, 8, 16, 24].map { UInt8(truncatingIfNeeded: memoryOrder >> $0) }
            rest = rest.dropFirst(8)
        }
        guard let address = IPAddress(networkBytes: bytes) else { return nil }
        return (address, port)
    }

    static func userName(client: SocketAddress?, server: SocketAddress?) -> String? {
        connection(client: client, server: server).flatMap(userName(of:))
    }

    /// The owner of the client socket of `connection` (as `connection(client:...)` makes it).
    static func userName(of connection: FlowKey) -> String? {
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            // Read to the end: Foundation's readers stop after the first 4 KB (about 26 sockets) of a /proc table.
            guard let bytes = try? BoundedFile.read(table, limit: 64 << 20) else { continue }
            let text = String(decoding: bytes, as: UTF8.self)
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count > 7, LocalPeer.connection(procLocal: fields[1], procRemote: fields[2]) == connection, let uid = uid_t(fields[7])
                else { continue }
                return LocalUserName.name(of: uid)
            }
        }
        return nil
    }
}
