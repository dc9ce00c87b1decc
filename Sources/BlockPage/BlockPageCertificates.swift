import Crypto
public import Foundation
import NIOSSL
import SwiftASN1
import Synchronization
import X509

/// Where the block page's certificates take the time from. The server uses
/// the machine's clock (`WallClock`); tests pass a clock they move by hand.
public protocol CertificateClock: Sendable {
    /// The current time (wall-clock time: certificates carry calendar dates).
    var now: Date { get }
}

/// The machine's clock.
public struct WallClock: CertificateClock {
    public init() {}
    public var now: Date { Date() }
}

/// How long the block page's certificates are valid, when one is made again,
/// and how many are kept.
///
/// The rule: a name's certificate is valid for `lifetime` (30 days) from the
/// moment it is made, and is used until it is `renewalAge` old (20 days);
/// the first handshake for that name after that gets a new one. A browser
/// is therefore never shown a certificate with less than 10 days left, and
/// an hour-long uptime and a year-long one serve the same kind of
/// certificate. Ten days of slack is far more than a handshake needs; it is
/// there for the machine's clock being corrected forward (a certificate
/// made before the correction is still valid afterwards for up to ten
/// days) and follows the usual practice of renewing with a third of the
/// life left (certbot renews 90-day certificates at 30 days left). A clock
/// corrected backward, before the moment a certificate was made, also
/// makes a new one: its start date could otherwise lie in the future.
public struct LeafCertificatePolicy: Sendable, Hashable {
    /// From the moment a certificate is made to its end (`notValidAfter`).
    public var lifetime: TimeInterval
    /// How long before the moment it is made a certificate starts
    /// (`notValidBefore`), for clocks of other programs a little behind.
    public var backdating: TimeInterval
    /// A certificate this old (since it was made) is replaced at its next use.
    /// Must be less than `lifetime`.
    public var renewalAge: TimeInterval
    /// The most names whose certificates are kept; when a new name would
    /// exceed it, the name used longest ago is dropped (and gets a new
    /// certificate if it comes back).
    public var capacity: Int
    /// How often, at most, the serving path looks at the CA folder for a
    /// new CA (two file stats; the files are read only when they changed).
    public var authorityCheckInterval: TimeInterval

    public init(
        lifetime: TimeInterval = 30 * 86_400,
        backdating: TimeInterval = 3600,
        renewalAge: TimeInterval = 20 * 86_400,
        capacity: Int = 1024,
        authorityCheckInterval: TimeInterval = 60
    ) {
        precondition(renewalAge > 0 && renewalAge < lifetime, "renewalAge must lie within the lifetime")
        self.lifetime = lifetime
        self.backdating = backdating
        self.renewalAge = renewalAge
        self.capacity = max(1, capacity)
        self.authorityCheckInterval = authorityCheckInterval
    }

    /// Whether a certificate made at `issuedAt` may still be handed out at `now`.
    func isFresh(issuedAt: Date, now: Date) -> Bool {
        issuedAt <= now && now.timeIntervalSince(issuedAt) < renewalAge
    }
}

/// What the certificate cache reports (it does not log; filter-control does).
public enum BlockPageCertificateEvent: Sendable, Equatable {
    /// A new CA is in use from now on (its SHA-256 fingerprint); every name
    /// gets a certificate from it at its next handshake.
    case authorityReplaced(fingerprint: String)
    /// The CA folder changed but holds no usable CA (missing, unreadable,
    /// key and certificate do not match): the CA in use stays.
    case authorityUnusable(BlockPageError)
}

/// End certificates for the names browsers ask the block page for (SNI),
/// made from the school's local CA on first use and made again, on the path
/// that picks a handshake's certificate, when they grow old (see
/// `LeafCertificatePolicy`) or when the CA changes. No timer: a name nobody
/// asks for costs nothing. At most `policy.capacity` names are kept, least
/// recently used dropped first.
///
/// The CA changes when filter-control hands over another one (`use(_:)`, on
/// `filterctl reload`) or when the serving path finds the CA folder's files
/// replaced (at most every `policy.authorityCheckInterval`). A certificate
/// made from an earlier CA is never handed out again.
///
/// One key for all the end certificates: it never leaves filter-control's memory.
final class BlockPageCertificates: Sendable {
    /// One name's certificate and the chain the handshake sends.
    struct Issued: Sendable {
        let leaf: Certificate
        let chain: [NIOSSLCertificate]
        /// The moment it was made (by the clock): `notValidBefore` + backdating.
        let issuedAt: Date
        /// When it was last handed out, as a tick of the cache's use counter.
        var lastUse: UInt64
    }

    private struct State {
        var authority: LocalCertificateAuthority
        /// The CA folder's files as last looked at, and when.
        var seenFiles: AuthorityFiles?
        var lastFolderCheck: Date
        var issued: [String: Issued] = [:]
        var uses: UInt64 = 0
    }

    let policy: LeafCertificatePolicy
    private let clock: any CertificateClock
    private let report: @Sendable (BlockPageCertificateEvent) -> Void
    private let key = P256.Signing.PrivateKey()
    private let privateKey: NIOSSLPrivateKey
    private let state: Mutex<State>

    init(
        authority: LocalCertificateAuthority, policy: LeafCertificatePolicy = LeafCertificatePolicy(),
        clock: any CertificateClock = WallClock(), report: @escaping @Sendable (BlockPageCertificateEvent) -> Void = { _ in }
    ) throws {
        self.policy = policy
        self.clock = clock
        self.report = report
        privateKey = try NIOSSLPrivateKey(bytes: Array(key.pemRepresentation.utf8), format: .pem)
        state = Mutex(State(authority: authority, seenFiles: authority.files, lastFolderCheck: clock.now))
    }

    /// The CA that certificates are issued from now.
    var authority: LocalCertificateAuthority { state.withLock { $0.authority } }
    /// How many names have a certificate kept.
    var count: Int { state.withLock { $0.issued.count } }

    /// The NIOSSL override for a handshake that asked for `host`.
    func override(for host: String) throws -> NIOSSLContextConfigurationOverride {
        var result = NIOSSLContextConfigurationOverride()
        result.certificateChain = try certificate(for: host).chain.map { .certificate($0) }
        result.privateKey = .privateKey(privateKey)
        return result
    }

    /// The certificate to hand out for `host` now: the kept one while it is
    /// fresh and from the CA in use, else a new one.
    func certificate(for host: String) throws -> Issued {
        let name = host.lowercased()
        let now = clock.now
        let (result, event) = state.withLock { state -> (Result<Issued, any Error>, BlockPageCertificateEvent?) in
            let event = lookAtFolder(&state, now: now)
            state.uses += 1
            if var kept = state.issued[name], policy.isFresh(issuedAt: kept.issuedAt, now: now) {
                kept.lastUse = state.uses
                state.issued[name] = kept
                return (.success(kept), event)
            }
            // Signing under the lock: one P-256 signature, and two handshakes
            // for a new name never make two certificates.
            let made: Issued
            do {
                made = try issue(name, from: state.authority, now: now, use: state.uses)
            } catch {
                return (.failure(error), event)
            }
            // Full: the name used longest ago goes (a scan, only when a new name comes to a full cache).
            if state.issued[name] == nil, state.issued.count >= policy.capacity,
                let oldest = state.issued.min(by: { $0.value.lastUse < $1.value.lastUse })?.key
            {
                state.issued[oldest] = nil
            }
            state.issued[name] = made
            return (.success(made), event)
        }
        if let event { report(event) }
        return try result.get()
    }

    /// Uses `authority` from now on, unless it is the CA in use already
    /// (filter-control reads the CA folder again on `filterctl reload`).
    /// Returns whether it changed.
    @discardableResult
    func use(_ authority: LocalCertificateAuthority) -> Bool {
        let now = clock.now
        let event = state.withLock { state in
            state.seenFiles = authority.files
            state.lastFolderCheck = now
            return replace(&state, with: authority)
        }
        if let event { report(event) }
        return event != nil
    }

    // MARK: Internals

    private func issue(_ name: String, from authority: LocalCertificateAuthority, now: Date, use: UInt64) throws -> Issued {
        let leaf = try authority.issue(for: name, key: key, now: now, policy: policy)
        let chain = [
            try NIOSSLCertificate(bytes: try Self.der(leaf), format: .der),
            try NIOSSLCertificate(bytes: try Self.der(authority.certificate), format: .der),
        ]
        return Issued(leaf: leaf, chain: chain, issuedAt: now, lastUse: use)
    }

    private static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }

    /// Reads the CA folder again when its files are not the ones last seen
    /// (looking at most every `authorityCheckInterval`).
    /// Returns what to report once the lock is released.
    private func lookAtFolder(_ state: inout State, now: Date) -> BlockPageCertificateEvent? {
        let elapsed = now.timeIntervalSince(state.lastFolderCheck)
        // A clock set back counts as due: the interval is no reason to stop looking.
        guard elapsed >= policy.authorityCheckInterval || elapsed < 0 else { return nil }
        state.lastFolderCheck = now
        let folder = state.authority.folder
        let files = AuthorityFiles(folder: folder)
        guard files != state.seenFiles else { return nil }
        // Whatever comes of it, these files have been looked at: a CA half
        // written (new key, old certificate) is read again once its second file lands.
        state.seenFiles = files
        do {
            return replace(&state, with: try LocalCertificateAuthority(folder: folder))
        } catch {
            return .authorityUnusable(error)
        }
    }

    /// Makes `authority` the CA in use; the event to report when it is another CA.
    private func replace(_ state: inout State, with authority: LocalCertificateAuthority) -> BlockPageCertificateEvent? {
        let changed = authority.certificate != state.authority.certificate
        // The same CA perhaps from another folder: from now on that folder is the one watched.
        state.authority = authority
        guard changed else { return nil }
        // Every kept certificate is from the old CA: none is handed out again.
        state.issued.removeAll()
        return .authorityReplaced(fingerprint: authority.fingerprint)
    }
}
