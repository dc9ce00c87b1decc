import AsyncHTTPClient
import Crypto
import Foundation
import HallpassSystem
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import VerdictCore

/// An alert as the webhook's POST (docs/server.md, "Alert delivery"): JSON with
/// every field (null when the alert has none) and a link to the alert in
/// the console, signed so that the receiver knows it came from this server
/// and when: `Hallpass-Timestamp: UNIX` and
/// `Hallpass-Signature: sha256=HEX(HMAC-SHA256(secret, TIMESTAMP + "." + BODY))`.
/// A receiver should refuse a timestamp far from its own clock (five
/// minutes, say), which stops a post being replayed later.
public enum AlertWebhook {
    /// The body: keys sorted, so the same alert is the same bytes.
    public static func body(_ message: AlertMessage, consoleURL: String) -> [UInt8] {
        func text(_ value: String?) -> String { value.map(json) ?? "null" }
        let fields: [(String, String)] = [
            ("action", json(message.action)), ("category", text(message.category)),
            ("console", json(consoleURL + "/console/alerts/" + ConsoleForm.encode(message.id))), ("group", text(message.group)),
            ("host", text(message.host)), ("id", json(message.id)), ("machine", text(message.machine)), ("room", text(message.room)),
            ("rule", json(message.rule)), ("searchTerm", text(message.searchTerm)), ("severity", json(message.severity.rawValue)),
            ("time", json(RecordTime.format(milliseconds: message.time))), ("url", text(message.url)), ("user", text(message.user)),
        ]
        return Array(("{" + fields.map { "\(json($0.0)):\($0.1)" }.joined(separator: ",") + "}").utf8)
    }

    /// `sha256=` and the lower-case hex HMAC-SHA256 of `TIMESTAMP.BODY` under `secret`.
    public static func signature(secret: [UInt8], timestamp: Int64, body: [UInt8]) -> String {
        let signed = Array("\(timestamp).".utf8) + body
        return "sha256=" + Hex.encode(HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: secret)))
    }

    /// The headers of one post at `timestamp` (Unix seconds).
    public static func headers(secret: [UInt8], timestamp: Int64, body: [UInt8]) -> [(String, String)] {
        [
            ("Content-Type", "application/json"), ("User-Agent", "hallpass-server"), ("Hallpass-Timestamp", String(timestamp)),
            ("Hallpass-Signature", signature(secret: secret, timestamp: timestamp, body: body)),
        ]
    }

    /// A JSON string: quotes, backslashes and every control character
    /// escaped; `<`, `>` and `&` too, so the body is safe to show in a page as it is.
    static func json(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case "<", ">", "&", "\u{2028}", "\u{2029}":
                result += String(format: "\\u%04x", scalar.value)
            default:
                if scalar.value < 0x20 || scalar.value == 0x7f {
                    result += String(format: "\\u%04x", scalar.value)
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }

    /// The secret's first line (at most 4 KiB, at least 16 bytes). Like the
    /// OpenID client's secret, the file may be the service group's (0640),
    /// never others': whoever reads it can sign alerts the receiver believes.
    public static func readSecret(_ path: String) throws(ServerError) -> [UInt8] {
        let mode: UInt32
        do {
            mode = UInt32(try FileSystem.status(path).permissions.rawValue)
        } catch {
            throw ServerError(code: "alerts.webhook.secret", message: "alerts.webhook.secretFile \(path): \(error)")
        }
        guard mode & 0o007 == 0 else {
            throw ServerError(
                code: "alerts.webhook.secret",
                message: "alerts.webhook.secretFile \(path) may be read by others (mode \(String(mode & 0o777, radix: 8))); chmod 0640 or 0600 it")
        }
        let bytes: [UInt8]
        do {
            bytes = try BoundedFile.read(path, limit: 4096, followingLinks: true)
        } catch {
            throw ServerError(code: "alerts.webhook.secret", message: "alerts.webhook.secretFile \(path): \(error)")
        }
        let line = String(decoding: bytes, as: UTF8.self).split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        guard line.utf8.count >= 16 else {
            throw ServerError(
                code: "alerts.webhook.secret",
                message: "alerts.webhook.secretFile \(path): write a key of at least 16 characters on its first line (e.g. openssl rand -hex 32)")
        }
        return Array(line.utf8)
    }
}

/// Where a webhook's posts go: AsyncHTTPClient in the server, a recorder in tests.
public protocol AlertWebhookTransport: Sendable {
    /// Posts `body`; the status, or throws when there was no answer.
    func post(url: String, body: [UInt8], headers: [(String, String)]) async throws -> Int
    func shutdown() async throws
}

/// `AlertWebhookTransport` on AsyncHTTPClient: the system's CAs, no
/// redirects followed, the whole exchange within `timeout` (10 s). The
/// client is made at the first post and shut down with the worker: one
/// made and never run (a server that stops before its services start)
/// would trip AsyncHTTPClient's check that every client is shut down.
public final class HTTPClientWebhookTransport: AlertWebhookTransport {
    private let made = Mutex<HTTPClient?>(nil)
    let timeout: Duration

    public init(timeout: Duration = .seconds(10)) {
        self.timeout = timeout
    }

    private var client: HTTPClient {
        made.withLock { made in
            if let made { return made }
            let seconds = Int64(timeout.components.seconds)
            let client = HTTPClient(
                eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
                configuration: HTTPClient.Configuration(
                    redirectConfiguration: .disallow, timeout: .init(connect: .seconds(min(5, seconds)), read: .seconds(seconds))))
            made = client
            return client
        }
    }

    public func post(url: String, body: [UInt8], headers: [(String, String)]) async throws -> Int {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let prepared = request
        let client = self.client
        let timeout = self.timeout
        // The whole exchange races a timer, as the OpenID client's does: the
        // client's own deadline ends once the head is in.
        return try await withThrowingTaskGroup(of: Int?.self) { group in
            group.addTask {
                let response = try await client.execute(prepared, timeout: .seconds(Int64(timeout.components.seconds)))
                // The answer's body is not read for anything: a little of it is taken so the connection can be reused.
                _ = try? await response.body.collect(upTo: 64 * 1024)
                return Int(response.status.code)
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let status = first else {
                throw ServerError(code: "alerts.webhook.timeout", message: "no answer within \(timeout.components.seconds) s")
            }
            return status
        }
    }

    public func shutdown() async throws {
        let client = made.withLock { made in
            defer { made = nil }
            return made
        }
        try await client?.shutdown()
    }
}
