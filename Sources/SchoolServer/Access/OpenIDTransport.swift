import AsyncHTTPClient
public import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// One answer of the provider: its status and at most `limit` bytes of body.
public struct OpenIDResponse: Sendable, Hashable {
    public var status: Int
    public var body: [UInt8]

    public init(status: Int, body: [UInt8]) {
        self.status = status
        self.body = body
    }
}

/// How the client reaches the provider: HTTPS with AsyncHTTPClient
/// (`HTTPClientOpenIDTransport`), or in unit tests answers of the test's own.
/// Each call reads at most `limit` bytes of body and gives up after the
/// transport's time limit.
public protocol OpenIDTransport: Sendable {
    func get(_ url: URL, limit: Int) async throws -> OpenIDResponse
    /// A form POST (`application/x-www-form-urlencoded`) with extra headers.
    func post(_ url: URL, form: String, headers: [(String, String)], limit: Int) async throws -> OpenIDResponse
    func shutdown() async throws
}

/// `OpenIDTransport` on AsyncHTTPClient: HTTPS only, no redirects followed
/// (an endpoint that moves is a configuration to look at, not to follow
/// silently), the system's CAs or the school's `caFile`, and every request
/// bounded in time (connect, each read, and the whole exchange with its body).
public final class HTTPClientOpenIDTransport: OpenIDTransport {
    let client: HTTPClient
    let timeout: Duration

    /// `caFile`: PEM certificates trusted instead of the system's.
    public init(caFile: String?, timeout: Duration = .seconds(10)) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile {
            let certificates: [NIOSSLCertificate]
            do {
                certificates = try NIOSSLCertificate.fromPEMFile(caFile)
            } catch {
                throw ServerError(code: "oidc.ca-file", message: "signIn.oidc.caFile \(caFile): cannot read PEM certificates (\(error))")
            }
            guard !certificates.isEmpty else {
                throw ServerError(code: "oidc.ca-file", message: "signIn.oidc.caFile \(caFile) holds no PEM certificate")
            }
            tls.trustRoots = .certificates(certificates)
        }
        let seconds = Int64(timeout.components.seconds)
        let configuration = HTTPClient.Configuration(
            tlsConfiguration: tls, redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(min(5, seconds)), read: .seconds(seconds)))
        client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        self.timeout = timeout
    }

    public func get(_ url: URL, limit: Int) async throws -> OpenIDResponse {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .GET
        request.headers.add(name: "Accept", value: "application/json")
        return try await send(request, url: url, limit: limit)
    }

    public func post(_ url: URL, form: String, headers: [(String, String)], limit: Int) async throws -> OpenIDResponse {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(string: form))
        return try await send(request, url: url, limit: limit)
    }

    /// The whole exchange races a timer: AsyncHTTPClient's deadline ends when
    /// the head arrives, and a body sent a byte at a time would outlast its read timeout.
    private func send(_ request: HTTPClientRequest, url: URL, limit: Int) async throws -> OpenIDResponse {
        guard url.scheme == "https" else {
            throw ServerError(code: "oidc.http", message: "the provider's endpoint \(Self.endpoint(url)) is not https")
        }
        let client = self.client
        let timeout = self.timeout
        do {
            return try await withThrowingTaskGroup(of: OpenIDResponse?.self) { group in
                group.addTask {
                    let response = try await client.execute(request, timeout: .seconds(Int64(timeout.components.seconds)))
                    let body = try await response.body.collect(upTo: limit)
                    return OpenIDResponse(status: Int(response.status.code), body: Array(buffer: body))
                }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let response = first else {
                    throw ServerError(code: "oidc.http", message: "\(Self.endpoint(url)) did not answer within \(timeout)")
                }
                return response
            }
        } catch let error as ServerError {
            throw error
        } catch is NIOTooManyBytesError {
            throw ServerError(code: "oidc.http", message: "\(Self.endpoint(url)) answered with more than \(limit) bytes")
        } catch {
            throw ServerError(code: "oidc.http", message: "cannot reach \(Self.endpoint(url)): \(error)")
        }
    }

    /// The URL without its query: a message names the endpoint, never what was sent to it.
    static func endpoint(_ url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return "the provider" }
        components.query = nil
        components.fragment = nil
        return components.string ?? "the provider"
    }

    public func shutdown() async throws {
        try await client.shutdown()
    }
}
