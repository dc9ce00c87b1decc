// `filterctl replay` as an admin runs it: text and JSON lines, policy from a
// store, and clear errors with exit codes.
import Foundation
import Testing

/// A class, so that its temporary folder goes when each test is done with it.
@Suite final class ReplayCommandTests {
    static let testdata: String = {
        if let override = ProcessInfo.processInfo.environment["HALLPASS_TESTDATA"], !override.isEmpty { return override }
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return packageRoot.deletingLastPathComponent().appendingPathComponent("shared/testdata").path
    }()
    static var hasTestdata: Bool { FileManager.default.fileExists(atPath: testdata + "/ndpi/pcap/443-curl.pcap") }

    let folder: String
    let store: String

    init() throws {
        folder = try Filterctl.temporaryFolder()
        try "www.ntop.org\n".write(toFile: folder + "/test.txt", atomically: true, encoding: .utf8)
        store = folder + "/rules.hpstore"
        let compiled = try Filterctl.run(["compile", "--out", store, folder + "/test.txt"])
        #expect(compiled.status == 0, "\(compiled.stderr)")
    }

    deinit { try? FileManager.default.removeItem(atPath: folder) }

    @Test(.enabled(if: hasTestdata)) func textLinesBlockTheListedName() throws {
        let result = try Filterctl.run(["replay", "--store", store, Self.testdata + "/ndpi/pcap/443-curl.pcap", Self.testdata + "/ndpi/pcap/http.pcapng"])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "block\ttcp\t192.168.1.13:55523\t->\t178.62.197.130:443\ttls\twww.ntop.org\t-")
        #expect(lines.contains { $0.hasPrefix("allow\ttcp\t") && $0.contains("\thttp\tgoogle.com\thttp://google.com/") })
        #expect(lines.allSatisfy { $0.split(separator: "\t", omittingEmptySubsequences: false).count == 8 })
    }

    @Test(.enabled(if: hasTestdata)) func jsonLinesCarryEveryField() throws {
        let capture = Self.testdata + "/ndpi/pcap/dns-google-nsid.pcapng"
        let result = try Filterctl.run(["replay", "--store", store, "--json", capture, Self.testdata + "/ndpi/pcap/tls_ech.pcapng"])
        #expect(result.status == 0, "\(result.stderr)")
        let objects = try result.stdout.split(separator: "\n").map {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any]
        }
        for key in ["file", "proto", "src", "dst", "kind", "host", "url", "ech", "action", "category", "rule", "queries"] {
            #expect(objects.allSatisfy { $0[key] != nil }, "missing \(key)")
        }
        let ntop = try #require(objects.first { $0["host"] as? String == "www.ntop.org" })
        #expect(ntop["action"] as? String == "block" && ntop["kind"] as? String == "dns" && ntop["category"] as? String == "test")
        #expect(ntop["file"] as? String == capture && ntop["rule"] as? String == "www.ntop.org")
        let ech = try #require(objects.first { $0["host"] as? String == "performance.radar.cloudflare.com" })
        #expect(ech["ech"] as? Bool == true && ech["kind"] as? String == "tls" && ech["action"] as? String == "allow")
        #expect((ech["src"] as? String)?.hasPrefix("[") == true, "IPv6 endpoints are bracketed")
    }

    @Test(.enabled(if: hasTestdata)) func configPolicyApplies() throws {
        let config = folder + "/hallpass.yaml"
        try "policy:\n  block: []\n  noName: block\n".write(toFile: config, atomically: true, encoding: .utf8)
        let result = try Filterctl.run(["replay", "--store", store, "--config", config, Self.testdata + "/ndpi/pcap/443-curl.pcap",
                                        Self.testdata + "/ndpi/pcap/443-chrome.pcap"])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("allow\ttcp") == true, "with no category blocked the listed name is allowed")
        #expect(lines.last?.hasPrefix("block\ttcp") == true && lines.last?.contains("\tnone\t-\t-") == true, "a mid-stream flow shows no name")
        try "policy:\n  noName: sometimes\n".write(toFile: config, atomically: true, encoding: .utf8)
        let bad = try Filterctl.run(["replay", "--store", store, "--config", config, Self.testdata + "/ndpi/pcap/443-curl.pcap"])
        #expect(bad.status == 78 && bad.stderr.contains(config))
    }

    @Test func errorsNameTheFileAndUseTheExitCodes() throws {
        let missing = try Filterctl.run(["replay", "--store", store, folder + "/nope.pcap"])
        #expect(missing.status == 66 && missing.stderr.contains("nope.pcap"))
        let junk = folder + "/junk.pcap"
        try "this is not a capture".write(toFile: junk, atomically: true, encoding: .utf8)
        let bad = try Filterctl.run(["replay", "--store", store, junk])
        #expect(bad.status == 65 && bad.stderr.contains("junk.pcap") && bad.stderr.contains("magic"))
        let noRules = try Filterctl.run(["replay", junk])
        #expect(noRules.status == 64)
        let noStore = try Filterctl.run(["replay", "--store", folder + "/absent.hpstore", junk])
        #expect(noStore.status == 66)
        let folderInput = try Filterctl.run(["replay", "--store", store, folder])
        #expect(folderInput.status == 66 && folderInput.stderr.contains("folder"))
    }

    @Test func arbitraryBytesNeverCrashTheReplay() throws {
        // A classic pcap header (raw IP) followed by records of random bytes.
        var bytes: [UInt8] = [0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0] + [UInt8](repeating: 0, count: 8) + [0xff, 0xff, 0, 0, 101, 0, 0, 0]
        var state: UInt64 = 42
        for index in 0..<300 {
            let length = index % 90
            bytes += [UInt8(index & 0xff), 0, 0, 0, 0, 0, 0, 0, UInt8(length), 0, 0, 0, UInt8(length), 0, 0, 0]
            for position in 0..<length {
                state = state &* 6364136223846793005 &+ 1442695040888963407
                bytes.append(position == 0 ? (index % 2 == 0 ? 0x45 : 0x60) : UInt8(truncatingIfNeeded: state >> 33))
            }
        }
        let file = folder + "/random.pcap"
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        let result = try Filterctl.run(["replay", "--store", store, "--json", file])
        #expect(result.status == 0, "\(result.stderr)")
    }
}
