import FilterControl
import Foundation
import Testing

/// `filterctl browser-policies install` writes managed policies that the
/// real Chromium honours: with the files it wrote mounted over
/// /etc/chromium (in a mount namespace of Chromium's own; the host's
/// /etc is never changed), Chromium adds Google's SafeSearch parameters to
/// a search it opens, and without them it does not. The search goes to a
/// web server in the test's server namespace that logs what it was asked.
/// Part of the serialized suite.
extension FilterIntegrationTests {
    @Test func chromiumHonoursTheWrittenPolicies() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let root = network.folder + "/root"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = network.folder + "/hallpass.yaml"
        try "policy:\n  unknown: allow\n".write(toFile: config, atomically: true, encoding: .utf8)
        let policy = network.folder + "/school-policy.yaml"
        try "policy:\n  safeSearch: [ google, youtube-strict ]\n".write(toFile: policy, atomically: true, encoding: .utf8)

        let ctl = TestNetwork.binaries + "/filterctl"
        let installed = try shell("\(ctl) browser-policies install --config \(config) --policy \(policy) --root \(root)")
        #expect(installed.status == 0, "\(installed.output)")
        let written = try String(contentsOfFile: root + "/etc/chromium/policies/managed/hallpass.json", encoding: .utf8)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(written.utf8)) as? [String: Any], "\(written)")
        #expect(object["ForceGoogleSafeSearch"] as? Bool == true && object["DnsOverHttpsMode"] as? String == "off", "\(written)")
        #expect(object["ForceYouTubeRestrict"] as? Int == 2, "\(written)")

        // The "search engine": a web server in the server namespace that logs each request line.
        let server = try network.start(
            ["ip", "netns", "exec", network.server, "/usr/bin/python3", "-m", "http.server", "80", "--bind", network.serverIPv4, "--directory", network.folder],
            log: "search")
        _ = server
        try network.waitFor("the search server to listen") {
            try shell("ip netns exec \(network.server) ss -ltn | grep -q '\(network.serverIPv4):80 '").status == 0
        }

        /// Chromium opening a Google search, with `etc` mounted over /etc/chromium when given.
        func search(_ query: String, policies etc: String?) throws {
            let mount = etc.map { "mount --bind \($0) /etc/chromium && " } ?? ""
            let chromium =
                "HOME=\(network.folder) chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
                + "--user-data-dir=\(network.folder)/profile-\(query) --host-resolver-rules='MAP www.google.com \(network.serverIPv4)' "
                + "--timeout=5000 --dump-dom 'http://www.google.com/search?q=\(query)' >/dev/null 2>&1"
            let ran = try network.inClient("unshare --mount --propagation private sh -c \"\(mount)\(chromium.replacingOccurrences(of: "\"", with: "\\\""))\"")
            #expect(ran.status == 0, "chromium: \(ran.output)")
        }
        try search("withpolicies", policies: root + "/etc/chromium")
        try search("without", policies: nil)

        let requests = network.log("search").split(separator: "\n").filter { $0.contains("GET /search") }
        let managed = requests.filter { $0.contains("q=withpolicies") }
        let unmanaged = requests.filter { $0.contains("q=without") }
        #expect(!managed.isEmpty && managed.allSatisfy { $0.contains("safe=active") }, "with the policies: \(managed)\n\(network.log("search"))")
        #expect(!unmanaged.isEmpty && !unmanaged.contains { $0.contains("safe=active") }, "without them: \(unmanaged)")

        // remove takes back what install wrote.
        let removed = try shell("\(ctl) browser-policies remove --config \(config) --root \(root)")
        #expect(removed.status == 0, "\(removed.output)")
        #expect(!FileManager.default.fileExists(atPath: root + "/etc/chromium/policies/managed/hallpass.json"))
    }
}
