import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import SchoolServer
import X509

/// A small HTTPS client for the API tests: one request per connection, and
/// the server accepted when, and only when, its certificate's key has the
/// pinned fingerprint (as a machine checks it, no CA).
struct PinnedHTTPSClient: Sendable {
    let port: Int
    let fingerprint: String

    struct Answer: Sendable {
        let status: Int
        let body: [UInt8]
        var headers: [(String, String)] = []
        var text: String { String(decoding: body, as: UTF8.self) }
        /// The first value of the response header `name` (case-insensitive).
        func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    }

    func request(_ method: HTTPMethod, _ path: String, headers: [(String, String)] = [], body: [UInt8] = []) async throws -> Answer {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .noHostnameVerification
        let context = try NIOSSLContext(configuration: tls)
        let pin = fingerprint
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler = try NIOSSLClientHandler(context: context, serverHostname: nil) { certificates, promise in
                        guard let leaf = certificates.first, let der = try? leaf.toDERBytes(),
                            let certificate = try? Certificate(derEncoded: der),
                            ServerCertificate.fingerprint(of: certificate) == pin
                        else {
                            promise.succeed(.failed)
                            return
                        }
                        promise.succeed(.certificateVerified)
                    }
                    try channel.pipeline.syncOperations.addHandler(handler)
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
            head.headers.add(name: "Host", value: "127.0.0.1:\(port)")
            head.headers.add(name: "Content-Length", value: String(body.count))
            head.headers.add(name: "Connection", value: "close")
            if !body.isEmpty, !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                head.headers.add(name: "Content-Type", value: "application/json")
            }
            for (name, value) in headers { head.headers.add(name: name, value: value) }
            var parts: [HTTPClientRequestPart] = [.head(head)]
            if !body.isEmpty { parts.append(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
            parts.append(.end(nil))
            // One write: a server that answers (and, with `Connection: close`,
            // closes) as soon as it has the head must not fail a later write of
            // the end; and if it answered before reading a body, its answer
            // is still in `inbound`, which is what a test asks about.
            do {
                try await outbound.write(contentsOf: parts)
            } catch let error as ChannelError where error == .ioOnClosedChannel || error == .alreadyClosed {
            }
            var status = 0
            var responseHeaders: [(String, String)] = []
            var received: [UInt8] = []
            for try await part in inbound {
                switch part {
                case .head(let response):
                    status = Int(response.status.code)
                    responseHeaders = response.headers.map { ($0.name, $0.value) }
                case .body(let buffer): received += Array(buffer: buffer)
                case .end: return Answer(status: status, body: received, headers: responseHeaders)
                }
            }
            return Answer(status: status, body: received, headers: responseHeaders)
        }
    }
}
