#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import SharedStore
import Synchronization
import SystemPackage

/// A deliberately small HTTP/1.1 client for rule downloads: one `GET` per
/// connection over TLS 1.2 or later, `If-None-Match`, `Content-Length` or
/// chunked bodies streamed to the caller with a byte limit, a connect timeout
/// and a deadline for the whole request. No redirects, no proxies, no
/// cookies, no compression: a bundle folder is static files.
///
/// The certificate check is ``ServerTrust``'s (system roots plus
/// `rules.caFile`, the host name, and the pins against the verified chain),
/// run from NIOSSL's custom verification callback; NIOSSL checks the host
/// name once more after the handshake. For the school's server
/// (`school:`) it is a pinned key instead: the certificate is accepted when,
/// and only when, the SHA-256 of its SubjectPublicKeyInfo is the fingerprint
/// the enrolment token carried, whoever issued it and whatever name it is
/// for (`hallpass-server init` makes a self-signed one). A refused
/// certificate ends the handshake, so nothing of the request is sent.
///
/// `get` streams a download; `send` makes one request with a small body
/// and returns the whole answer, whatever its status (the school's API).
struct HTTPSClient: Sendable {
    /// Which certificates the client accepts.
    enum Trust: Sendable {
        /// A verified chain to a trusted root, for the name, with `rules.pins` (rule downloads).
        case chain(ServerTrust)
        /// Exactly the leaf whose SubjectPublicKeyInfo has this SHA-256 (the school's server).
        case pinnedKey([UInt8])
    }

    /// The answer to `send`.
    struct Reply: Sendable {
        var status: Int
        var contentType: String?
        var body: [UInt8]
    }

    struct Response: Sendable {
        /// 200 or 304; any other status is thrown as ``RuleUpdateError/httpStatus(file:status:)``.
        var status: Int
        var etag: String?
        /// Body bytes handed to the caller.
        var byteCount: UInt64
    }

    let trust: Trust
    let connectTimeout: Duration
    let requestTimeout: Duration
    /// `SO_MARK` for this client's sockets: filter-control marks its own
    /// connections with the allow mark so the kernel rules let them pass
    /// unqueued (rule downloads keep working while filter-data is down in
    /// closed mode). Needs CAP_NET_ADMIN; nil leaves sockets unmarked.
    let socketMark: UInt32?
    private let group: any EventLoopGroup
    private let context: NIOSSLContext

    init(
        trust: ServerTrust, connectTimeout: Duration, requestTimeout: Duration, socketMark: UInt32? = nil, group: any EventLoopGroup
    ) throws(RuleUpdateError) {
        try self.init(trusting: .chain(trust), connectTimeout: connectTimeout, requestTimeout: requestTimeout, socketMark: socketMark, group: group)
    }

    init(
        trusting trust: Trust, connectTimeout: Duration, requestTimeout: Duration, socketMark: UInt32? = nil, group: any EventLoopGroup
    ) throws(RuleUpdateError) {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        switch trust {
        case .chain:
            configuration.certificateVerification = .fullVerification
        case .pinnedKey:
            // The pin is the whole check: a school's self-signed certificate names
            // whatever `hallpass-server init` was told, not necessarily the name or
            // address a machine uses. The callback still runs (it is only skipped for .none).
            configuration.certificateVerification = .noHostnameVerification
        }
        configuration.trustRoots = .default
        do {
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw .tls(server: "-", reason: "cannot set up TLS: \(error)")
        }
        self.trust = trust
        self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout
        self.socketMark = socketMark
        self.group = group
    }

    /// GETs `path` from `host:port`. The body of a 200 answer goes to `body` in
    /// pieces; more than `limit` bytes (announced or received) is refused.
    /// `file` names the request in errors.
    func get(
        host: String, port: Int, path: String, file: String, ifNoneMatch: String?, limit: UInt64,
        body: @escaping (ByteBuffer) throws(RuleUpdateError) -> Void
    ) async throws(RuleUpdateError) -> Response {
        let server = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let outcome = RequestOutcome()

        let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>
        do {
            channel = try await connect(host: host, port: port, outcome: outcome)
        } catch {
            throw HTTPSClient.connectFailure(error, server: server, timeout: connectTimeout)
        }

        let deadline = channel.channel.eventLoop.scheduleTask(in: .nanoseconds(requestTimeout.nanoseconds)) {
            outcome.timedOut.withLock { $0 = true }
            channel.channel.close(promise: nil)
        }
        defer { deadline.cancel() }

        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path)
        let shownHost = host.contains(":") ? "[\(host)]" : host
        head.headers.add(name: "Host", value: port == 443 ? shownHost : "\(shownHost):\(port)")
        head.headers.add(name: "User-Agent", value: "hallpass-filter-control")
        head.headers.add(name: "Accept", value: "*/*")
        head.headers.add(name: "Accept-Encoding", value: "identity")
        head.headers.add(name: "Connection", value: "close")
        if let ifNoneMatch { head.headers.add(name: "If-None-Match", value: ifNoneMatch) }
        let request = head

        do {
            return try await withTaskCancellationHandler {
                try await channel.executeThenClose { inbound, outbound in
                    // One write for the whole request: a server that answers a
                    // GET as soon as its head is in and closes (Connection:
                    // close) must not turn a complete answer into "I/O on
                    // closed channel" for a second write. Should the write
                    // fail anyway, whatever the server sent is still read; the
                    // write's error is only reported when nothing came back.
                    var writeError: (any Error)?
                    do {
                        try await outbound.write(contentsOf: [.head(request), .end(nil)])
                    } catch {
                        writeError = error
                    }
                    var response: Response?
                    for try await part in inbound {
                        switch part {
                        case .head(let answer):
                            let status = Int(answer.status.code)
                            if (100..<200).contains(status) { continue }
                            guard status == 200 || (status == 304 && ifNoneMatch != nil) else {
                                throw RuleUpdateError.httpStatus(file: file, status: status)
                            }
                            if status == 304 {
                                return Response(status: 304, etag: answer.headers.first(name: "ETag"), byteCount: 0)
                            }
                            if let announced = answer.headers.first(name: "Content-Length").flatMap(UInt64.init), announced > limit {
                                throw RuleUpdateError.tooLarge(file: file, limit: limit)
                            }
                            response = Response(status: status, etag: answer.headers.first(name: "ETag"), byteCount: 0)
                        case .body(let buffer):
                            guard var current = response else {
                                throw RuleUpdateError.badResponse(file: file, reason: "a body before the status line")
                            }
                            current.byteCount += UInt64(buffer.readableBytes)
                            guard current.byteCount <= limit else { throw RuleUpdateError.tooLarge(file: file, limit: limit) }
                            try body(buffer)
                            response = current
                        case .end:
                            guard let response else { throw RuleUpdateError.badResponse(file: file, reason: "no status line") }
                            return response
                        }
                    }
                    if response == nil, let writeError { throw writeError }
                    throw RuleUpdateError.truncated(file: file)
                }
            } onCancel: {
                channel.channel.close(promise: nil)
            }
        } catch {
            throw failure(error, outcome: outcome, server: server, file: file)
        }
    }

    /// Makes one request to `host:port` (`body` with `Content-Type: application/json`
    /// when given) and returns the status and the whole body, whatever the
    /// status; a body over `limit` bytes is refused. `headers` go as given
    /// (the school's signature). Failures to connect, of TLS and of HTTP
    /// framing are thrown as for `get`, with `path` naming the request.
    func send(
        host: String, port: Int, method: HTTPMethod, path: String, headers: [(String, String)], body: [UInt8]?, limit: Int
    ) async throws(RuleUpdateError) -> Reply {
        let server = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let outcome = RequestOutcome()
        let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>
        do {
            channel = try await connect(host: host, port: port, outcome: outcome)
        } catch {
            throw HTTPSClient.connectFailure(error, server: server, timeout: connectTimeout)
        }
        let deadline = channel.channel.eventLoop.scheduleTask(in: .nanoseconds(requestTimeout.nanoseconds)) {
            outcome.timedOut.withLock { $0 = true }
            channel.channel.close(promise: nil)
        }
        defer { deadline.cancel() }

        var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
        let shownHost = host.contains(":") ? "[\(host)]" : host
        head.headers.add(name: "Host", value: port == 443 ? shownHost : "\(shownHost):\(port)")
        head.headers.add(name: "User-Agent", value: "hallpass-filter-control")
        head.headers.add(name: "Accept", value: "application/json")
        head.headers.add(name: "Accept-Encoding", value: "identity")
        head.headers.add(name: "Connection", value: "close")
        for (name, value) in headers { head.headers.add(name: name, value: value) }
        var parts: [HTTPClientRequestPart] = []
        if let body {
            head.headers.add(name: "Content-Type", value: "application/json")
            head.headers.add(name: "Content-Length", value: String(body.count))
            parts = [.head(head), .body(.byteBuffer(ByteBuffer(bytes: body))), .end(nil)]
        } else {
            parts = [.head(head), .end(nil)]
        }
        let request = parts

        do {
            return try await withTaskCancellationHandler {
                try await channel.executeThenClose { inbound, outbound in
                    // One write, as in `get`; a write error matters only when no answer came.
                    var writeError: (any Error)?
                    do {
                        try await outbound.write(contentsOf: request)
                    } catch {
                        writeError = error
                    }
                    var reply: Reply?
                    for try await part in inbound {
                        switch part {
                        case .head(let answer):
                            let status = Int(answer.status.code)
                            if (100..<200).contains(status) { continue }
                            if let announced = answer.headers.first(name: "Content-Length").flatMap(Int.init), announced > limit {
                                throw RuleUpdateError.tooLarge(file: path, limit: UInt64(limit))
                            }
                            reply = Reply(status: status, contentType: answer.headers.first(name: "Content-Type"), body: [])
                        case .body(var buffer):
                            guard reply != nil else {
                                throw RuleUpdateError.badResponse(file: path, reason: "a body before the status line")
                            }
                            guard reply!.body.count + buffer.readableBytes <= limit else {
                                throw RuleUpdateError.tooLarge(file: path, limit: UInt64(limit))
                            }
                            reply!.body += buffer.readBytes(length: buffer.readableBytes) ?? []
                        case .end:
                            guard let reply else { throw RuleUpdateError.badResponse(file: path, reason: "no status line") }
                            return reply
                        }
                    }
                    if reply == nil, let writeError { throw writeError }
                    throw RuleUpdateError.truncated(file: path)
                }
            } onCancel: {
                channel.channel.close(promise: nil)
            }
        } catch {
            throw failure(error, outcome: outcome, server: server, file: path)
        }
    }

    /// What a request that failed after connecting failed of, for `get` and
    /// `send` alike: cancelled, the certificate (what the verification callback
    /// saw), the time limit, or the connection and its framing.
    private func failure(_ error: any Error, outcome: RequestOutcome, server: String, file: String) -> RuleUpdateError {
        if Task.isCancelled { return .cancelled }
        if let verdict = outcome.verdict.withLock({ $0 }) {
            switch verdict {
            case .trusted: break
            case .untrusted(let reason): return .untrustedCertificate(server: server, reason: reason)
            case .wrongName: return .certificateName(server: server)
            case .pinMismatch(let seen): return .pinMismatch(server: server, seen: seen)
            }
        }
        if outcome.timedOut.withLock({ $0 }) {
            return .timedOut(server: server, seconds: Int(requestTimeout.components.seconds))
        }
        return HTTPSClient.requestFailure(error, server: server, file: file, handshakeDone: outcome.verdict.withLock { $0 } != nil)
    }

    private func connect(
        host: String, port: Int, outcome: RequestOutcome
    ) async throws -> NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart> {
        let context = self.context
        let trust = self.trust
        // SNI takes names only; for an address NIOSSL checks the certificate against the peer address.
        let isAddress = host.contains(":") || host.allSatisfy { $0.isNumber || $0 == "." }
        let serverName = isAddress ? nil : host
        var bootstrap = ClientBootstrap(group: group).connectTimeout(.nanoseconds(connectTimeout.nanoseconds))
        if let socketMark {
            bootstrap = bootstrap.channelOption(.socketOption(.init(rawValue: SO_MARK)), value: SocketOptionValue(socketMark))
        }
        return try await bootstrap
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let tls = try NIOSSLClientHandler(
                        context: context, serverHostname: serverName,
                        customVerificationCallbackWithMetadata: { certificates, promise in
                            let presented: [[UInt8]]
                            do {
                                presented = try certificates.map { try $0.toDERBytes() }
                            } catch {
                                outcome.verdict.withLock { $0 = .untrusted(reason: "unreadable certificate: \(error)") }
                                promise.succeed(.failed)
                                return
                            }
                            Task {
                                let result: ServerTrust.Verdict
                                switch trust {
                                case .chain(let chain): result = await chain.evaluate(presented: presented, host: host)
                                case .pinnedKey(let fingerprint): result = ServerTrust.evaluate(presented: presented, pinnedKey: fingerprint)
                                }
                                outcome.verdict.withLock { $0 = result }
                                promise.succeed(result == .trusted ? .certificateVerified(VerificationMetadata(nil)) : .failed)
                            }
                        })
                    try channel.pipeline.syncOperations.addHandler(tls)
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
    }

    /// A failure to open the connection, in words an admin can act on.
    private static func connectFailure(_ error: any Error, server: String, timeout: Duration) -> RuleUpdateError {
        if let error = error as? ChannelError, case .connectTimeout = error {
            return .timedOut(server: server, seconds: Int(timeout.components.seconds))
        }
        if let error = error as? NIOConnectionError {
            if let dns = error.dnsAError ?? error.dnsAAAAError, error.connectionErrors.isEmpty {
                return .unreachable(server: server, reason: "the name does not resolve (\(dns))")
            }
            let timedOut = error.connectionErrors.contains { failure in
                if let channelError = failure.error as? ChannelError, case .connectTimeout = channelError { return true }
                return false
            }
            if timedOut {
                return .timedOut(server: server, seconds: Int(timeout.components.seconds))
            }
            let reasons = error.connectionErrors.map { failure in
                "\(failure.target): \(systemReason(failure.error))"
            }
            return .unreachable(server: server, reason: reasons.isEmpty ? "no address to connect to" : reasons.joined(separator: "; "))
        }
        return .unreachable(server: server, reason: systemReason(error))
    }

    /// A failure after the connection was open: TLS, HTTP framing, or the peer going away.
    private static func requestFailure(_ error: any Error, server: String, file: String, handshakeDone: Bool) -> RuleUpdateError {
        if let error = error as? RuleUpdateError { return error }
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return .certificateName(server: server)
        }
        if let error = error as? NIOSSLError {
            switch error {
            case .handshakeFailed(let inner):
                return .tls(server: server, reason: "handshake failed (\(inner))")
            case .uncleanShutdown:
                return handshakeDone
                    ? .truncated(file: file) : .tls(server: server, reason: "the server closed the connection during the handshake")
            default:
                return .tls(server: server, reason: "\(error)")
            }
        }
        if let error = error as? HTTPParserError {
            // The decoder reports a connection closed in the middle of a body as a parse error.
            if error == .invalidEOFState { return .truncated(file: file) }
            return .badResponse(file: file, reason: "\(error)")
        }
        if let error = error as? IOError {
            return handshakeDone ? .truncated(file: file) : .unreachable(server: server, reason: systemReason(error))
        }
        if error is ChannelError {
            return handshakeDone
                ? .truncated(file: file) : .unreachable(server: server, reason: "the connection closed during the TLS handshake")
        }
        return .badResponse(file: file, reason: "\(error)")
    }

    private static func systemReason(_ error: any Error) -> String {
        if let error = error as? IOError { return Errno(rawValue: error.errnoCode).description.lowercased() }
        return "\(error)"
    }
}

/// What the event loop learns about one request while `get` waits for it:
/// the certificate check's verdict (from NIOSSL's callback) and whether
/// the deadline closed the connection. Shared by those closures and `get`.
private final class RequestOutcome: Sendable {
    let verdict = Mutex<ServerTrust.Verdict?>(nil)
    let timedOut = Mutex(false)
}

extension Duration {
    /// The duration in whole nanoseconds (saturating), for NIO's `TimeAmount`.
    fileprivate var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : scaled + attoseconds / 1_000_000_000
    }
}
