// The proxy's relay on SwiftNIO: each connection the kernel sends it is read
// until its ClientHello is whole (filter-data's parser, ProxyDecisions), then
// spliced to where the client meant to go, the ClientHello first and byte
// for byte, with no TLS state; or, for a name its person's plan inspects,
// terminated and read request by request (InspectedConnection); or refused
// (a TLS alert, then the close).
import HallpassIPC
public import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import VerdictCore

public struct ProxySettings: Sendable {
    /// The most connections relayed at once (client sides).
    public var maximumConnections = 4096
    /// A relayed connection with no byte either way for this long is closed.
    public var idleTimeout: TimeAmount = .minutes(10)
    /// How long a client may take to send its whole ClientHello.
    public var helloTimeout: TimeAmount = .seconds(10)
    /// How long the connection to the server may take.
    public var connectTimeout: TimeAmount = .seconds(10)
    /// How long the check of a server's certificate before a splice may take
    /// (its connection and its handshake up to the certificate).
    public var certificateCheckTimeout: TimeAmount = .seconds(5)
    /// How long a connection waits to learn its user's group.
    public var placementTimeout: TimeAmount = .seconds(2)
    /// `SO_MARK` of the proxy's own connections: the allow mark, so the kernel
    /// rules neither redirect them again nor queue them (the client's side was judged).
    public var socketMark: UInt32 = 0x0010_0000
    /// Per direction, what waits to be written before the other side stops being read.
    public var writeBufferHigh = 128 * 1024
    public var writeBufferLow = 32 * 1024

    public init() {}
}

public final class ProxyServer: Sendable {
    let state: ProxyState
    let settings: ProxySettings
    let group: any EventLoopGroup

    public init(state: ProxyState, settings: ProxySettings, group: any EventLoopGroup) {
        self.state = state
        self.settings = settings
        self.group = group
    }

    /// Serves the listening sockets (made before the sandbox); the channels, to close at the end.
    public func serve(listeners: [Int32]) throws -> [any Channel] {
        try listeners.map { descriptor in
            try ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 1024)
                .childChannelOption(.allowRemoteHalfClosure, value: true)
                .childChannelOption(.writeBufferWaterMark, value: .init(low: settings.writeBufferLow, high: settings.writeBufferHigh))
                .childChannelInitializer { [self] channel in
                    channel.eventLoop.makeCompletedFuture { try self.accepted(channel) }
                }
                .withBoundSocket(descriptor).wait()
        }
    }

    /// A new connection: counted, and read until its ClientHello is whole.
    private func accepted(_ channel: any Channel) throws {
        let counters = state.counters
        var active = 0
        counters.update { values in
            values.accepted += 1
            values.active += 1
            active = values.active
        }
        channel.closeFuture.whenComplete { _ in counters.update { $0.active -= 1 } }
        guard active <= settings.maximumConnections else {
            counters.refuse(.full)
            channel.close(promise: nil)
            return
        }
        try channel.pipeline.syncOperations.addHandler(ClientHelloReader(server: self))
    }

    /// The TLS client of the certificate checks: any certificate is read
    /// (the check looks at its names, it does not trust it), and no version
    /// or suite a server may still speak is left out.
    private static let checkContext: NIOSSLContext? = {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .noHostnameVerification
        configuration.minimumTLSVersion = .tlsv1
        return try? NIOSSLContext(configuration: configuration)
    }()

    /// The certificate the server at `destination` shows a handshake that
    /// sends `serverName` (nil: none), from a TLS connection of the proxy's
    /// own with the allow mark. The handshake is cut as soon as the
    /// certificate came (nothing is sent to the server but the ClientHello);
    /// no certificate within `certificateCheckTimeout` is `unavailable`.
    func checkCertificate(at destination: SocketAddress, serverName: String?, on loop: any EventLoop) -> EventLoopFuture<ServerCertificate> {
        guard let context = Self.checkContext else { return loop.makeSucceededFuture(.unavailable) }
        let promise = loop.makePromise(of: ServerCertificate.self)
        let deadline = loop.scheduleTask(in: settings.certificateCheckTimeout) { promise.succeed(.unavailable) }
        ClientBootstrap(group: loop)
            .connectTimeout(settings.certificateCheckTimeout)
            .channelOption(.socketOption(.init(rawValue: SO_MARK)), value: SocketOptionValue(Int32(bitPattern: settings.socketMark)))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler = try NIOSSLClientHandler(context: context, serverHostname: serverName) { certificates, verification in
                        promise.succeed(certificates.first.map(CertificateChecks.names(of:)) ?? .unavailable)
                        // Nothing more is needed of this server: the handshake ends here.
                        verification.succeed(NIOSSLVerificationResult.failed)
                    }
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(to: destination)
            .whenComplete { result in
                switch result {
                case .success(let channel):
                    // A handshake the server ends before its certificate completes nothing: the close does.
                    channel.closeFuture.whenComplete { _ in promise.succeed(.unavailable) }
                    promise.futureResult.whenComplete { _ in channel.close(promise: nil) }
                case .failure:
                    promise.succeed(.unavailable)
                }
            }
        promise.futureResult.whenComplete { _ in deadline.cancel() }
        return promise.futureResult
    }

    /// Connects to where the client meant to go, with the allow mark, on the client's event loop.
    func connect(to destination: SocketAddress, on loop: any EventLoop) -> EventLoopFuture<any Channel> {
        ClientBootstrap(group: loop)
            .connectTimeout(settings.connectTimeout)
            .channelOption(.socketOption(.init(rawValue: SO_MARK)), value: SocketOptionValue(Int32(bitPattern: settings.socketMark)))
            .channelOption(.allowRemoteHalfClosure, value: true)
            .channelOption(.writeBufferWaterMark, value: .init(low: settings.writeBufferLow, high: settings.writeBufferHigh))
            .connect(to: destination)
    }
}

/// Reads a connection's first bytes until they decide it, then splices or refuses it.
final class ClientHelloReader: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let server: ProxyServer
    private var bytes: [UInt8] = []
    private var destination: SocketAddress?
    private var destinationFailed = false
    /// A decision is being made or carried out: later bytes wait in `bytes`.
    private var deciding = false
    private var done = false
    /// The client ended its side (a half-close) before the splice: the server hears it after the bytes.
    private var clientInputClosed = false
    private var timeout: Scheduled<Void>?

    init(server: ProxyServer) {
        self.server = server
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let ipv6: Bool
        if case .v6 = context.channel.localAddress { ipv6 = true } else { ipv6 = false }
        let loop = context.eventLoop.assumeIsolated()
        ProxySockets.originalDestination(of: context.channel, ipv6: ipv6).assumeIsolated().whenComplete { [self] result in
            switch result {
            case .success(let address): destination = address
            case .failure: destinationFailed = true
            }
            decideIfReady(context: context)
        }
        timeout = loop.scheduleTask(in: server.settings.helloTimeout) { [self] in
            guard !deciding, !done else { return }
            refuse(.incomplete, context: context)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        if let read = buffer.readBytes(length: buffer.readableBytes) { bytes += read }
        decideIfReady(context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        done = true
        timeout?.cancel()
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, case .inputClosed = event {
            clientInputClosed = true
            // Nothing more will come: a hello not whole now never will be.
            if !deciding { refuse(.incomplete, context: context) }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        done = true
        context.close(promise: nil)
    }

    /// Decides once the ClientHello is whole and the destination known.
    private func decideIfReady(context: ChannelHandlerContext) {
        guard !deciding, !done else { return }
        if destinationFailed {
            refuse(.noDestination, context: context)
            return
        }
        guard let destination, ProxyDecisions.helloIsComplete(bytes.span) else {
            if bytes.count >= 1 << 17 { refuse(.incomplete, context: context) }
            return
        }
        deciding = true
        let uid = context.channel.remoteAddress.flatMap { ProxySockets.uid(client: $0, destination: destination) }
        decide(uid: uid, destination: destination, context: context, asked: false)
    }

    private func decide(uid: UInt32?, destination: SocketAddress, context: ChannelHandlerContext, asked: Bool) {
        guard !done else { return }
        guard let plan = server.state.plan(for: uid) else {
            guard let uid, !asked else {
                refuse(.unknownUser, context: context)
                return
            }
            server.state.waitForPlacement(of: uid, on: context.eventLoop, timeout: server.settings.placementTimeout).assumeIsolated()
                .whenComplete { [self] result in
                    switch result {
                    case .success: decide(uid: uid, destination: destination, context: context, asked: true)
                    case .failure: refuse(.unknownUser, context: context)
                    }
                }
            return
        }
        let interception = server.state.interception
        switch ProxyDecisions.decide(bytes.span, plan: plan, canInspect: interception != nil) {
        case .splice(let reason):
            checkThenSplice(reason, plan: plan, uid: uid, destination: destination, context: context)
        case .inspect(let name):
            guard let interception else { return refuse(.noAuthority, context: context) }
            inspect(name, interception: interception, uid: uid, destination: destination, context: context)
        case .refuse(let reason):
            refuse(reason, context: context)
        case .readMore:
            // helloIsComplete said it was whole: not reached.
            refuse(.incomplete, context: context)
        }
    }

    private func refuse(_ reason: RefusalReason, context: ChannelHandlerContext) {
        guard !done else { return }
        done = true
        timeout?.cancel()
        server.state.counters.refuse(reason)
        // A client that spoke TLS hears why; any other just sees the close.
        let alert = reason == .notTLS || reason == .noDestination ? [] : ProxyDecisions.accessDeniedAlert
        guard !alert.isEmpty else {
            context.close(promise: nil)
            return
        }
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: alert))).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }

    /// Splices once the certificate the server shows for the connection's
    /// name is known (`CertificateChecks`, made by the proxy's own handshake
    /// or kept from one) and covers no name the person's plan inspects;
    /// refuses it otherwise, with a record (`ProxyDecisions.afterCertificateCheck`).
    private func checkThenSplice(
        _ reason: SpliceReason, plan: InspectionPlan, uid: UInt32?, destination: SocketAddress, context: ChannelHandlerContext
    ) {
        guard ProxyDecisions.needsCertificateCheck(plan) else { return splice(to: destination, context: context) }
        let server = self.server
        let loop = context.eventLoop
        let sent = ProxyDecisions.serverName(bytes.span)
        let name = ProxyDecisions.checkName(sent)
        let key = CertificateChecks.Key(destination: destination, serverName: name)
        server.state.certificateChecks.certificate(for: key, on: loop) {
            server.checkCertificate(at: destination, serverName: name, on: loop)
        }.assumeIsolated().whenComplete { [self] result in
            guard !done else { return }
            switch ProxyDecisions.afterCertificateCheck((try? result.get()) ?? .unavailable, splicing: reason, plan: plan) {
            case .splice:
                splice(to: destination, context: context)
            case .refuse(let refusal, let reasonForRecord):
                server.state.report(
                    FlowReport(
                        flow: flowKey(context: context, destination: destination) ?? ProxyDecisions.unknownFlow, uid: uid, kind: "tls",
                        host: sent, path: nil, verdict: .drop, reason: reasonForRecord))
                refuse(refusal, context: context)
            }
        }
    }

    /// The connection's addresses and ports as the client meant them (the original destination).
    private func flowKey(context: ChannelHandlerContext, destination: SocketAddress) -> FlowKey? {
        context.channel.remoteAddress.flatMap(ProxySockets.address).flatMap { client in
            ProxySockets.address(destination).map {
                FlowKey(protocolNumber: 6, source: client.address, sourcePort: client.port, destination: $0.address, destinationPort: $0.port)
            }
        }
    }

    /// Terminates TLS with a leaf for `name`: the TLS server, the HTTP codec
    /// and the request handler join the pipeline after this reader, which
    /// hands them the bytes read so far (the ClientHello first) and leaves.
    private func inspect(_ name: HostName, interception: Interception, uid: UInt32?, destination: SocketAddress, context: ChannelHandlerContext) {
        done = true
        timeout?.cancel()
        let server = self.server
        server.state.counters.update { $0.inspected += 1 }
        let flow = flowKey(context: context, destination: destination)
        let facts = InspectedConnectionFacts(serverName: name, flow: flow, uid: uid)
        do {
            let pipeline = context.pipeline.syncOperations
            try pipeline.addHandler(NIOSSLServerHandler(context: interception.serverContext), position: .last)
            try pipeline.addHandler(IdleStateHandler(allTimeout: server.settings.idleTimeout), position: .last)
            try pipeline.configureHTTPServerPipeline(
                position: .last, withPipeliningAssistance: true, withErrorHandling: true, withOutboundHeaderValidation: true,
                withEncoderConfiguration: .init(), withDecoderLimitConfiguration: InspectedRequests.requestLimits)
            try pipeline.addHandler(
                InspectedRequestHandler(server: server, interception: interception, connection: facts, destination: destination), position: .last)
        } catch {
            context.close(promise: nil)
            return
        }
        // The ClientHello (and anything after it) to the TLS server, as if it had just come.
        context.fireChannelRead(wrapInboundOut(context.channel.allocator.buffer(bytes: bytes)))
        context.fireChannelReadComplete()
        bytes = []
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    /// Connects to the destination, sends it every byte read so far, and
    /// joins the two channels; this reader leaves the client's pipeline.
    private func splice(to destination: SocketAddress, context: ChannelHandlerContext) {
        let server = self.server
        server.connect(to: destination, on: context.eventLoop).assumeIsolated().whenComplete { [self] result in
            guard !done else {
                if case .success(let upstream) = result { upstream.close(promise: nil) }
                return
            }
            switch result {
            case .failure:
                done = true
                timeout?.cancel()
                server.state.counters.update { $0.upstreamFailures += 1 }
                context.close(promise: nil)
            case .success(let upstream):
                done = true
                timeout?.cancel()
                server.state.counters.update { $0.spliced += 1 }
                let (clientGlue, serverGlue) = GlueHandler.matchedPair(counters: server.state.counters)
                do {
                    let client = context.pipeline.syncOperations
                    try client.addHandler(IdleStateHandler(allTimeout: server.settings.idleTimeout), position: .last)
                    try client.addHandler(clientGlue, position: .last)
                    let up = upstream.pipeline.syncOperations
                    try up.addHandler(IdleStateHandler(allTimeout: server.settings.idleTimeout))
                    try up.addHandler(serverGlue)
                } catch {
                    upstream.close(promise: nil)
                    context.close(promise: nil)
                    return
                }
                // The ClientHello (and anything after it) first, exactly as it came.
                upstream.writeAndFlush(upstream.allocator.buffer(bytes: bytes), promise: nil)
                if clientInputClosed { upstream.close(mode: .output, promise: nil) }
                bytes = []
                context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            }
        }
    }
}

/// Joins two channels: what one reads the other writes, and a side whose
/// partner cannot take more (its write buffer above the high mark) is not
/// read until it can (NIO's connect-proxy example, with half-closes and
/// idle timeouts).
final class GlueHandler: ChannelDuplexHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny
    typealias OutboundOut = NIOAny

    private var partner: GlueHandler?
    private var context: ChannelHandlerContext?
    private var pendingRead = false
    private let counters: ProxyCounters

    private init(counters: ProxyCounters) {
        self.counters = counters
    }

    static func matchedPair(counters: ProxyCounters) -> (GlueHandler, GlueHandler) {
        let first = GlueHandler(counters: counters)
        let second = GlueHandler(counters: counters)
        first.partner = second
        second.partner = first
        return (first, second)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        partner = nil
    }

    private func partnerWrite(_ data: NIOAny) { context?.write(data, promise: nil) }
    private func partnerFlush() { context?.flush() }
    private func partnerWriteEOF() { context?.close(mode: .output, promise: nil) }
    private func partnerCloseFull() { context?.close(promise: nil) }
    private var partnerWritable: Bool { context?.channel.isWritable ?? false }

    private func partnerBecameWritable() {
        if pendingRead {
            pendingRead = false
            context?.read()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        partner?.partnerWrite(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        partner?.partnerFlush()
    }

    func channelInactive(context: ChannelHandlerContext) {
        partner?.partnerCloseFull()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, case .inputClosed = event {
            partner?.partnerWriteEOF()
        } else if event is IdleStateHandler.IdleStateEvent {
            counters.update { $0.idleClosed += 1 }
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { partner?.partnerBecameWritable() }
    }

    func read(context: ChannelHandlerContext) {
        if let partner, partner.partnerWritable {
            context.read()
        } else {
            pendingRead = true
        }
    }
}
