#if canImport(Glibc)
import Glibc
#endif
public import Logging
public import NIOCore
public import NIOPosix
import NIOSSL

/// Sends RFC 5424 records to the school's collector over UDP, TCP or TLS
/// (RFC 6587 / RFC 5425 octet counting on streams).
///
/// Records wait in a bounded buffer while the collector cannot be reached:
/// when it is full the oldest record goes (counted as dropped). A stream
/// connection that fails is made again with a growing delay (0.5 s
/// doubling to 30 s, ±20 %), and records whose write did not complete are
/// sent again on the next connection. A record counts as sent once the
/// kernel took it: bytes a TCP connection holds when the collector vanishes
/// mid-stream are lost without a signal (RFC 6587 has no acknowledgement);
/// the local file keeps every record in any case.
///
/// Its sockets carry `socketMark` (filter-control gives its allow mark, as
/// for rule downloads): the kernel rules pass them without queueing, so the
/// collector is reached while filter-data restarts in closed mode, and the
/// connection, which shows no name, is not judged by `policy.noName`.
public actor SyslogForwarder {
    public struct Counters: Sendable, Hashable, Codable {
        public var sent: UInt64 = 0
        /// Records dropped because the buffer was full.
        public var dropped: UInt64 = 0
        /// Records waiting now.
        public var buffered: Int = 0
        public var connected = false
        /// Connections made (the first one included).
        public var connections: UInt64 = 0
        public var lastError: String?
    }

    public struct Backoff: Sendable {
        public var initial: Duration
        public var maximum: Duration
        public init(initial: Duration = .milliseconds(500), maximum: Duration = .seconds(30)) {
            self.initial = initial
            self.maximum = maximum
        }
    }

    public let target: AuditSettings.SyslogTarget
    private let caFile: String?
    private let capacity: Int
    private let backoff: Backoff
    private let logger: Logger
    private let group: any EventLoopGroup
    private let socketMark: UInt32?
    private var buffer = CircularBuffer<[UInt8]>()
    private var counters = Counters()
    private var channel: (any Channel)?
    private var udpAddress: SocketAddress?
    private var wakeUp: CheckedContinuation<Void, Never>?
    private var finishing = false
    /// How many records at the front of `buffer` are being written now (never dropped while in flight).
    private var inFlight = 0

    public init(
        target: AuditSettings.SyslogTarget, caFile: String?, capacity: Int, backoff: Backoff = Backoff(), logger: Logger,
        socketMark: UInt32? = nil, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.target = target
        self.socketMark = socketMark
        self.caFile = caFile
        self.capacity = max(1, capacity)
        self.backoff = backoff
        self.logger = logger
        self.group = group
    }

    /// Queues one message (an RFC 5424 message without framing); never waits.
    public func enqueue(_ message: [UInt8]) {
        if buffer.count >= capacity {
            counters.dropped += 1
            guard buffer.count > inFlight else { return }
            buffer.remove(at: buffer.index(buffer.startIndex, offsetBy: inFlight))
        }
        buffer.append(target.transport == .udp ? message : AuditFormat.octetCounted(message))
        wake()
    }

    public func currentCounters() -> Counters {
        var result = counters
        result.buffered = buffer.count
        result.connected = channel?.isActive ?? false
        return result
    }

    /// Sends until cancelled, or until `finish` and the buffer is empty (or the collector is unreachable).
    public func run() async {
        var delay = backoff.initial
        while !Task.isCancelled {
            if buffer.isEmpty {
                if finishing { break }
                await waitForWork()
                continue
            }
            if channel == nil || channel?.isActive == false {
                do {
                    try await connect()
                    delay = backoff.initial
                } catch {
                    counters.lastError = "\(target): \(error)"
                    logger.warning(
                        "audit: cannot reach the syslog collector; records wait in the buffer",
                        metadata: ["hallpass.audit.syslog": "\(target)", "hallpass.error": "\(error)", "hallpass.audit.buffered": "\(buffer.count)"])
                    if finishing { break }
                    let jitter = Double.random(in: 0.8...1.2)
                    try? await Task.sleep(for: delay * jitter)
                    delay = min(delay * 2, backoff.maximum)
                    continue
                }
            }
            await sendBuffered()
        }
        try? await channel?.close()
        channel = nil
    }

    /// Stops taking the wait for new records: `run` returns once the buffer is sent or the collector cannot be reached.
    public func finish() {
        finishing = true
        wake()
    }

    private func waitForWork() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                if !buffer.isEmpty || finishing || Task.isCancelled {
                    continuation.resume()
                } else {
                    wakeUp = continuation
                }
            }
        } onCancel: {
            Task { await self.wake() }
        }
    }

    private func wake() {
        wakeUp?.resume()
        wakeUp = nil
    }

    private func connect() async throws {
        if let old = channel {
            channel = nil
            try? await old.close()
        }
        let target = self.target
        let mark = socketMark
        switch target.transport {
        case .udp:
            let address = try await resolve(target)
            let bind = address.protocol == .inet6 ? "::" : "0.0.0.0"
            // Made on the event loop's thread, like the stream connections below:
            // the socket belongs to that thread's network namespace.
            let loop = group.next()
            channel = try await loop.flatSubmit {
                var bootstrap = DatagramBootstrap(group: loop)
                if let mark { bootstrap = bootstrap.channelOption(.socketOption(.init(rawValue: SO_MARK)), value: SocketOptionValue(mark)) }
                return bootstrap.bind(host: bind, port: 0)
            }.get()
            udpAddress = address
        case .tcp, .tls:
            let sslContext: NIOSSLContext?
            if target.transport == .tls {
                var configuration = TLSConfiguration.makeClientConfiguration()
                configuration.minimumTLSVersion = .tlsv12
                if let caFile { configuration.additionalTrustRoots = [.file(caFile)] }
                sslContext = try NIOSSLContext(configuration: configuration)
            } else {
                sslContext = nil
            }
            let serverName = Self.isAddress(target.host) ? nil : target.host
            let logger = self.logger
            let loop = group.next()
            // The bootstrap is made on the loop's thread, where it connects.
            channel = try await loop.flatSubmit {
                var bootstrap = ClientBootstrap(group: loop)
                if let mark { bootstrap = bootstrap.channelOption(.socketOption(.init(rawValue: SO_MARK)), value: SocketOptionValue(mark)) }
                return bootstrap
                    .connectTimeout(.seconds(10))
                    .channelOption(.socketOption(.so_keepalive), value: 1)
                    .channelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            if let sslContext {
                                try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverName))
                            }
                            try channel.pipeline.syncOperations.addHandler(CollectorConnectionHandler(logger: logger))
                        }
                    }
                    .connect(host: target.host, port: target.port)
            }.get()
        }
        counters.connections += 1
        counters.lastError = nil
        logger.info("audit: connected to the syslog collector", metadata: ["hallpass.audit.syslog": "\(target)"])
    }

    /// Writes the buffer in batches; a failed write closes the channel and leaves the records for the next connection.
    private func sendBuffered() async {
        guard let channel else { return }
        while !buffer.isEmpty, channel.isActive {
            let batch = Array(buffer.prefix(64))
            inFlight = batch.count
            defer { inFlight = 0 }
            do {
                if let address = udpAddress, target.transport == .udp {
                    var last: EventLoopFuture<Void>?
                    for message in batch {
                        last = channel.write(AddressedEnvelope(remoteAddress: address, data: ByteBuffer(bytes: message)))
                    }
                    channel.flush()
                    try await last?.get()
                } else {
                    var bytes = ByteBuffer()
                    for message in batch { bytes.writeBytes(message) }
                    try await channel.writeAndFlush(bytes).get()
                }
                buffer.removeFirst(batch.count)
                counters.sent += UInt64(batch.count)
            } catch {
                counters.lastError = "\(target): \(error)"
                logger.warning(
                    "audit: sending to the syslog collector failed; reconnecting",
                    metadata: ["hallpass.audit.syslog": "\(target)", "hallpass.error": "\(error)"])
                try? await channel.close()
                self.channel = nil
                return
            }
        }
    }

    private func resolve(_ target: AuditSettings.SyslogTarget) async throws -> SocketAddress {
        // getaddrinfo blocks: NIO's thread pool keeps it off the event loops and the cooperative threads.
        try await NIOThreadPool.singleton.runIfActive {
            try SocketAddress.makeAddressResolvingHost(target.host, port: target.port)
        }
    }

    static func isAddress(_ host: String) -> Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }
}

/// Discards what a collector sends (it should send nothing) and closes the
/// connection on an error, so the forwarder reconnects.
final class CollectorConnectionHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny
    let logger: Logger

    init(logger: Logger) { self.logger = logger }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("audit: syslog connection error", metadata: ["hallpass.error": "\(error)"])
        context.close(promise: nil)
    }
}
