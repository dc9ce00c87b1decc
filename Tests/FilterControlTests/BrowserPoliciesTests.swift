// `filterctl browser-policies`: the managed policy files' contents from the policy, written
// under a temporary root (never the real /etc), never over a file hallpass did not write,
// removed only when unchanged; and the policy keys they come from.
import Foundation
import Testing
import VerdictCore
@testable import FilterControl

/// A class, so that its temporary folder goes when each test is done with it.
@Suite final class BrowserPoliciesTests {
    let root: String

    init() throws {
        root = try Filterctl.temporaryFolder()
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    static let caPEM = """
        -----BEGIN CERTIFICATE-----
        MIIBhTCCASugAwIBAgIUYWJjZGVmZ2hpamtsbW5vcHFyc3QwCgYIKoZIzj0EAwIw
        FzEVMBMGA1UEAwwMU2Nob29sIFRlc3QgQ0EwHhcNMjYwMTAxMDAwMDAwWhcNMzYw
        MTAxMDAwMDAwWjAXMRUwEwYDVQQDDAxTY2hvb2wgVGVzdCBDQTBZMBMGByqGSM49
        AgEGCCqGSM49AwEHA0IABA==
        -----END CERTIFICATE-----

        """

    static func json(_ file: BrowserPolicyFile) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(file.contents)) as? [String: Any])
    }

    func onRoot(_ path: String) -> String { root + path }

    // MARK: Contents

    @Test func defaultsTurnEncryptedDNSAndECHOff() throws {
        let files = try BrowserPolicies.files(for: BrowserPolicySettings())
        #expect(files.map(\.path) == [BrowserPolicies.chromiumPath, BrowserPolicies.chromePath, BrowserPolicies.firefoxPath])
        let chromium = try Self.json(files[0])
        #expect(chromium["DnsOverHttpsMode"] as? String == "off")
        #expect(chromium["EncryptedClientHelloEnabled"] as? Bool == false)
        #expect(chromium["ForceGoogleSafeSearch"] == nil && chromium["ForceYouTubeRestrict"] == nil && chromium["QuicAllowed"] == nil)
        #expect(files[1].contents == files[0].contents)
        let firefox = try #require(try Self.json(files[2])["policies"] as? [String: Any])
        let doh = try #require(firefox["DNSOverHTTPS"] as? [String: Any])
        #expect(doh["Enabled"] as? Bool == false && doh["Locked"] as? Bool == true)
        #expect(firefox["DisableEncryptedClientHello"] as? Bool == true)
        #expect(firefox["Certificates"] == nil)
    }

    @Test func safeSearchQUICAndTheCA() throws {
        var bypass = BypassPolicy()
        bypass.safeSearch = [.google, .youtubeStrict, .bing]
        bypass.quic = .block
        let files = try BrowserPolicies.files(for: BrowserPolicySettings(bypass: bypass, caCertificatePEM: Self.caPEM))
        let chromium = try Self.json(files[0])
        #expect(chromium["ForceGoogleSafeSearch"] as? Bool == true)
        #expect(chromium["ForceYouTubeRestrict"] as? Int == 2)
        #expect(chromium["QuicAllowed"] as? Bool == false)
        let certificates = try #require(chromium["CACertificates"] as? [String])
        #expect(certificates.count == 1 && certificates[0].hasPrefix("MIIBhTCCASug") && !certificates[0].contains("\n"))
        let firefox = try #require(try Self.json(files[2])["policies"] as? [String: Any])
        let install = try #require((firefox["Certificates"] as? [String: Any])?["Install"] as? [String])
        #expect(install == [BrowserPolicies.firefoxCertificatePath])
        #expect(files.last?.path == BrowserPolicies.firefoxCertificatePath && files.last?.text == Self.caPEM)
        bypass.safeSearch = [.youtubeModerate]
        #expect(try Self.json(try BrowserPolicies.files(for: BrowserPolicySettings(bypass: bypass))[0])["ForceYouTubeRestrict"] as? Int == 1)
    }

    @Test func theInterceptionCABesideTheBlockPagesCA() throws {
        let interception = Self.caPEM.replacingOccurrences(of: "MIIBhTCCASug", with: "MIIBhTCCASuh")
        let files = try BrowserPolicies.files(for: BrowserPolicySettings(caCertificatePEM: Self.caPEM, interceptionCertificatePEM: interception))
        let certificates = try #require(try Self.json(files[0])["CACertificates"] as? [String])
        #expect(certificates.count == 2 && certificates[0].hasPrefix("MIIBhTCCASug") && certificates[1].hasPrefix("MIIBhTCCASuh"))
        #expect(try Self.json(files[1])["CACertificates"] as? [String] == certificates, "Google Chrome's too")
        let firefox = try #require(try Self.json(files[2])["policies"] as? [String: Any])
        let install = try #require((firefox["Certificates"] as? [String: Any])?["Install"] as? [String])
        #expect(install == [BrowserPolicies.firefoxCertificatePath, BrowserPolicies.firefoxInterceptionCertificatePath])
        #expect(files.first { $0.path == BrowserPolicies.firefoxInterceptionCertificatePath }?.text == interception)
        // The interception CA alone (no block page CA).
        let alone = try BrowserPolicies.files(for: BrowserPolicySettings(interceptionCertificatePEM: interception))
        #expect((try Self.json(alone[0])["CACertificates"] as? [String])?.count == 1)
        #expect(alone.map(\.path).contains(BrowserPolicies.firefoxInterceptionCertificatePath) && !alone.map(\.path).contains(BrowserPolicies.firefoxCertificatePath))
    }

    @Test func aPolicyThatStopsInspectingTakesTheInterceptionCAOut() throws {
        let policies = BrowserPolicies(root: root)
        let interception = Self.caPEM.replacingOccurrences(of: "MIIBhTCCASug", with: "MIIBhTCCASuh")
        _ = try policies.install(BrowserPolicySettings(interceptionCertificatePEM: interception))
        #expect(FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.firefoxInterceptionCertificatePath)))
        let report = try policies.install(BrowserPolicySettings())
        #expect(report.files.contains { $0.path == BrowserPolicies.firefoxInterceptionCertificatePath && $0.outcome == .removed })
        #expect(!FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.firefoxInterceptionCertificatePath)))
        #expect(!(try String(contentsOfFile: onRoot(BrowserPolicies.chromiumPath), encoding: .utf8)).contains("CACertificates"))
        // remove takes everything back.
        _ = try policies.install(BrowserPolicySettings(interceptionCertificatePEM: interception))
        _ = try policies.remove()
        #expect(!FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.firefoxInterceptionCertificatePath)))
    }

    @Test func allowedBypassesAreNotTurnedOff() throws {
        var bypass = BypassPolicy()
        bypass.encryptedDNS = .allow
        bypass.ech = .allow
        let files = try BrowserPolicies.files(for: BrowserPolicySettings(bypass: bypass))
        #expect(try Self.json(files[0]).isEmpty)
        #expect((try Self.json(files[2])["policies"] as? [String: Any])?.isEmpty == true)
    }

    @Test func notACertificateIsAnError() {
        #expect(throws: BrowserPolicyError.self) {
            try BrowserPolicies.files(for: BrowserPolicySettings(caCertificatePEM: "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n"))
        }
    }

    // MARK: Install and remove

    @Test func installWritesRecordsAndIsIdempotent() throws {
        let policies = BrowserPolicies(root: root)
        let report = try policies.install(BrowserPolicySettings(caCertificatePEM: Self.caPEM))
        #expect(report.files.map(\.outcome) == [.written, .written, .written, .written])
        for file in try BrowserPolicies.files(for: BrowserPolicySettings(caCertificatePEM: Self.caPEM)) {
            #expect(FileManager.default.contents(atPath: onRoot(file.path)).map { [UInt8]($0) } == file.contents)
        }
        let record = try policies.readRecord()
        #expect(record.count == 4 && record[BrowserPolicies.chromiumPath]?.count == 64)
        #expect(try policies.install(BrowserPolicySettings(caCertificatePEM: Self.caPEM)).files.map(\.outcome) == [.unchanged, .unchanged, .unchanged, .unchanged])
        // The policy changes and the CA goes: files rewritten, the CA copy removed.
        var bypass = BypassPolicy()
        bypass.safeSearch = [.google]
        let again = try policies.install(BrowserPolicySettings(bypass: bypass))
        #expect(again.files.map(\.outcome) == [.written, .written, .written, .removed])
        #expect(!FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.firefoxCertificatePath)))
        #expect(String(decoding: FileManager.default.contents(atPath: onRoot(BrowserPolicies.chromiumPath))!, as: UTF8.self).contains("ForceGoogleSafeSearch"))
    }

    @Test func aFileHallpassDidNotWriteIsNeverOverwritten() throws {
        let firefox = onRoot(BrowserPolicies.firefoxPath)
        try FileManager.default.createDirectory(atPath: (firefox as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let adminPolicies = "{\"policies\": {\"DisableTelemetry\": true}}\n"
        try adminPolicies.write(toFile: firefox, atomically: true, encoding: .utf8)
        let report = try BrowserPolicies(root: root).install(BrowserPolicySettings())
        #expect(report.refusals == 1)
        guard case .refused(let reason) = report.files[2].outcome else { Issue.record("\(report.files)"); return }
        #expect(reason.contains("not written by hallpass"))
        #expect(try String(contentsOfFile: firefox, encoding: .utf8) == adminPolicies)
        #expect(report.files[0].outcome == .written)
        // Remove leaves the admin's file too (it was never recorded).
        let removal = try BrowserPolicies(root: root).remove()
        #expect(removal.files.map(\.path).sorted() == [BrowserPolicies.chromePath, BrowserPolicies.chromiumPath].sorted())
        #expect(FileManager.default.fileExists(atPath: firefox))
    }

    @Test func aFileChangedSinceIsLeftAlone() throws {
        let policies = BrowserPolicies(root: root)
        _ = try policies.install(BrowserPolicySettings())
        let chromium = onRoot(BrowserPolicies.chromiumPath)
        try "{\"DnsOverHttpsMode\": \"off\", \"HomepageLocation\": \"https://school.example\"}\n".write(toFile: chromium, atomically: true, encoding: .utf8)
        var bypass = BypassPolicy()
        bypass.quic = .block
        let report = try policies.install(BrowserPolicySettings(bypass: bypass))
        guard case .refused(let reason) = report.files[0].outcome else { Issue.record("\(report.files)"); return }
        #expect(reason.contains("changed since"))
        #expect(try String(contentsOfFile: chromium, encoding: .utf8).contains("HomepageLocation"))
        let removal = try policies.remove()
        #expect(removal.refusals == 1)
        #expect(FileManager.default.fileExists(atPath: chromium))
        #expect(!FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.chromePath)))
        #expect(!FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.recordPath)), "nothing left to record")
    }

    @Test func anUnreadableRecordStopsEverything() throws {
        let record = onRoot(BrowserPolicies.recordPath)
        try FileManager.default.createDirectory(atPath: (record as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try "not json".write(toFile: record, atomically: true, encoding: .utf8)
        #expect(throws: BrowserPolicyError.self) { try BrowserPolicies(root: root).install(BrowserPolicySettings()) }
        #expect(!FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.chromiumPath)))
    }

    // MARK: The policy keys

    @Test func policyKeysAreRead() throws {
        let keys = try BypassPolicyKeys.topLevel(yaml: """
            timezone: Europe/London
            policy:
              block: [adult]
              safeSearch: [google, youtube-strict, bing, duckduckgo]
              bypass:
                encryptedDNS: allow
                quic: block
            """)
        let policy = keys.applied(to: BypassPolicy())
        #expect(policy.safeSearch == [.google, .youtubeStrict, .bing, .duckduckgo])
        #expect(policy.encryptedDNS == .allow && policy.quic == .block && policy.ech == .block && policy.tunnels == .block)
        #expect(try BypassPolicyKeys.topLevel(yaml: "policy:\n  safeSearch: none\n").safeSearch == [])
        #expect(try BypassPolicyKeys.topLevel(yaml: "rules:\n  source: x\n") == BypassPolicyKeys())
    }

    @Test func badPolicyKeysNameTheKey() {
        do {
            _ = try BypassPolicyKeys.topLevel(yaml: "policy:\n  safeSearch: [youtube-strict, youtube-moderate]\n")
            Issue.record("accepted both YouTube modes")
        } catch {
            #expect(error.key == "policy.safeSearch")
        }
        do {
            _ = try BypassPolicyKeys.topLevel(yaml: "policy:\n  bypass:\n    vpn: block\n")
            Issue.record("accepted an unknown key")
        } catch {
            #expect(error.key == "policy.bypass.vpn")
        }
        do {
            _ = try BypassPolicyKeys.topLevel(yaml: "policy:\n  safeSearch: [altavista]\n")
            Issue.record("accepted an unknown engine")
        } catch {
            #expect(error.message.contains("youtube-strict"))
        }
    }

    // MARK: filterctl

    @Test func filterctlShowInstallRemove() throws {
        let config = root + "/hallpass.yaml"
        try "rules:\n  directory: /var/lib/hallpass\n".write(toFile: config, atomically: true, encoding: .utf8)
        let policy = root + "/school-policy.yaml"
        try "policy:\n  safeSearch: [google, youtube-moderate]\n".write(toFile: policy, atomically: true, encoding: .utf8)
        let show = try Filterctl.run(["browser-policies", "show", "--root", root, "--config", config, "--policy", policy])
        #expect(show.status == 0, "\(show.stderr)")
        #expect(show.stdout.contains("# Chromium: /etc/chromium/policies/managed/hallpass.json"))
        #expect(show.stdout.contains("\"ForceYouTubeRestrict\": 1"))
        #expect(!FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.chromiumPath)), "show writes nothing")
        let install = try Filterctl.run(["browser-policies", "install", "--root", root, "--config", config, "--policy", policy])
        #expect(install.status == 0, "\(install.stderr)")
        #expect(install.stdout.contains("/etc/firefox/policies/policies.json\twritten"))
        // Someone's own Chrome file in place of hallpass's: refused, exit 73.
        try "{}\n".write(toFile: onRoot(BrowserPolicies.chromePath), atomically: true, encoding: .utf8)
        let refused = try Filterctl.run(["browser-policies", "install", "--root", root, "--config", config, "--policy", policy])
        #expect(refused.status == 73)
        #expect(refused.stdout.contains("hallpass.json\trefused: changed since hallpass wrote it"))
        let remove = try Filterctl.run(["browser-policies", "remove", "--root", root])
        #expect(remove.status == 73)
        #expect(!FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.chromiumPath)))
        #expect(FileManager.default.fileExists(atPath: onRoot(BrowserPolicies.chromePath)))
    }
}
