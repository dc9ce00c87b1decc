import Foundation
import SharedStore
import Testing

/// Runs the real filterctl binary, as an admin would.
struct Filterctl {
    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static var binary: URL {
        // The test bundle and the products share one build folder.
        let executable = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
        var folder = executable.deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: folder.appendingPathComponent("filterctl").path), folder.path != "/" {
            folder = folder.deletingLastPathComponent()
        }
        return folder.appendingPathComponent("filterctl")
    }

    @discardableResult
    static func run(_ arguments: [String], input: String? = nil) throws -> Output {
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        let inPipe = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = inPipe
        try process.run()
        if let input { inPipe.fileHandleForWriting.write(Data(input.utf8)) }
        try inPipe.fileHandleForWriting.close()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationReason == .exit, "filterctl \(arguments) died from a signal")
        return Output(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    static func temporaryFolder() throws -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder.path
    }
}

/// A class, so that its temporary folder goes when each test is done with it.
@Suite final class FilterctlTests {
    let lists: String

    init() throws {
        lists = try Filterctl.temporaryFolder()
        try "casino.example\n=exact.example\nvideos.example/forbidden\n".write(toFile: lists + "/gambling.txt", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: lists + "/ut1/adult", withIntermediateDirectories: true)
        try "adult.example\n".write(toFile: lists + "/ut1/adult/domains", atomically: true, encoding: .utf8)
        try "adult2.example/pics\n".write(toFile: lists + "/ut1/adult/urls", atomically: true, encoding: .utf8)
    }

    deinit { try? FileManager.default.removeItem(atPath: lists) }

    func compiledStore() throws -> String {
        let store = lists + "/rules.hpstore"
        let result = try Filterctl.run(["compile", "--out", store, lists + "/gambling.txt", lists + "/ut1"])
        #expect(result.status == 0, "\(result.stderr)")
        return store
    }

    @Test func compileAndCheckText() throws {
        let store = try compiledStore()
        let result = try Filterctl.run(["check", "--store", store, "https://www.casino.example/x", "http://adult2.example/pics/1", "wikipedia.org"])
        #expect(result.status == 0)
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines == [
            "block\thttps://www.casino.example/x\tcategory gambling, rule casino.example",
            "block\thttp://adult2.example/pics/1\tcategory adult, rule adult2.example/pics",
            "allow\twikipedia.org\tno rule knows this name (policy.unknown)",
        ])
    }

    @Test func checkJSONAndBatchFromStandardInput() throws {
        let store = try compiledStore()
        let result = try Filterctl.run(["check", "--store", store, "--json", "-"], input: "casino.example\n\n# comment\nbad host\nexact.example\r\n")
        #expect(result.status == 1, "one target is invalid")
        let objects = try result.stdout.split(separator: "\n").map {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any]
        }
        #expect(objects.count == 3)
        #expect(objects[0]["action"] as? String == "block" && objects[0]["category"] as? String == "gambling")
        #expect(objects[1]["action"] as? String == "error" && objects[1]["target"] as? String == "bad host")
        #expect(objects[2]["rule"] as? String == "=exact.example")
    }

    @Test func checkAppliesTheConfigPolicy() throws {
        let store = try compiledStore()
        let config = lists + "/hallpass.yaml"
        try "policy:\n  block: [adult]\n  allow: [\"ok.adult.example\"]\n  unknown: ask\n".write(toFile: config, atomically: true, encoding: .utf8)
        let result = try Filterctl.run(["check", "--store", store, "--config", config, "casino.example", "adult.example", "ok.adult.example", "new.example"])
        #expect(result.stdout.split(separator: "\n").map { $0.split(separator: "\t")[0] } == ["allow", "block", "allow", "ask"])
        try "policy:\n  unknown: sometimes\n".write(toFile: config, atomically: true, encoding: .utf8)
        let bad = try Filterctl.run(["check", "--store", store, "--config", config, "x.example"])
        #expect(bad.status == 78)
        #expect(bad.stderr.contains("policy.unknown"))
    }

    @Test func bundlesBuildVerifyAndAreRefusedWhenTampered() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let keygen = try Filterctl.run(["bundle", "keygen", "--out", folder + "/key.pem"])
        #expect(keygen.status == 0)
        let publicKey = keygen.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(publicKey.hasPrefix("ed25519:"))
        #expect(try Filterctl.run(["bundle", "keygen", "--out", folder + "/key.pem"]).status == 73, "never overwrites a key")
        let attributes = try FileManager.default.attributesOfItem(atPath: folder + "/key.pem")
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)

        let bundle = folder + "/bundle"
        let build = try Filterctl.run(["bundle", "build", "--key", folder + "/key.pem", "--version", "5", "--expires", "2d", "--out", bundle, lists + "/gambling.txt"])
        #expect(build.status == 0, "\(build.stderr)")
        let verify = try Filterctl.run(["bundle", "verify", bundle, "--trusted-key", publicKey])
        #expect(verify.status == 0)
        #expect(verify.stdout.hasPrefix("ok: version 5"))
        let check = try Filterctl.run(["check", "--bundle", bundle, "--trusted-key", publicKey, "casino.example"])
        #expect(check.stdout.hasPrefix("block\t"))

        let other = try Filterctl.run(["bundle", "keygen", "--out", folder + "/other.pem"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let wrongKey = try Filterctl.run(["bundle", "verify", bundle, "--trusted-key", other])
        #expect(wrongKey.status == 65)
        #expect(wrongKey.stderr.contains("bundle.unknown-key"))

        var store = try Data(contentsOf: URL(fileURLWithPath: bundle + "/rules.hpstore"))
        store[store.count - 1] ^= 0xFF
        try store.write(to: URL(fileURLWithPath: bundle + "/rules.hpstore"))
        let tampered = try Filterctl.run(["bundle", "verify", bundle, "--trusted-key", publicKey])
        #expect(tampered.status == 65)
        #expect(tampered.stderr.contains("bundle.file-hash"))
        #expect(try Filterctl.run(["check", "--bundle", bundle, "casino.example"]).status == 65)
    }

    /// The offline key: a manifest prepared elsewhere is signed on another machine, and
    /// a bundle folder with that signature is taken by whoever trusts that key alone.
    @Test func signAManifestPreparedElsewhere() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        _ = try Filterctl.run(["bundle", "keygen", "--out", folder + "/server.pem"])
        let offline = try Filterctl.run(["bundle", "keygen", "--out", folder + "/offline.pem"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let bundle = folder + "/bundle"
        let build = try Filterctl.run(["bundle", "build", "--key", folder + "/server.pem", "--version", "7", "--out", bundle, lists + "/gambling.txt"])
        #expect(build.status == 0, "\(build.stderr)")
        #expect(try Filterctl.run(["bundle", "verify", bundle, "--trusted-key", offline]).status == 65, "not yet signed by the offline key")

        let sign = try Filterctl.run(["bundle", "sign", "--key", folder + "/offline.pem", bundle + "/manifest", "--out", folder + "/manifest.sig"])
        #expect(sign.status == 0, "\(sign.stderr)")
        let keyID = try BundlePublicKey(offline).keyID
        #expect(sign.stdout.hasPrefix("bundle version 7, issued "))
        #expect(sign.stdout.contains("file rules.hpstore: "))
        #expect(sign.stdout.contains("signed by \(keyID) (\(offline)): \(folder)/manifest.sig"))
        let signature = try String(contentsOfFile: folder + "/manifest.sig", encoding: .utf8)
        #expect(signature.hasPrefix("ed25519 \(keyID) ") && signature.hasSuffix("\n"))

        try FileManager.default.removeItem(atPath: bundle + "/manifest.sig")
        try FileManager.default.copyItem(atPath: folder + "/manifest.sig", toPath: bundle + "/manifest.sig")
        let verify = try Filterctl.run(["bundle", "verify", bundle, "--trusted-key", offline])
        #expect(verify.status == 0, "\(verify.stderr)")
        #expect(verify.stdout.hasPrefix("ok: version 7") && verify.stdout.contains("signed by \(keyID)"))

        // Anything but a manifest is refused and nothing is written: the store, the
        // signature itself, an empty file.
        try Data().write(to: URL(fileURLWithPath: folder + "/empty"))
        for other in [bundle + "/rules.hpstore", bundle + "/manifest.sig", folder + "/empty"] {
            let refused = try Filterctl.run(["bundle", "sign", "--key", folder + "/offline.pem", other, "--out", folder + "/refused.sig"])
            #expect(refused.status == 65, "\(other)")
            #expect(refused.stderr.contains("refused (bundle.manifest-malformed)"), "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: folder + "/refused.sig"))
        }
        #expect(try Filterctl.run(["bundle", "sign", "--key", folder + "/none.pem", bundle + "/manifest", "--out", folder + "/x.sig"]).status == 66)
        #expect(try Filterctl.run(["bundle", "sign", "--key", folder + "/offline.pem", folder + "/none", "--out", folder + "/x.sig"]).status == 66)
        #expect(try Filterctl.run(["bundle", "sign", "--key", bundle + "/manifest", bundle + "/manifest", "--out", folder + "/x.sig"]).status == 65)
    }

    /// Two bundles of the same rules differ in their manifests, never in their stores,
    /// so a machine that has the store fetches nothing of it (issue 28).
    @Test func equalRulesGiveByteIdenticalStores() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        _ = try Filterctl.run(["bundle", "keygen", "--out", folder + "/key.pem"])
        try "timezone: Europe/London\n".write(toFile: folder + "/policy.yaml", atomically: true, encoding: .utf8)
        for (version, out) in [("5", "/a"), ("6", "/b")] {
            var arguments = ["bundle", "build", "--key", folder + "/key.pem", "--version", version, "--out", folder + out, lists + "/gambling.txt"]
            if version == "6" { arguments += ["--policy", folder + "/policy.yaml"] }
            let build = try Filterctl.run(arguments)
            #expect(build.status == 0, "\(build.stderr)")
        }
        let first = try Data(contentsOf: URL(fileURLWithPath: folder + "/a/rules.hpstore"))
        let second = try Data(contentsOf: URL(fileURLWithPath: folder + "/b/rules.hpstore"))
        #expect(first == second)
        // The version is the manifest's: a store read in its bundle folder is called by it.
        #expect(try RuleStore(path: folder + "/b/rules.hpstore").version == 6)
        #expect(try RuleStore(bytes: [UInt8](second)).version == 0)
    }

    /// Any bytes handed over as a store or a bundle: a clear error, never a crash.
    @Test func arbitraryBytesAsStoreOrBundle() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let key = try Filterctl.run(["bundle", "keygen", "--out", folder + "/key.pem"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        var generator = SystemRandomNumberGenerator()
        let realStore = try Data(contentsOf: URL(fileURLWithPath: try compiledStore()))
        let samples: [Data] = [
            Data(), Data("HPSTORE\0".utf8), Data(repeating: 0, count: 4096),
            Data((0..<2000).map { _ in UInt8.random(in: 0...255, using: &generator) }),
            realStore.prefix(realStore.count / 2), realStore + Data([1, 2, 3]),
        ]
        for (index, sample) in samples.enumerated() {
            let path = folder + "/sample\(index)"
            try sample.write(to: URL(fileURLWithPath: path))
            let result = try Filterctl.run(["check", "--store", path, "example.com"])
            #expect(result.status == 65, "sample \(index)")
            #expect(result.stderr.hasPrefix("filterctl: "))
            // The same bytes as every file of a bundle.
            let bundle = folder + "/bundle\(index)"
            try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
            for name in ["manifest", "manifest.sig", "rules.hpstore"] { try sample.write(to: URL(fileURLWithPath: bundle + "/" + name)) }
            let verify = try Filterctl.run(["bundle", "verify", bundle, "--trusted-key", key])
            #expect(verify.status == 65, "sample \(index)")
            #expect(verify.stderr.contains("refused (bundle."))
        }
    }

    @Test func usageAndMissingInputs() throws {
        #expect(try Filterctl.run(["check", "--store", "a", "--bundle", "b", "example.com"]).status == 64)
        #expect(try Filterctl.run(["replay", "capture.pcap"]).status == 64)
        // Without --store or --bundle, check asks the running filter-control; none runs here.
        let noDaemon = try Filterctl.run(["check", "--socket", lists + "/no-daemon.sock", "example.com"])
        #expect(noDaemon.status == 69 && noDaemon.stderr.contains("filter-control is not running"), "\(noDaemon.stderr)")
        #expect(try Filterctl.run(["status", "--socket", lists + "/no-daemon.sock"]).status == 69)
        #expect(try Filterctl.run(["reload", "--socket", lists + "/no-daemon.sock"]).status == 69)
        #expect(try Filterctl.run(["check", "--store", "/nonexistent.hpstore", "example.com"]).status == 66)
        #expect(try Filterctl.run(["compile", "--out", lists + "/x.hpstore", "/nonexistent/list"]).status == 66)
        let example = try Filterctl.run(["config", "example"])
        let config = lists + "/example.yaml"
        try example.stdout.write(toFile: config, atomically: true, encoding: .utf8)
        #expect(try Filterctl.run(["config", "check", config]).status == 0)
    }
}
