import FilterControl
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// A stand-in for the school's server in unit tests: HTTPS on 127.0.0.1
/// with a self-signed P-256 certificate made by openssl (as
/// `hallpass-server init` makes one), whose fingerprint is computed by
/// openssl too, so the machine's own SPKI code is checked against another's.
/// Each request is recorded; `answer` decides the reply. Not the real
/// server (Sources/SchoolServer): that one is tested against the machine
/// in the integration tests.
final class SchoolServerStandIn: Sendable {
    struct Request: Sendable {
        var method: String
        var uri: String
        var headers: [String: String]
        var body: [UInt8]
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }
    }

    typealias Answer = @Sendable (Request) -> (status: Int, body: String)

    let folder: String
    let port: Int
    /// The fingerprint of the certificate served: lower-case hex SHA-256 of its SubjectPublicKeyInfo.
    let fingerprint: String
    private let channel: any Channel
    private let shared: Shared

    /// What the connections' handlers and the test share.
    private final class Shared: Sendable {
        let received = Mutex<[Request]>([])
        let answer: Mutex<Answer>
        init(_ answer: @escaping Answer) { self.answer = Mutex(answer) }
    }

    var requests: [Request] { shared.received.withLock { $0 } }
    var url: String { "https://127.0.0.1:\(port)/" }

    init(answer: @escaping Answer) async throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-school-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let made = try runShell(
            """
            set -e
            cd \(folder)
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=school-server \
              -keyout key.pem -out cert.pem 2>/dev/null
            openssl x509 -in cert.pem -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex | sed 's/.*= //' > fingerprint
            """, in: folder)
        guard made.status == 0 else { throw RuleServerError("openssl: \(made.output)") }
        fingerprint = try String(contentsOfFile: folder + "/fingerprint", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let context = try NIOSSLContext(
            configuration: .makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(folder + "/cert.pem").map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: folder + "/key.pem", format: .pem))))
        let shared = Shared(answer)
        self.shared = shared
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    try child.pipeline.syncOperations.addHandler(
                        Handler(
                            respond: { request in
                                shared.received.withLock { $0.append(request) }
                                return shared.answer.withLock { $0 }(request)
                            }))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress!.port!
    }

    func setAnswer(_ new: @escaping Answer) { shared.answer.withLock { $0 = new } }

    func stop() async {
        try? await channel.close()
        try? FileManager.default.removeItem(atPath: folder)
    }

    private final class Handler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let respond: @Sendable (Request) -> (status: Int, body: String)
        var request: Request?

        init(respond: @escaping @Sendable (Request) -> (status: Int, body: String)) { self.respond = respond }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                var headers: [String: String] = [:]
                for (name, value) in head.headers { headers[name.lowercased()] = value }
                request = Request(method: "\(head.method)", uri: head.uri, headers: headers, body: [])
            case .body(var buffer):
                request?.body += buffer.readBytes(length: buffer.readableBytes) ?? []
            case .end:
                guard let request else { return }
                let (status, text) = respond(request)
                var head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status))
                head.headers.add(name: "Content-Type", value: "application/json")
                head.headers.add(name: "Content-Length", value: String(text.utf8.count))
                head.headers.add(name: "Connection", value: "close")
                context.write(wrapOutboundOut(.head(head)), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
            }
        }
    }
}
