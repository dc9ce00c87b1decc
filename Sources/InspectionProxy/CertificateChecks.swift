// Before it splices a connection, the proxy looks at the certificate the
// server shows for the connection's name: its own TLS handshake to the same
// address with the same server name, read up to the certificate and closed.
// A certificate that covers a name the person's plan inspects would let the
// browser (or a student's program) send that name's requests over the
// spliced connection, unread (HTTP/2 coalescing, domain fronting): such a
// splice is refused (docs/inspection.md, "Splicing and the server's
// certificate"). What a server showed is kept per (address, server name),
// bounded in time and count.
import Foundation
public import NIOCore
public import NIOSSL
import Synchronization
import X509

/// What a server showed the proxy's own handshake for an (address, server name).
public enum ServerCertificate: Sendable, Hashable {
    /// The DNS names of its leaf certificate's subject alternative names.
    case names([String])
    /// No certificate came: no connection, a refused handshake, no answer in
    /// time, a certificate hallpass cannot read, or one with more names than
    /// it keeps (`CertificateChecks.maximumNames`).
    case unavailable
}

/// The certificates servers showed, per (address, server name), and the
/// checks under way: a connection that needs a check already made or
/// being made waits for that one, never makes its own.
public final class CertificateChecks: Sendable {
    public struct Key: Hashable, Sendable {
        /// The address and port the client meant to reach.
        public var destination: SocketAddress
        /// The server name the check's handshake sends (nil: none).
        public var serverName: String?

        public init(destination: SocketAddress, serverName: String?) {
            self.destination = destination
            self.serverName = serverName
        }
    }

    /// How long a certificate's names are kept: a site changes its
    /// certificate rarely, and a browser opens many connections to it.
    public let lifetime: TimeAmount
    /// How long a failed check is kept: a server that did not answer is
    /// asked again soon, and meanwhile does not cost a handshake per connection.
    public let failureLifetime: TimeAmount
    /// The most (address, server name) pairs kept; one more replaces the one that expires first.
    public let capacity: Int
    /// The most names kept of one certificate (Google's carry about 140): a
    /// certificate with more is `unavailable`.
    public static let maximumNames = 2_000

    private struct Entry {
        var certificate: ServerCertificate
        var expires: NIODeadline
    }

    private struct Table {
        var entries: [Key: Entry] = [:]
        var waiting: [Key: [EventLoopPromise<ServerCertificate>]] = [:]
    }

    private let table = Mutex(Table())
    private let clock: @Sendable () -> NIODeadline

    public init(
        lifetime: TimeAmount = .minutes(10), failureLifetime: TimeAmount = .seconds(30), capacity: Int = 4_096,
        clock: @escaping @Sendable () -> NIODeadline = { .now() }
    ) {
        self.lifetime = lifetime
        self.failureLifetime = failureLifetime
        self.capacity = max(1, capacity)
        self.clock = clock
    }

    /// How many pairs are kept now (expired ones included until they are replaced).
    public var count: Int { table.withLock { $0.entries.count } }

    /// What the server at `key` shows: kept, or being checked, or checked
    /// now by `check` (called at most once per pair at a time). The future
    /// completes on `loop`.
    public func certificate(
        for key: Key, on loop: any EventLoop, check: () -> EventLoopFuture<ServerCertificate>
    ) -> EventLoopFuture<ServerCertificate> {
        enum Step {
            case known(ServerCertificate)
            case waiting
            case first
        }
        let now = clock()
        let promise = loop.makePromise(of: ServerCertificate.self)
        let step = table.withLock { table -> Step in
            if let entry = table.entries[key], entry.expires > now { return .known(entry.certificate) }
            if table.waiting[key] != nil {
                table.waiting[key]?.append(promise)
                return .waiting
            }
            table.waiting[key] = [promise]
            return .first
        }
        switch step {
        case .known(let certificate):
            promise.succeed(certificate)
        case .waiting:
            break
        case .first:
            check().whenComplete { [self] result in
                finish(key, with: (try? result.get()) ?? .unavailable)
            }
        }
        return promise.futureResult
    }

    /// Keeps a check's outcome and hands it to every connection that waited for it.
    private func finish(_ key: Key, with certificate: ServerCertificate) {
        let now = clock()
        let expires = now + (certificate == .unavailable ? failureLifetime : lifetime)
        let promises = table.withLock { table -> [EventLoopPromise<ServerCertificate>] in
            if table.entries[key] == nil, table.entries.count >= capacity {
                table.entries = table.entries.filter { $0.value.expires > now }
                if table.entries.count >= capacity, let soonest = table.entries.min(by: { $0.value.expires < $1.value.expires })?.key {
                    table.entries[soonest] = nil
                }
            }
            table.entries[key] = Entry(certificate: certificate, expires: expires)
            return table.waiting.removeValue(forKey: key) ?? []
        }
        for promise in promises { promise.succeed(certificate) }
    }

    /// The subject alternative DNS names of a certificate, as written in it;
    /// `unavailable` when it cannot be read or names more than `maximumNames`.
    public static func names(of certificate: NIOSSLCertificate) -> ServerCertificate {
        guard let der = try? certificate.toDERBytes(), let parsed = try? Certificate(derEncoded: der) else { return .unavailable }
        // A certificate whose extension cannot be read is not checked; one without it names nothing (browsers ignore the CN).
        let alternatives: SubjectAlternativeNames?
        do {
            alternatives = try parsed.extensions.subjectAlternativeNames
        } catch {
            return .unavailable
        }
        var names: [String] = []
        for name in alternatives ?? SubjectAlternativeNames() {
            guard case .dnsName(let dns) = name else { continue }
            names.append(dns)
            if names.count > maximumNames { return .unavailable }
        }
        return .names(names)
    }
}
