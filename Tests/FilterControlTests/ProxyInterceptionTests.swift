import BlockPage
import Foundation
import HallpassIPC
import Logging
import Testing
import VerdictCore
@testable import FilterControl

/// What filter-control gives hallpass-proxy for inspection: the interception CA
/// for the policy's inspected names (made once, handed over when it changes), and
/// the command line with the trust store and the block page's settings.
@Suite struct ProxyInterceptionTests {
    let folder = NSTemporaryDirectory() + "hallpass-proxy-interception-" + UUID().uuidString
    let logger = Logger(label: "test")

    func configuration() -> Configuration {
        var configuration = Configuration()
        configuration.proxy.ca = folder + "/inspect-ca"
        configuration.blockPage.ca = folder + "/block-page-ca"
        return configuration
    }

    func school(_ yaml: String) throws -> SchoolPolicy { try SchoolPolicy(yaml: yaml) }

    @Test func aPolicyThatInspectsGetsACAHandedOverOnce() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let interception = ProxyInterception()
        let policy = try school("policy:\n  inspect:\n    hosts: [youtube.com]\n    headers: { googleAllowedDomains: [school.example] }\n")
        // The block page's CA exists: its key is one the proxy must not trust either.
        let blockPage = try LocalCertificateAuthority.create(folder: folder + "/block-page-ca", organization: "Lakeside")
        guard case .interception(let handover) = try #require(interception.prepare(configuration: configuration(), school: policy, logger: logger)) else {
            Issue.record("not the CA")
            return
        }
        let authority = try InterceptionAuthority(key: handover.key, certificate: handover.certificate)
        #expect(authority.permittedNames == ["google.com", "youtube.com"])
        #expect(handover.untrustedKeys == [authority.keyHash, InterceptionAuthority.keyHash(ofPEM: blockPage.pem)!])
        #expect(interception.greeting == [.interception(handover)], "each start of the proxy is told it first")
        // The same policy again: nothing new for the running proxy; the CA on disk is kept.
        #expect(interception.prepare(configuration: configuration(), school: policy, logger: logger) == nil)
        #expect(try InterceptionAuthority.read(folder: folder + "/inspect-ca")?.certificate == authority.certificate)
        // A name it does not cover: a new CA, handed over.
        let wider = try school("policy:\n  inspect:\n    hosts: [youtube.com, bing.com]\n")
        guard case .interception(let next) = try #require(interception.prepare(configuration: configuration(), school: wider, logger: logger)) else {
            Issue.record("not the CA")
            return
        }
        #expect(next.certificate != handover.certificate)
    }

    @Test func aPolicyThatInspectsNothingMakesNoCA() throws {
        let interception = ProxyInterception()
        #expect(interception.prepare(configuration: configuration(), school: try school("policy:\n  block: [adult]\n"), logger: logger) == nil)
        #expect(interception.greeting.isEmpty && !FileManager.default.fileExists(atPath: folder + "/inspect-ca"))
    }

    @Test func theProxyIsToldTheTrustStoreAndTheBlockPagesSettings() throws {
        var configuration = Configuration()
        configuration.proxy.trustFile = "/srv/roots.pem"
        configuration.blockPage.organization = "Lakeside"
        configuration.blockPage.templates = "/etc/hallpass/block-page"
        configuration.blockPage.requestAccess = Configuration.RequestAccess(text: "Ask", url: "https://help.example/?u={url}")
        var text = try FilterControlApplication.proxyArguments(configuration, logger: logger).joined(separator: " ")
        #expect(text.contains("--trust-file /srv/roots.pem --organization Lakeside --language en --templates /etc/hallpass/block-page"), "\(text)")
        #expect(text.contains("--request-text Ask --request-url https://help.example/?u={url}"), "\(text)")
        // The built-in form lives on the block page: the proxy's page links there with the blocked URL.
        configuration.blockPage.requestAccess = Configuration.RequestAccess(text: "Ask", url: "builtin")
        text = try FilterControlApplication.proxyArguments(configuration, logger: logger).joined(separator: " ")
        #expect(text.contains("--request-text Ask --request-url http://127.0.0.1/?url={url}"), "\(text)")
        configuration.blockPage.requestAccess = nil
        #expect(!(try FilterControlApplication.proxyArguments(configuration, logger: logger)).contains("--request-url"))
    }
}
