// The check of a server's certificate before a splice (docs/inspection.md,
// "Splicing and the server's certificate"): the names read from the
// certificate, what the proxy does with them for a plan, and the bounded
// keeping of what servers showed.
import Crypto
import Foundation
import InspectionProxy
import NIOCore
import NIOEmbedded
import NIOSSL
import Synchronization
import Testing
import VerdictCore
import X509

@Suite struct CertificateChecksTests {
    /// A self-signed certificate with these subject alternative names.
    static func certificate(_ names: [GeneralName]) throws -> NIOSSLCertificate {
        let key = P256.Signing.PrivateKey()
        let subject = try DistinguishedName { CommonName("front.test") }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: Date(), notValidAfter: Date().addingTimeInterval(3600), issuer: subject, subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions { SubjectAlternativeNames(names) }, issuerPrivateKey: .init(key))
        return try NIOSSLCertificate(bytes: Array(try certificate.serializeAsPEM().pemString.utf8), format: .pem)
    }

    @Test func theCertificatesDNSNamesAreRead() throws {
        let shown = try Self.certificate([.dnsName("watch.front.test"), .rfc822Name("someone@front.test"), .dnsName("*.front.test")])
        #expect(CertificateChecks.names(of: shown) == .names(["watch.front.test", "*.front.test"]))
        #expect(CertificateChecks.names(of: try Self.certificate([])) == .names([]))
        let many = (0...CertificateChecks.maximumNames).map { GeneralName.dnsName("n\($0).front.test") }
        #expect(CertificateChecks.names(of: try Self.certificate(many)) == .unavailable, "more names than are kept: not checked")
    }

    static let plan = InspectionPlan(policy: InspectionPolicy(hosts: [try! RulePattern("youtube.com"), try! RulePattern("=watch.front.test")]))

    @Test func aSpliceToACertificateThatCoversAnInspectedNameIsRefused() {
        let covering = ProxyDecisions.afterCertificateCheck(.names(["*.google.com", "*.youtube.com"]), splicing: .notInspected, plan: Self.plan)
        let expected = Reason(source: .inspectBlock, category: ProxyDecisions.certificateCoversCategory, rule: InspectionPlan.certificateCheckLabel + ".youtube.com")
        #expect(covering == .refuse(.certificateCoversInspected, expected))
        // Whatever the connection showed: a never-inspect name, or none.
        let bank = SpliceReason.neverInspect(entry: "bank.example", group: "banking")
        #expect(ProxyDecisions.afterCertificateCheck(.names(["watch.front.test"]), splicing: bank, plan: Self.plan) != .splice)
        #expect(ProxyDecisions.afterCertificateCheck(.names(["*.front.test"]), splicing: .notAName, plan: Self.plan) != .splice)
        // A certificate that covers nothing the plan inspects: spliced.
        #expect(ProxyDecisions.afterCertificateCheck(.names(["cdn.front.test", "front.test", "*.cdn.front.test"]), splicing: .notInspected, plan: Self.plan) == .splice)
        #expect(ProxyDecisions.afterCertificateCheck(.names(["www.bank.example"]), splicing: bank, plan: Self.plan) == .splice)
        // The same certificate for a plan that inspects nothing.
        #expect(ProxyDecisions.afterCertificateCheck(.names(["*.youtube.com"]), splicing: .notInspected, plan: InspectionPlan(policy: InspectionPolicy())) == .splice)
    }

    @Test func noCertificateRefusesExceptForANeverInspectName() {
        let unchecked = Reason(source: .inspectBlock, category: ProxyDecisions.certificateUncheckedCategory)
        #expect(ProxyDecisions.afterCertificateCheck(.unavailable, splicing: .notInspected, plan: Self.plan) == .refuse(.certificateUnchecked, unchecked))
        #expect(ProxyDecisions.afterCertificateCheck(.unavailable, splicing: .notAName, plan: Self.plan) == .refuse(.certificateUnchecked, unchecked))
        let bank = SpliceReason.neverInspect(entry: "bank.example", group: "banking")
        #expect(ProxyDecisions.afterCertificateCheck(.unavailable, splicing: bank, plan: Self.plan) == .splice)
        // A person whose plan inspects nothing is never refused for a check, nor waits for one.
        let none = InspectionPlan(policy: InspectionPolicy())
        #expect(ProxyDecisions.afterCertificateCheck(.unavailable, splicing: .notInspected, plan: none) == .splice)
        #expect(!ProxyDecisions.needsCertificateCheck(none) && ProxyDecisions.needsCertificateCheck(Self.plan))
    }

    @Test func theCheckSendsTheConnectionsNameWhenItIsAHostName() {
        #expect(ProxyDecisions.checkName("WWW.Example.COM.") == "www.example.com")
        #expect(ProxyDecisions.checkName(nil) == nil && ProxyDecisions.checkName("192.0.2.1") == nil)
        #expect(ProxyDecisions.checkName("bad name") == nil && ProxyDecisions.checkName("") == nil)
    }

    /// A clock the test moves.
    final class Deadlines: Sendable {
        let now = Mutex(NIODeadline.uptimeNanoseconds(1_000_000_000))
        func advance(_ amount: TimeAmount) { now.withLock { $0 = $0 + amount } }
        var clock: @Sendable () -> NIODeadline { { [self] in now.withLock { $0 } } }
    }

    @Test func aCheckIsMadeOncePerPairAndKeptForItsTime() throws {
        let loop = EmbeddedEventLoop()
        let deadlines = Deadlines()
        let checks = CertificateChecks(lifetime: .minutes(10), failureLifetime: .seconds(30), capacity: 8, clock: deadlines.clock)
        let key = CertificateChecks.Key(destination: try SocketAddress(ipAddress: "192.0.2.7", port: 443), serverName: "cdn.front.test")
        var made = 0
        let pending = loop.makePromise(of: ServerCertificate.self)
        let first = checks.certificate(for: key, on: loop) {
            made += 1
            return pending.futureResult
        }
        // A second connection while the check is under way waits for it.
        let second = checks.certificate(for: key, on: loop) {
            made += 1
            return loop.makeSucceededFuture(.unavailable)
        }
        #expect(made == 1)
        pending.succeed(.names(["cdn.front.test"]))
        #expect(try first.wait() == .names(["cdn.front.test"]) && second.wait() == .names(["cdn.front.test"]))
        // Kept: the next connection makes no check, until the names are ten minutes old.
        func again(_ answer: ServerCertificate) throws -> ServerCertificate {
            try checks.certificate(for: key, on: loop) {
                made += 1
                return loop.makeSucceededFuture(answer)
            }.wait()
        }
        deadlines.advance(.minutes(9))
        #expect(try again(.unavailable) == .names(["cdn.front.test"]) && made == 1)
        deadlines.advance(.minutes(2))
        #expect(try again(.unavailable) == .unavailable && made == 2)
        // A failed check is kept a short time only.
        deadlines.advance(.seconds(20))
        #expect(try again(.names([])) == .unavailable && made == 2)
        deadlines.advance(.seconds(20))
        #expect(try again(.names([])) == .names([]) && made == 3)
        // Another server name at the same address is a pair of its own.
        let other = CertificateChecks.Key(destination: key.destination, serverName: nil)
        #expect(try checks.certificate(for: other, on: loop) { loop.makeSucceededFuture(.names(["default.test"])) }.wait() == .names(["default.test"]))
        #expect(checks.count == 2)
    }

    @Test func thePairsKeptAreBounded() throws {
        let loop = EmbeddedEventLoop()
        let deadlines = Deadlines()
        let checks = CertificateChecks(lifetime: .minutes(10), failureLifetime: .seconds(30), capacity: 2, clock: deadlines.clock)
        func key(_ name: String) throws -> CertificateChecks.Key {
            CertificateChecks.Key(destination: try SocketAddress(ipAddress: "192.0.2.7", port: 443), serverName: name)
        }
        var made = 0
        func check(_ name: String, _ answer: ServerCertificate = .names(["x.test"])) throws {
            _ = try checks.certificate(for: try key(name), on: loop) {
                made += 1
                return loop.makeSucceededFuture(answer)
            }.wait()
        }
        try check("a.test")
        try check("b.test", .unavailable)  // expires first
        try check("c.test")
        #expect(checks.count == 2 && made == 3)
        try check("a.test")
        #expect(made == 3, "a.test was kept")
        try check("b.test")
        #expect(made == 4, "b.test, the one that was to expire first, made room for c.test")
        #expect(checks.count == 2)
    }
}
