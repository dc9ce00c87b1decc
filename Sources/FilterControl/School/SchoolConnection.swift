public import Foundation
public import NIOCore
import NIOHTTP1
public import NIOPosix

/// How the machine posts to the school's server: one JSON body in, the
/// status and the JSON body out. `SchoolConnection` is the real one; the
/// reporter's tests use a fake.
public protocol SchoolTransport: Sendable {
    /// POSTs `body` to `endpoint` (`/api/v1/...`), signed when the transport has a signer.
    func post(_ endpoint: String, body: [UInt8]) async throws(SchoolError) -> (status: Int, body: [UInt8])
}

/// HTTPS to the school's server with its key pinned (`HTTPSClient`'s
/// pinned-key trust: the certificate must have the fingerprint's
/// SubjectPublicKeyInfo, or the handshake ends before a byte of the request
/// is sent), requests signed by the machine's key once it is enrolled.
public struct SchoolConnection: SchoolTransport {
    public let server: SchoolServerURL
    public let fingerprint: ServerFingerprint
    let signer: RequestSigner?
    let clock: @Sendable () -> Date
    private let client: HTTPSClient
    /// The largest answer read from the server.
    let answerLimit: Int

    /// The largest answer read from the server, by default (the live channel reads up to 1 MiB).
    public static let defaultAnswerLimit = 64 << 10

    /// - Parameters:
    ///   - signer: nil for the enrolment (authenticated by its token alone).
    ///   - socketMark: filter-control's allow mark, so its own connection is never queued.
    public init(
        server: SchoolServerURL, fingerprint: ServerFingerprint, signer: RequestSigner?, connectTimeout: Duration = .seconds(10),
        requestTimeout: Duration = .seconds(30), socketMark: UInt32? = nil, answerLimit: Int = SchoolConnection.defaultAnswerLimit,
        clock: @escaping @Sendable () -> Date = { Date() }, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws(SchoolError) {
        self.server = server
        self.answerLimit = answerLimit
        self.fingerprint = fingerprint
        self.signer = signer
        self.clock = clock
        do {
            client = try HTTPSClient(
                trusting: .pinnedKey(fingerprint.bytes), connectTimeout: connectTimeout, requestTimeout: requestTimeout,
                socketMark: socketMark, group: group)
        } catch {
            throw .tls(server: server.description, reason: error.description)
        }
    }

    public func post(_ endpoint: String, body: [UInt8]) async throws(SchoolError) -> (status: Int, body: [UInt8]) {
        let path = server.path(endpoint)
        var headers: [(String, String)] = []
        if let signer {
            do {
                headers = try signer.headers(method: "POST", path: path, date: Int64(clock().timeIntervalSince1970.rounded(.down)), body: body)
            } catch {
                throw .identity(path: MachineIdentity.keyFileName, reason: "cannot sign with the machine's key (\(error))")
            }
        }
        do {
            let reply = try await client.send(
                host: server.host, port: server.port, method: .POST, path: path, headers: headers, body: body, limit: answerLimit)
            return (reply.status, reply.body)
        } catch {
            throw SchoolError.transport(error, expected: fingerprint)
        }
    }

    /// The contract's refusal body, `{"error": CODE, "message": TEXT}`, as an error.
    static func refusal(status: Int, body: [UInt8]) -> SchoolError {
        let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
        return .refused(status: status, code: object?["error"] as? String, message: object?["message"] as? String)
    }
}
