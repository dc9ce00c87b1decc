// The certificates the proxy shows browsers for inspected names: one leaf
// per name, for exactly that name, from the interception CA filter-control
// handed over; made on first use, kept in memory (bounded), made again when
// it grows old. One key for all of them, which never leaves the proxy.
public import BlockPage
import Crypto
public import Foundation
public import NIOSSL
import Synchronization
import X509

/// How long the leaves live and how many are kept.
public struct LeafPolicy: Sendable, Hashable {
    /// From the moment a leaf is made to its end: short, since a leaf is made
    /// again whenever it is needed and costs one signature.
    public var lifetime: TimeInterval = 2 * 86_400
    /// How long before the moment it is made a leaf starts (clocks of other programs a little behind).
    public var backdating: TimeInterval = 3600
    /// A leaf this old is replaced at its next use: a browser never sees one with less than a day left.
    public var renewalAge: TimeInterval = 86_400
    /// The most names whose leaves are kept; the one used longest ago goes first.
    public var capacity = 1024

    public init() {}

    func isFresh(issuedAt: Date, now: Date) -> Bool {
        issuedAt <= now && now.timeIntervalSince(issuedAt) < renewalAge
    }
}

/// The leaves of one interception CA (a new CA gets a new cache).
public final class LeafCertificates: Sendable {
    struct Issued: Sendable {
        let chain: [NIOSSLCertificate]
        let issuedAt: Date
        var lastUse: UInt64
    }

    private struct State {
        var issued: [String: Issued] = [:]
        var uses: UInt64 = 0
    }

    public let authority: InterceptionAuthority
    public let policy: LeafPolicy
    private let clock: @Sendable () -> Date
    private let key = P256.Signing.PrivateKey()
    private let privateKey: NIOSSLPrivateKey
    private let caCertificate: NIOSSLCertificate
    private let state = Mutex(State())

    public init(authority: InterceptionAuthority, policy: LeafPolicy = LeafPolicy(), clock: @escaping @Sendable () -> Date = { Date() }) throws {
        self.authority = authority
        self.policy = policy
        self.clock = clock
        privateKey = try NIOSSLPrivateKey(bytes: Array(key.pemRepresentation.utf8), format: .pem)
        caCertificate = try NIOSSLCertificate(bytes: authority.certificateDER, format: .der)
    }

    /// How many names have a leaf kept.
    public var count: Int { state.withLock { $0.issued.count } }

    /// The NIOSSL override for a handshake that named `host`: the leaf and the CA, and the leaves' key.
    public func override(for host: String) throws -> NIOSSLContextConfigurationOverride {
        var result = NIOSSLContextConfigurationOverride()
        result.certificateChain = try chain(for: host).map { .certificate($0) }
        result.privateKey = .privateKey(privateKey)
        return result
    }

    /// The chain for `host` now: the kept leaf while it is fresh, else a new one.
    public func chain(for host: String) throws -> [NIOSSLCertificate] {
        let name = host.lowercased()
        let now = clock()
        return try state.withLock { state throws -> [NIOSSLCertificate] in
            state.uses += 1
            if var kept = state.issued[name], policy.isFresh(issuedAt: kept.issuedAt, now: now) {
                kept.lastUse = state.uses
                state.issued[name] = kept
                return kept.chain
            }
            // Signing under the lock: one P-256 signature, and two handshakes for a new name never make two leaves.
            let leaf = try authority.issue(
                for: name, leafKey: key.publicKey, now: now, lifetime: policy.lifetime, backdating: policy.backdating)
            let chain = [try NIOSSLCertificate(bytes: try InterceptionAuthority.der(leaf), format: .der), caCertificate]
            if state.issued[name] == nil, state.issued.count >= policy.capacity,
                let oldest = state.issued.min(by: { $0.value.lastUse < $1.value.lastUse })?.key
            {
                state.issued[oldest] = nil
            }
            state.issued[name] = Issued(chain: chain, issuedAt: now, lastUse: state.uses)
            return chain
        }
    }
}
