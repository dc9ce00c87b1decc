import FilterControl
import Foundation
import Testing

/// Updates that cost what changed, as a school publishes them: every version
/// built with `filterctl bundle build --out` into the folder nginx serves,
/// the daemon updating with `filterctl reload`, nginx's access log showing
/// what each update fetched, and real traffic showing what is enforced.
extension FilterIntegrationTests {
    /// Builds `version` into the served folder itself (the folder of the
    /// previous bundle), with `demo` and `school` as the two lists and `block`
    /// as the school policy's blocked categories. Returns filterctl's output.
    @discardableResult
    func publishInPlace(_ network: TestNetwork, version: Int, demo: [String], school: [String], block: String, key: String) throws -> String {
        let sources = network.folder + "/in-place-\(version)"
        try FileManager.default.createDirectory(atPath: sources, withIntermediateDirectories: true)
        try (demo.joined(separator: "\n") + "\n").write(toFile: sources + "/demo.txt", atomically: true, encoding: .utf8)
        try (school.joined(separator: "\n") + "\n").write(toFile: sources + "/school.txt", atomically: true, encoding: .utf8)
        try "policy:\n  block: [\(block)]\n  unknown: allow\n  noName: allow\n".write(toFile: sources + "/policy.yaml", atomically: true, encoding: .utf8)
        let served = network.folder + "/www/bundle"
        let build = try shell(
            "\(TestNetwork.binaries)/filterctl bundle build --key \(key) --version \(version) --policy \(sources)/policy.yaml --out \(served) \(sources)/demo.txt \(sources)/school.txt"
        )
        #expect(build.status == 0, "\(build.output)")
        // nginx's ETag is the manifest's modification time and size: give each version its own time.
        _ = try shell("touch -d @\(Int(Date().timeIntervalSince1970) + 10 * version) \(served)/manifest")
        return build.output
    }

    /// The requests nginx logged after the first `count`.
    func requests(_ network: TestNetwork, since count: Int) -> [String] { Array(network.ruleRequests.dropFirst(count)) }

    @Test func anUpdateFetchesOnlyWhatChangedAndABrokenDeltaFallsBackToTheWholeStore() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        try network.startRuleServer()
        let key = network.folder + "/signing.pem"
        let keygen = try shell("\(TestNetwork.binaries)/filterctl bundle keygen --out \(key)")
        #expect(keygen.status == 0, "\(keygen.output)")
        let trustedKey = keygen.output.trimmingCharacters(in: .whitespacesAndNewlines)
        // Enough names that a whole store and a delta differ plainly in size.
        let filler = (0..<20_000).map { "filler\($0).demo.example" }
        try publishInPlace(network, version: 1, demo: ["blocked.test"] + filler, school: ["allowed.test"], block: "demo", key: key)

        let config = network.folder + "/hallpass.yaml"
        try """
            queue:
              user: nobody
              number: 3
              failMode: open
            rules:
              directory: \(network.folder)/lib
              source: \(network.ruleSource)
              trustedKeys: [ "\(trustedKey)" ]
              caFile: \(network.folder)/rules-ca.pem
              refresh: 24h
            log:
              file: \(network.folder)/audit.jsonl
              journald: false
            admin:
              socket: \(network.folder)/control.sock
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let process = try network.start(
            [
                "ip", "netns", "exec", network.client, TestNetwork.binaries + "/filter-control", "--config", config,
                "--runtime-dir", network.folder + "/run",
            ], log: "filter-control")
        defer { process.stop() }
        try network.waitFor("filter-data with version 1") { network.log("filter-control").contains("is filtering with rules version 1") }
        #expect(isReset(try network.curl("https", "blocked.test")), "\(network.log("filter-control"))")
        #expect(try network.curl("https", "allowed.test").status == 0)
        let store = network.folder + "/www/bundle/rules.hpstore"
        let storeSize = try #require(try FileManager.default.attributesOfItem(atPath: store)[.size] as? NSNumber).intValue

        // Version 2 changes the policy only: the store is the same file, and the
        // machine asks for the manifest, its signature and the policy, nothing else.
        var before = network.ruleRequests.count
        let policyOnly = try publishInPlace(network, version: 2, demo: ["blocked.test"] + filler, school: ["allowed.test"], block: "school", key: key)
        #expect(policyOnly.contains("unchanged (kept byte for byte): rules.hpstore"), "\(policyOnly)")
        let second = try reload(network)
        #expect(second.status == 0 && second.output.contains("rules version 2 now in force (was 1)"), "\(second.output)")
        #expect(requests(network, since: before) == ["/bundle/manifest 200", "/bundle/manifest.sig 200", "/bundle/policy.yaml 200"])
        #expect(try network.curl("https", "blocked.test").status == 0)
        #expect(isReset(try network.curl("https", "allowed.test")))
        let state = try String(contentsOfFile: network.folder + "/lib/state", encoding: .utf8)
        #expect(state.contains("last-files kept rules.hpstore; downloaded policy.yaml"), "\(state)")

        // Version 3 adds a name to a list: the store comes as a delta from the one installed.
        before = network.ruleRequests.count
        let listChange = try publishInPlace(
            network, version: 3, demo: ["blocked.test"] + filler, school: ["allowed.test", "unknown.test"], block: "school", key: key)
        let deltas = try FileManager.default.contentsOfDirectory(atPath: network.folder + "/www/bundle").filter { $0.hasSuffix(".zst") }
        #expect(deltas.count == 1, "\(listChange)")
        let delta = try #require(deltas.first)
        let deltaSize = try #require(try FileManager.default.attributesOfItem(atPath: network.folder + "/www/bundle/" + delta)[.size] as? NSNumber).intValue
        #expect(deltaSize * 20 < storeSize, "a delta of \(deltaSize) bytes for a store of \(storeSize)")
        let third = try reload(network)
        #expect(third.status == 0 && third.output.contains("rules version 3 now in force (was 2)"), "\(third.output)")
        #expect(requests(network, since: before) == ["/bundle/manifest 200", "/bundle/manifest.sig 200", "/bundle/\(delta) 200"])
        #expect(isReset(try network.curl("https", "unknown.test")))
        #expect(isReset(try network.curl("https", "allowed.test")))

        // Version 4's deltas (from version 3's store and from version 1's, which the
        // machine keeps too) are damaged on the server: each is refused in turn,
        // and the whole store is fetched.
        before = network.ruleRequests.count
        try publishInPlace(
            network, version: 4, demo: ["blocked.test"] + filler, school: ["allowed.test", "unknown.test", "another.test"], block: "school", key: key)
        let manifest = try String(contentsOfFile: network.folder + "/www/bundle/manifest", encoding: .utf8)
        let named = manifest.split(separator: "\n").filter { $0.hasPrefix("delta ") }.map { String($0.split(separator: " ")[1]) }
        #expect(named.count == 2, "\(manifest)")
        #expect(!FileManager.default.fileExists(atPath: network.folder + "/www/bundle/" + delta), "version 3's delta is gone")
        for name in named {
            let path = network.folder + "/www/bundle/" + name
            var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            bytes[bytes.count / 2] ^= 0x01
            try bytes.write(to: URL(fileURLWithPath: path))
        }
        let fourth = try reload(network)
        #expect(fourth.status == 0 && fourth.output.contains("rules version 4 now in force (was 3)"), "\(fourth.output)")
        #expect(
            requests(network, since: before)
                == ["/bundle/manifest 200", "/bundle/manifest.sig 200"] + named.map { "/bundle/\($0) 200" } + ["/bundle/rules.hpstore 200"])
        #expect(isReset(try network.curl("https", "another.test")))
        let after = try String(contentsOfFile: network.folder + "/lib/state", encoding: .utf8)
        #expect(after.contains("last-files kept policy.yaml; downloaded rules.hpstore; refused deltas: \(named[0]): the delta does not match"), "\(after)")
    }
}
