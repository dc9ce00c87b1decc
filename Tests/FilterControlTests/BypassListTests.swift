// The lists shipped in rules/bypass: they compile, every DoH/DoT server name of the shared
// captures is in category doh, and the documented ECH public name is in ech-front.
import Foundation
import Testing

@Suite struct BypassListTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The names nDPI saw in the shared captures' DoH and DoT flows.
    static func encryptedDNSNames() throws -> [String] {
        var names: Set<String> = []
        for capture in ["dnscrypt-v2-doh.pcap", "dns_doh.pcap", "googledns_android10.pcap", "doq_adguard.pcapng"] {
            let text = try String(contentsOfFile: ReplayCommandTests.testdata + "/ndpi/expected/\(capture).ndpi_flows.tsv", encoding: .utf8)
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
                if fields.count > 7, fields[6].contains("DoH_DoT"), !fields[7].isEmpty { names.insert(String(fields[7])) }
            }
        }
        return names.sorted()
    }

    @Test(.enabled(if: ReplayCommandTests.hasTestdata)) func dohAndECHFrontListsCoverTheCaptures() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let store = folder + "/bypass.hpstore"
        let compiled = try Filterctl.run(["compile", "--out", store, Self.packageRoot + "/rules/bypass"])
        #expect(compiled.status == 0, "\(compiled.stderr)")
        let summary = compiled.stdout + compiled.stderr
        #expect(summary.contains("doh: 1914 rules") && summary.contains("ech-front: 1 rules"), "\(summary)")
        try "policy:\n  block: [doh, ech-front]\n".write(toFile: folder + "/hallpass.yaml", atomically: true, encoding: .utf8)
        let names = try Self.encryptedDNSNames()
        #expect(names.count >= 31)
        let checked = try Filterctl.run(["check", "--store", store, "--config", folder + "/hallpass.yaml"] + names + ["cloudflare-ech.com", "www.example.com"])
        let lines = checked.stdout.split(separator: "\n").map(String.init)
        for name in names {
            #expect(lines.contains { $0.hasPrefix("block\t\(name)\tcategory doh") }, "\(name) is not in rules/bypass/doh")
        }
        #expect(lines.contains { $0.hasPrefix("block\tcloudflare-ech.com\tcategory ech-front") })
        #expect(lines.contains { $0.hasPrefix("allow\twww.example.com\t") })
    }
}
