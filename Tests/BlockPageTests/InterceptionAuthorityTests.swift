@testable import BlockPage
import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import Testing
import X509

/// The interception CA: made for the inspected names, constrained to them,
/// kept while it covers them, made again when it does not; its leaves verify
/// for those names only; it travels to the proxy as its key and certificate.
@Suite struct InterceptionAuthorityTests {
    let folder = NSTemporaryDirectory() + "hallpass-intercept-ca-" + UUID().uuidString
    let names = ["www.google.com", "youtube.com"]

    func verifies(_ leaf: Certificate, by authority: InterceptionAuthority) async -> Bool {
        var verifier = Verifier(rootCertificates: CertificateStore([authority.certificate])) { RFC5280Policy() }
        if case .validCertificate = await verifier.validate(leaf: leaf, intermediates: CertificateStore()) { return true }
        return false
    }

    func leaf(_ name: String, from authority: InterceptionAuthority) throws -> Certificate {
        try authority.issue(for: name, leafKey: P256.Signing.PrivateKey().publicKey, now: Date(), lifetime: 86_400, backdating: 3600)
    }

    @Test func itIsConstrainedToTheInspectedNamesAndEveryAddressIsExcluded() async throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let authority = try InterceptionAuthority.create(folder: folder, names: names, organization: "Lakeside")
        let constraints = try #require(try authority.certificate.extensions.nameConstraints)
        #expect(Array(constraints.permittedDNSDomains) == names)
        #expect(constraints.excludedIPRanges.count == 2)
        #expect(try authority.certificate.extensions[oid: .X509ExtensionID.nameConstraints]?.critical == true)
        #expect(try authority.certificate.extensions.basicConstraints == .isCertificateAuthority(maxPathLength: 0))
        // A name and the names below it verify; another name does not, though the CA signed it.
        #expect(await verifies(try leaf("www.youtube.com", from: authority), by: authority))
        #expect(await verifies(try leaf("www.google.com", from: authority), by: authority))
        #expect(!(await verifies(try leaf("bank.example", from: authority), by: authority)))
        #expect(!(await verifies(try leaf("google.com", from: authority), by: authority)))
        // The leaf is for exactly its name.
        let youtube = try leaf("www.youtube.com", from: authority)
        #expect(try youtube.extensions.subjectAlternativeNames == SubjectAlternativeNames([.dnsName("www.youtube.com")]))
        #expect(try youtube.extensions.basicConstraints == .notCertificateAuthority)
    }

    @Test func itsKeyIsRootsAloneAndItIsKeptWhileItCoversTheNames() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let (made, first) = try InterceptionAuthority.prepare(folder: folder, names: names, organization: "Lakeside")
        #expect(first == .made)
        let mode = try FileManager.default.attributesOfItem(atPath: folder + "/ca-key.pem")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try FileManager.default.attributesOfItem(atPath: folder)[.posixPermissions] as? Int == 0o700)
        // Fewer names, or names below these: the same CA.
        let (kept, second) = try InterceptionAuthority.prepare(folder: folder, names: ["m.youtube.com"], organization: "Lakeside")
        #expect(second == .kept && kept.certificate == made.certificate)
        // A name it does not cover: a new one, for the new names.
        let (replaced, third) = try InterceptionAuthority.prepare(folder: folder, names: names + ["bing.com"], organization: "Lakeside")
        guard case .replaced(let why) = third else {
            Issue.record("expected a new CA, got \(third)")
            return
        }
        #expect(why.contains("do not cover"), "\(why)")
        #expect(replaced.certificate != made.certificate && replaced.covers(["www.bing.com"]))
        #expect(try InterceptionAuthority.read(folder: folder)?.certificate == replaced.certificate)
    }

    @Test func aKeyOthersCouldReadIsNeverUsedAgain() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let (made, _) = try InterceptionAuthority.prepare(folder: folder, names: names, organization: "Lakeside")
        // The folder opened and the key made readable by others, as a careless copy or restore would leave them.
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: folder)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: folder + "/ca-key.pem")
        #expect(throws: BlockPageError.self) { try InterceptionAuthority.read(folder: folder) }
        let (replaced, outcome) = try InterceptionAuthority.prepare(folder: folder, names: names, organization: "Lakeside")
        guard case .replaced(let why) = outcome else {
            Issue.record("expected a new CA, got \(outcome)")
            return
        }
        #expect(why.contains("mode 644") && why.contains("may have been copied"), "\(why)")
        #expect(replaced.certificate != made.certificate)
        #expect(try FileManager.default.attributesOfItem(atPath: folder + "/ca-key.pem")[.posixPermissions] as? Int == 0o600)
        #expect(try FileManager.default.attributesOfItem(atPath: folder)[.posixPermissions] as? Int == 0o700)
    }

    @Test func oneNearItsEndIsMadeAgain() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let long = Date().addingTimeInterval(-InterceptionAuthority.lifetime + 10 * 86_400)
        _ = try InterceptionAuthority.create(folder: folder, names: names, organization: "Lakeside", now: long)
        let (_, outcome) = try InterceptionAuthority.prepare(folder: folder, names: names, organization: "Lakeside")
        guard case .replaced = outcome else {
            Issue.record("expected a new CA, got \(outcome)")
            return
        }
    }

    @Test func noNamesMakeNoCA() {
        #expect(throws: BlockPageError.self) { try InterceptionAuthority.create(folder: folder, names: [], organization: "Lakeside") }
        #expect(!FileManager.default.fileExists(atPath: folder))
    }

    @Test func theHandOverIsTheKeyAndTheCertificate() throws {
        let authority = try InterceptionAuthority.make(names: names, organization: "Lakeside", now: Date())
        let (key, certificate) = authority.handover
        #expect(key.count == 32)
        let received = try InterceptionAuthority(key: key, certificate: certificate)
        #expect(received.certificate == authority.certificate && received.fingerprint == authority.fingerprint)
        // Another key with this certificate is refused.
        #expect(throws: BlockPageError.self) { try InterceptionAuthority(key: Array(P256.Signing.PrivateKey().rawRepresentation), certificate: certificate) }
    }

    @Test func itsKeyHashIsTheOneNIOSSLComputesFromATrustStore() throws {
        let authority = try InterceptionAuthority.make(names: names, organization: "Lakeside", now: Date())
        let spki = try NIOSSLCertificate(bytes: authority.certificateDER, format: .der).extractPublicKey().toSPKIBytes()
        #expect(authority.keyHash == Array(SHA256.hash(data: spki)))
        #expect(InterceptionAuthority.keyHash(ofPEM: authority.pem) == authority.keyHash)
        #expect(InterceptionAuthority.keyHash(ofPEM: "not a certificate") == nil)
    }
}

/// The block page says when a site is inspected, and why.
@Suite struct InspectionNoticeTests {
    @Test func aPageOfAnInspectedSiteSaysItIsInspected() throws {
        let renderer = try BlockPageRenderer(settings: BlockPageSettings(organization: "Lakeside"))
        var request = casinoRequest
        #expect(!renderer.blockPage(for: request, acceptLanguage: "en").text.contains("inspection-notice"))
        request.inspected = true
        let page = renderer.blockPage(for: request, acceptLanguage: "en").text
        #expect(page.elementText(id: "inspection-notice")?.contains("one of the few the school inspects") == true, "\(page)")
        let korean = renderer.blockPage(for: request, acceptLanguage: "ko").text
        #expect(korean.elementText(id: "inspection-notice")?.contains("검사") == true)
    }
}
