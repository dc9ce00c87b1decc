// An inspected connection on SwiftNIO: the browser's side is TLS with a leaf
// for the connection's name (Interception.serverContext), then NIO's
// HTTP/1.1 codec (bounded heads, keep-alive, pipelined requests answered
// in order); each request is decided (InspectedRequests.decide) and either
// answered here with the block page or forwarded to the original
// destination over a TLS connection of the proxy's own, whose certificate
// must verify for the name against the system's trust store before a byte
// of the request leaves. The server's response streams back; each side is
// read only as fast as the other takes it.
import BlockPage
import HallpassIPC
import NIOCore
import NIOHTTP1
import NIOSSL
import NIOTLS
import VerdictCore

/// The browser's side, last in its pipeline (after NIOSSLServerHandler and
/// `configureHTTPServerPipeline`).
final class InspectedRequestHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let server: ProxyServer
    private let interception: Interception
    private let connection: InspectedConnectionFacts
    private let destination: SocketAddress
    private var context: ChannelHandlerContext?

    /// The request being answered (HTTPServerPipelineHandler hands them over one at a time).
    private struct Current {
        var head: HTTPRequestHead
        var outcome: InspectedOutcome
        var keepAlive: Bool
        /// The head sent to the server (kept for one retry on a fresh connection).
        var upstreamHead: HTTPRequestHead?
        var requestEnded = false
        /// Whether the record went to filter-control (a forwarded request's once its server was checked).
        var reported = false
        var responseStarted = false
        var responseEnded = false
        /// Sent on a connection that served an earlier request (a server may close such a one as the request goes out).
        var onReusedConnection = false
        var retried = false
        /// A body part went to the server: the request cannot be sent again.
        var sentBody = false
    }
    private var current: Current?
    private var upstream: UpstreamHandler?
    /// A read of the browser's side held back until the server's side takes more.
    private var readHeld = false
    private var closed = false

    init(server: ProxyServer, interception: Interception, connection: InspectedConnectionFacts, destination: SocketAddress) {
        self.server = server
        self.interception = interception
        self.connection = connection
        self.destination = destination
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    // MARK: The browser's requests

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            begin(head)
        case .body(let body):
            guard var request = current, request.outcome.forwards, !request.responseEnded else { return }
            request.sentBody = true
            current = request
            toServer(.body(.byteBuffer(body)))
        case .end(let trailers):
            guard var request = current else { return }
            request.requestEnded = true
            current = request
            if request.outcome.forwards, !request.responseEnded { toServer(.end(trailers)) }
            finishIfDone()
        }
    }

    /// Decides a request and answers it here or starts it on its way.
    private func begin(_ head: HTTPRequestHead) {
        let engines = server.state.current
        let plan = engines.inspectionPlan(for: connection.uid) ?? engines.inspectionPlans[.ungrouped] ?? InspectionPlan(policy: InspectionPolicy())
        let engine = engines.engine(for: connection.uid) ?? engines.fallback
        let outcome = InspectedRequests.decide(head, connection: connection, plan: plan, engine: engine)
        current = Current(head: head, outcome: outcome, keepAlive: head.isKeepAlive)
        guard outcome.forwards else {
            report()
            server.state.counters.update { $0.requestsBlocked += 1 }
            answer(blocked: outcome)
            return
        }
        current?.upstreamHead = InspectedRequests.upstreamHead(head, setting: outcome.decision.headers)
        if let upstream, upstream.isVerified {
            current?.onReusedConnection = true
            report()
        }
        toServer(.head(current!.upstreamHead!))
    }

    /// The record of the current request, once.
    private func report() {
        guard var request = current, !request.reported else { return }
        request.reported = true
        current = request
        if request.outcome.forwards { server.state.counters.update { $0.requestsAllowed += 1 } }
        server.state.report(request.outcome.report)
    }

    // MARK: The server's side

    /// Sends a part of the request to the server, connecting first if needed.
    private func toServer(_ part: HTTPClientRequestPart) {
        if let upstream {
            upstream.send(part)
            return
        }
        let upstream = UpstreamHandler(owner: self)
        self.upstream = upstream
        upstream.send(part)
        guard let loop = context?.eventLoop else { return }
        let name = connection.serverName.description
        let tls = interception.upstreamContext
        server.connect(to: destination, on: loop).assumeIsolated().whenComplete { [self] result in
            switch result {
            case .failure(let error):
                guard self.upstream === upstream else { return }
                serverFailed(upstream, error: error)
            case .success(let channel):
                guard self.upstream === upstream, !closed else {
                    channel.close(promise: nil)
                    return
                }
                do {
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(try NIOSSLClientHandler(context: tls, serverHostname: name))
                    try pipeline.addHTTPClientHandlers(decoderLimitConfiguration: InspectedRequests.responseLimits)
                    try pipeline.addHandler(IdleStateHandler(allTimeout: server.settings.idleTimeout))
                    try pipeline.addHandler(upstream)
                } catch {
                    channel.close(promise: nil)
                    serverFailed(upstream, error: error)
                }
            }
        }
    }

    /// The server's certificate verified (the handshake completed): what waited goes out.
    func serverVerified(_ upstream: UpstreamHandler) {
        guard upstream === self.upstream else { return }
        report()
        releaseRead()
    }

    func serverResponse(_ upstream: UpstreamHandler, _ part: HTTPClientResponsePart) {
        guard upstream === self.upstream, let context, var request = current, request.outcome.forwards, !request.responseEnded else {
            // A response nobody asked for: that connection is out of step.
            upstream.close()
            if upstream === self.upstream { self.upstream = nil }
            return
        }
        switch part {
        case .head(let head):
            request.responseStarted = true
            upstream.keepsAlive = head.isKeepAlive
            current = request
            context.write(wrapOutboundOut(.head(InspectedRequests.browserHead(head, version: request.head.version, keepAlive: request.keepAlive))), promise: nil)
        case .body(let body):
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        case .end(let trailers):
            request.responseEnded = true
            current = request
            context.writeAndFlush(wrapOutboundOut(.end(trailers)), promise: nil)
            // A server that ends its connection, or answered before the whole request came: a fresh connection next time.
            if !upstream.keepsAlive || !request.requestEnded {
                upstream.close()
                self.upstream = nil
            }
            finishIfDone()
        }
    }

    func serverReadComplete(_ upstream: UpstreamHandler) {
        guard upstream === self.upstream else { return }
        context?.flush()
    }

    /// The server's connection failed (connect, TLS, HTTP) or ended.
    func serverFailed(_ upstream: UpstreamHandler, error: (any Error)?) {
        guard upstream === self.upstream else { return }
        self.upstream = nil
        upstream.close()
        guard var request = current, request.outcome.forwards, !request.responseEnded else { return }
        if request.responseStarted {
            // Half a response cannot be finished: the browser sees the connection end.
            close()
            return
        }
        let certificate = error.flatMap(UpstreamHandler.certificateProblem)
        if certificate == nil, error == nil || error is ChannelError || error is IOError, request.onReusedConnection, !request.retried, !request.sentBody,
            request.head.method == .GET || request.head.method == .HEAD, let head = request.upstreamHead
        {
            // A kept-alive connection the server closed as the request went out: once more on a fresh one.
            request.retried = true
            request.onReusedConnection = false
            current = request
            toServer(.head(head))
            if request.requestEnded { toServer(.end(nil)) }
            return
        }
        if let certificate {
            server.state.counters.update { $0.certificateFailures += 1 }
            request.outcome = InspectedRequests.certificateFailure(request.outcome, detail: certificate)
            request.reported = false
            current = request
            report()
            server.state.counters.update { $0.requestsBlocked += 1 }
            answer(blocked: request.outcome)
        } else {
            report()
            server.state.counters.update { $0.upstreamFailures += 1 }
            answer(page: server.state.pages.renderer.errorPage(status: 502, acceptLanguage: request.head.headers.first(name: "accept-language")))
        }
    }

    /// Whether the server's side can take more of the request now.
    var serverTakesMore: Bool { upstream?.isWritable ?? false }

    func serverWritable(_ upstream: UpstreamHandler) {
        guard upstream === self.upstream else { return }
        releaseRead()
    }

    /// Whether the browser's side can take more of a response now.
    var browserTakesMore: Bool { context?.channel.isWritable ?? false }

    // MARK: Answers of the proxy's own

    private func answer(blocked outcome: InspectedOutcome) {
        guard let request = current else { return }
        let page = server.state.pages.renderer.blockPage(
            for: InspectedRequests.blockedRequest(outcome, serverName: connection.serverName),
            acceptLanguage: request.head.headers.first(name: "accept-language"))
        answer(page: page)
    }

    /// Writes `page` as the whole response; a server connection this request used goes (half a request went there).
    private func answer(page: BlockPageResponse) {
        guard let context, var request = current, !request.responseStarted else { return }
        request.responseStarted = true
        request.responseEnded = true
        current = request
        if request.outcome.forwards || request.upstreamHead != nil, let upstream {
            upstream.close()
            self.upstream = nil
        }
        let head = InspectedRequests.responseHead(for: page, version: request.head.version, keepAlive: request.keepAlive)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if request.head.method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: page.body)))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        finishIfDone()
    }

    /// A request whose response and body both ended makes way for the next (or the close).
    private func finishIfDone() {
        guard let request = current, request.requestEnded, request.responseEnded else {
            releaseRead()
            return
        }
        current = nil
        if !request.keepAlive {
            close()
            return
        }
        releaseRead()
    }

    // MARK: Reading, closing

    func read(context: ChannelHandlerContext) {
        // While a request's body goes to a server that cannot take more (or is not checked yet), the browser waits.
        if let request = current, request.outcome.forwards, !request.requestEnded, !request.responseEnded,
            !(upstream.map { $0.isVerified && $0.isWritable } ?? false)
        {
            readHeld = true
            return
        }
        context.read()
    }

    private func releaseRead() {
        guard readHeld, let context else { return }
        if let request = current, request.outcome.forwards, !request.requestEnded, !request.responseEnded,
            !(upstream.map { $0.isVerified && $0.isWritable } ?? false)
        {
            return
        }
        readHeld = false
        context.read()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { upstream?.browserWritable() }
        context.fireChannelWritabilityChanged()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            server.state.counters.update { $0.idleClosed += 1 }
            close()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        upstream?.close()
        upstream = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        close()
    }

    private func close() {
        guard !closed else { return }
        closed = true
        upstream?.close()
        upstream = nil
        context?.close(promise: nil)
    }
}

/// The server's side of one inspected request stream: last in the pipeline
/// of the proxy's own connection (after NIOSSLClientHandler and NIO's HTTP
/// client codec); what it reads goes to its owner, what the owner sends waits
/// here until the server's certificate has verified.
final class UpstreamHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = HTTPClientRequestPart
    typealias OutboundOut = HTTPClientRequestPart

    private weak var owner: InspectedRequestHandler?
    private var context: ChannelHandlerContext?
    /// Parts sent before the handshake completed.
    private var waiting: [HTTPClientRequestPart] = []
    private(set) var isVerified = false
    private var readHeld = false
    private var closed = false
    /// Whether the server keeps the connection after its last response.
    var keepsAlive = true

    init(owner: InspectedRequestHandler) {
        self.owner = owner
    }

    var isWritable: Bool { context?.channel.isWritable ?? false }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func send(_ part: HTTPClientRequestPart) {
        guard !closed else { return }
        guard isVerified, let context else {
            waiting.append(part)
            return
        }
        context.writeAndFlush(wrapOutboundOut(part), promise: nil)
    }

    func close() {
        guard !closed else { return }
        closed = true
        waiting = []
        context?.close(promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted = event {
            isVerified = true
            for part in waiting { context.write(wrapOutboundOut(part), promise: nil) }
            waiting = []
            context.flush()
            owner?.serverVerified(self)
            return
        }
        if event is IdleStateHandler.IdleStateEvent {
            // A kept connection nobody used for a while (or a server that went quiet mid-response).
            owner?.serverFailed(self, error: nil)
            close()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        owner?.serverResponse(self, unwrapInboundIn(data))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        owner?.serverReadComplete(self)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !closed { owner?.serverFailed(self, error: nil) }
        closed = true
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !closed { owner?.serverFailed(self, error: error) }
        close()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { owner?.serverWritable(self) }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        // The response waits while the browser cannot take more.
        if let owner, !owner.browserTakesMore {
            readHeld = true
            return
        }
        context.read()
    }

    func browserWritable() {
        guard readHeld, let context else { return }
        readHeld = false
        context.read()
    }

    /// What makes `error` a failure of the server's certificate, for the block
    /// page's rule; nil for any other failure (refused, reset, timed out).
    static func certificateProblem(_ error: any Error) -> String? {
        if let extra = error as? NIOSSLExtraError {
            if extra == .failedToValidateHostname || extra == .serverHostnameImpossibleToMatch {
                return "the certificate is not for this name"
            }
            return "TLS: \(extra)"
        }
        if let ssl = error as? NIOSSLError {
            let text = "\(ssl)"
            if text.contains("CERTIFICATE_VERIFY_FAILED") { return "the certificate does not verify against the system's trust store" }
            if case .handshakeFailed = ssl { return "the TLS handshake failed" }
        }
        if let boring = error as? BoringSSLError {
            let text = "\(boring)"
            if text.contains("CERTIFICATE_VERIFY_FAILED") { return "the certificate does not verify against the system's trust store" }
            return "the TLS handshake failed"
        }
        return nil
    }
}
