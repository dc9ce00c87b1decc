// What terminating an inspected connection takes, made once for each CA
// filter-control hands over: the browser's side (a TLS server whose
// certificate for each name comes from the leaf cache) and the server's side
// (a TLS client that checks the server's certificate against the system's
// trust store, hallpass's own CAs left out).
import BlockPage
import Crypto
public import HallpassIPC
public import NIOSSL

public final class Interception: Sendable {
    public let leaves: LeafCertificates
    /// The browser's side: TLS 1.2 and 1.3, ALPN http/1.1 only (no HTTP/2, so no
    /// connection coalescing: every request on the connection is for its one name).
    public let serverContext: NIOSSLContext
    /// The server's side: full verification against `trustRoots`, the name checked by NIOSSL.
    public let upstreamContext: NIOSSLContext
    /// How many of the trust store's certificates were left out as hallpass's own.
    public let untrustedRootsLeftOut: Int

    /// `inspected` says whether some plan inspects a name: the leaves are made
    /// for those names alone, whatever name a handshake asks for.
    public init(
        handover: InterceptionHandover, trustRoots: [NIOSSLCertificate], leafPolicy: LeafPolicy = LeafPolicy(),
        inspected: @escaping @Sendable (String) -> Bool
    ) throws {
        let authority = try InterceptionAuthority(key: handover.key, certificate: handover.certificate)
        let leaves = try LeafCertificates(authority: authority, policy: leafPolicy)
        self.leaves = leaves
        serverContext = try Self.serverContext(leaves: leaves, inspected: inspected)
        // The CA handed over is never a trust root upstream, whatever the handover says.
        let untrusted = Set(handover.untrustedKeys + [Self.keyHash(of: try NIOSSLCertificate(bytes: handover.certificate, format: .der))].compactMap { $0 })
        let roots = trustRoots.filter { Self.keyHash(of: $0).map { !untrusted.contains($0) } ?? false }
        untrustedRootsLeftOut = trustRoots.count - roots.count
        upstreamContext = try Self.upstreamContext(roots: roots)
    }

    /// SHA-256 of a certificate's SubjectPublicKeyInfo (DER), as filter-control names hallpass's CAs.
    public static func keyHash(of certificate: NIOSSLCertificate) -> [UInt8]? {
        guard let spki = try? certificate.extractPublicKey().toSPKIBytes() else { return nil }
        return Array(SHA256.hash(data: spki))
    }

    /// A handshake whose name is not inspected, or lies outside the CA's constraints, gets no leaf.
    public struct LeafRefused: Error, CustomStringConvertible {
        public var name: String
        public var description: String { "no leaf for \(name.prefix(255)): no plan inspects it, or the interception CA does not cover it" }
    }

    static func serverContext(leaves: LeafCertificates, inspected: @escaping @Sendable (String) -> Bool) throws -> NIOSSLContext {
        // The configuration needs a certificate; every handshake gets its own below,
        // for the name it asked for, so this one is never sent.
        let initial = try leaves.override(for: "hallpass-proxy.invalid")
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: initial.certificateChain ?? [], privateKey: initial.privateKey!)
        configuration.minimumTLSVersion = .tlsv12
        configuration.maximumTLSVersion = .tlsv13
        configuration.applicationProtocols = ["http/1.1"]
        configuration.sslContextCallback = { values, promise in
            // The proxy decided to inspect this name from the same ClientHello; without one there is nothing to sign for.
            guard let name = values.serverHostname, !name.isEmpty else {
                promise.fail(NIOSSLExtraError.invalidSNIHostname)
                return
            }
            // BoringSSL read the name from the same bytes; should it ever read another one than
            // hallpass's parser did, the proxy still signs only for a name it inspects.
            guard inspected(name), leaves.authority.covers([name]) else {
                promise.fail(LeafRefused(name: name))
                return
            }
            do {
                promise.succeed(try leaves.override(for: name))
            } catch {
                promise.fail(error)
            }
        }
        return try NIOSSLContext(configuration: configuration)
    }

    static func upstreamContext(roots: [NIOSSLCertificate]) throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        configuration.certificateVerification = .fullVerification
        // Only these: never the default paths, which could hold hallpass's own CAs.
        configuration.trustRoots = .certificates(roots)
        configuration.applicationProtocols = ["http/1.1"]
        return try NIOSSLContext(configuration: configuration)
    }

    /// The certificates of a PEM bundle (`/etc/ssl/certs/ca-certificates.crt`); empty when it cannot be read.
    public static func readTrustRoots(file: String) -> [NIOSSLCertificate] {
        (try? NIOSSLCertificate.fromPEMFile(file)) ?? []
    }
}
