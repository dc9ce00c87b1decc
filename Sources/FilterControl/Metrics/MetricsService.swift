import Foundation
public import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
public import ServiceLifecycle

/// The Prometheus endpoint (`metrics: { address, port }`): GET /metrics
/// answers with the text exposition format; anything else is 404. Each
/// scrape first brings the mirrored counters up to date.
public struct MetricsService: Service {
    let server: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>
    let refresh: @Sendable () async -> [UInt8]
    let logger: Logger

    public init(address: String, port: Int, logger: Logger, refresh: @escaping @Sendable () async -> [UInt8]) async throws {
        self.refresh = refresh
        self.logger = logger
        server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: address, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: channel)
                }
            }
        logger.info("metrics on http://\(address):\(port)/metrics")
    }

    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await server.executeThenClose { connections in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in connections {
                        group.addTask { try? await serve(connection) }
                    }
                }
            }
        } onGracefulShutdown: {
            server.channel.close(promise: nil)
        }
    }

    private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async throws {
        try await connection.executeThenClose { inbound, outbound in
            for try await part in inbound {
                guard case .head(let head) = part else { continue }
                let found = head.method == .GET && (head.uri == "/metrics" || head.uri.hasPrefix("/metrics?"))
                let body = found ? await refresh() : Array("not found; try /metrics\n".utf8)
                var headers = HTTPHeaders()
                headers.add(name: "Content-Type", value: found ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8")
                headers.add(name: "Content-Length", value: String(body.count))
                headers.add(name: "Connection", value: "close")
                try await outbound.write(.head(HTTPResponseHead(version: head.version, status: found ? .ok : .notFound, headers: headers)))
                try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body))))
                try await outbound.write(.end(nil))
                return
            }
        }
    }
}
