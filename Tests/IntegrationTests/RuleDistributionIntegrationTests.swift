import FilterControl
import Foundation
import Testing

extension TestNetwork {
    /// The rule server's address as filter-control sees it.
    var ruleSource: String { "https://\(serverIPv4):8443/bundle/" }

    /// A second nginx in the server namespace: `folder/www` over HTTPS on port
    /// 8443 with a certificate for the server's address from a test CA
    /// (`folder/rules-ca.pem`, known to nobody else). Each request is logged
    /// to `rules-access.log` as `URI STATUS`.
    func startRuleServer() throws {
        try FileManager.default.createDirectory(atPath: folder + "/www/bundle", withIntermediateDirectories: true)
        let certificates = try shell(
            """
            set -e
            cd \(folder)
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=hallpass test rules CA" \
              -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
              -keyout rules-ca-key.pem -out rules-ca.pem 2>&1
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=\(serverIPv4)" \
              -keyout rules-key.pem -out rules.csr 2>&1
            printf 'subjectAltName=IP:\(serverIPv4)\\nextendedKeyUsage=serverAuth\\nbasicConstraints=CA:FALSE\\n' > rules.ext
            openssl x509 -req -in rules.csr -CA rules-ca.pem -CAkey rules-ca-key.pem -CAcreateserial -days 2 \
              -extfile rules.ext -out rules-cert.pem 2>&1
            """)
        guard certificates.status == 0 else { throw TestNetworkError("openssl: \(certificates.output)") }
        let configuration = """
            daemon off;
            master_process off;
            worker_processes 1;
            user root;
            pid \(folder)/rules-nginx.pid;
            error_log \(folder)/rules-nginx-error.log;
            events { worker_connections 64; }
            http {
              log_format brief '$request_uri $status';
              access_log \(folder)/rules-access.log brief;
              client_body_temp_path \(folder)/rules-body;
              proxy_temp_path \(folder)/rules-proxy;
              fastcgi_temp_path \(folder)/rules-fastcgi;
              uwsgi_temp_path \(folder)/rules-uwsgi;
              scgi_temp_path \(folder)/rules-scgi;
              server {
                listen \(serverIPv4):8443 ssl;
                ssl_certificate \(folder)/rules-cert.pem;
                ssl_certificate_key \(folder)/rules-key.pem;
                root \(folder)/www;
              }
            }
            """
        try configuration.write(toFile: folder + "/rules-nginx.conf", atomically: true, encoding: .utf8)
        try start(["ip", "netns", "exec", server, "nginx", "-c", folder + "/rules-nginx.conf", "-p", folder], log: "rules-nginx")
        try waitFor("the rule server to listen") { try shell("ip netns exec \(server) ss -ltn | grep -q ':8443'").status == 0 }
    }

    /// The rule server's access log, one `URI STATUS` a line.
    var ruleRequests: [String] { log("rules-access").split(separator: "\n").map(String.init) }
}

/// The daemon as a school runs it: no `--store`, rules fetched from the
/// school's HTTPS server, verified, installed into `rules.directory`, and
/// changed with `filterctl reload`, checked with real traffic.
extension FilterIntegrationTests {
    /// Publishes version `version` of a bundle whose category `demo` lists `demo`
    /// and category `school` lists `school`, signed with `key`.
    func publish(
        _ network: TestNetwork, version: Int, demo: String, school: String, key: String, expires: String = "30d"
    ) throws {
        let sources = network.folder + "/lists-\(version)"
        try FileManager.default.createDirectory(atPath: sources, withIntermediateDirectories: true)
        try (demo + "\n").write(toFile: sources + "/demo.txt", atomically: true, encoding: .utf8)
        try (school + "\n").write(toFile: sources + "/school.txt", atomically: true, encoding: .utf8)
        let staging = network.folder + "/staging-\(version)"
        let build = try shell(
            "\(TestNetwork.binaries)/filterctl bundle build --key \(key) --version \(version) --expires \(expires) --out \(staging) \(sources)/demo.txt \(sources)/school.txt"
        )
        #expect(build.status == 0, "\(build.output)")
        // nginx's ETag is the file's modification time (seconds) and size: a
        // manifest of the same size published within the same second would
        // look unchanged. Each publication gets its own time.
        let counter = network.folder + "/publications"
        let publications = (Int((try? String(contentsOfFile: counter, encoding: .utf8)) ?? "") ?? 0) + 1
        try String(publications).write(toFile: counter, atomically: true, encoding: .utf8)
        _ = try shell("touch -d @\(Int(Date().timeIntervalSince1970) + 10 * publications) \(staging)/manifest")
        // Replace the served folder in one step, as a school's publishing job would.
        let served = network.folder + "/www/bundle"
        _ = try shell("rm -rf \(served).old && mv \(served) \(served).old && mv \(staging) \(served)")
    }

    func reload(_ network: TestNetwork) throws -> (status: Int32, output: String) {
        try shell("\(TestNetwork.binaries)/filterctl reload --socket \(network.folder)/control.sock")
    }

    func isReset(_ result: (status: Int32, output: String)) -> Bool { [35, 56].contains(result.status) }

    @Test func theDaemonFetchesSignedRulesOverHTTPSAndReloadChangesWhatIsEnforced() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        try network.startRuleServer()

        let key = network.folder + "/signing.pem"
        let keygen = try shell("\(TestNetwork.binaries)/filterctl bundle keygen --out \(key)")
        #expect(keygen.status == 0, "\(keygen.output)")
        let trustedKey = keygen.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let otherKey = network.folder + "/other.pem"
        #expect(try shell("\(TestNetwork.binaries)/filterctl bundle keygen --out \(otherKey)").status == 0)
        try publish(network, version: 1, demo: "blocked.test", school: "allowed.test", key: key)

        // Names no rule knows are blocked, and so are flows without a name
        // (the rule server is reached by address): only the exemption of
        // filter-control's own connections lets reloads through.
        let config = network.folder + "/hallpass.yaml"
        try """
            queue:
              # The build folder has no _hallpass (the package's user for filter-data).
              user: nobody
              number: 3
              failMode: open
            rules:
              directory: \(network.folder)/lib
              source: \(network.ruleSource)
              trustedKeys: [ "\(trustedKey)" ]
              caFile: \(network.folder)/rules-ca.pem
              refresh: 24h
            policy:
              block: [ demo ]
              unknown: block
              noName: block
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
        try network.waitFor("filter-data to bind queue 3") {
            try network.inClient("cat /proc/net/netfilter/nfnetlink_queue").output.split(separator: "\n").contains {
                $0.split(separator: " ", omittingEmptySubsequences: true).first == "3"
            }
        }
        #expect(FileManager.default.fileExists(atPath: network.folder + "/lib/versions/1"), "\(network.log("filter-control"))")
        #expect(isReset(try network.curl("https", "blocked.test")))
        #expect(try network.curl("https", "allowed.test").status == 0, "\(network.log("filter-control"))")
        #expect(isReset(try network.curl("https", "unknown.test")))

        // Nothing new: the server answers 304 to the conditional GET.
        let current = try reload(network)
        #expect(current.status == 0 && current.output.contains("rules version 1 is current"), "\(current.output)")
        #expect(network.ruleRequests.contains("/bundle/manifest 304"), "\(network.ruleRequests)")

        // Bad bundles, each refused with its own reason; version 1 stays enforced.
        try publish(network, version: 2, demo: "allowed.test", school: "blocked.test", key: otherKey)
        let unknownKey = try reload(network)
        #expect(unknownKey.status == 65 && unknownKey.output.contains("unknown-key"), "\(unknownKey.output)")

        try publish(network, version: 2, demo: "allowed.test", school: "blocked.test", key: key)
        let served = network.folder + "/www/bundle"
        let listed = try FileManager.default.contentsOfDirectory(atPath: served).filter { $0 != "manifest" && $0 != "manifest.sig" }
        let tampered = served + "/" + (listed.sorted().first ?? "missing")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: tampered))
        bytes[bytes.count / 2] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: tampered))
        let badHash = try reload(network)
        #expect(badHash.status == 65 && badHash.output.contains("file-hash"), "\(badHash.output)")

        try publish(network, version: 2, demo: "allowed.test", school: "blocked.test", key: key, expires: "1s")
        sleep(2)
        let expired = try reload(network)
        #expect(expired.status == 65 && expired.output.contains("expired"), "\(expired.output)")

        #expect(isReset(try network.curl("https", "blocked.test")))
        #expect(try network.curl("https", "allowed.test").status == 0)
        let refusedStatus = try shell("\(TestNetwork.binaries)/filterctl status --socket \(network.folder)/control.sock")
        #expect(refusedStatus.output.contains("version 1"), "\(refusedStatus.output)")
        #expect(refusedStatus.output.contains("expired"), "\(refusedStatus.output)")

        // A good version 2 swaps the two names, in the same filter-data.
        let pid = try filterData(network)
        try publish(network, version: 2, demo: "allowed.test", school: "blocked.test", key: key)
        let installed = try reload(network)
        #expect(installed.status == 0 && installed.output.contains("version 2"), "\(installed.output)")
        // reload answers once filter-data uses the new rules: no waiting here.
        #expect(try network.curl("https", "blocked.test").status == 0)
        #expect(isReset(try network.curl("https", "allowed.test")))
        #expect(try filterData(network) == pid)
        let status = try shell("\(TestNetwork.binaries)/filterctl status --json --socket \(network.folder)/control.sock")
        #expect(
            status.status == 0 && status.output.replacingOccurrences(of: "\\/", with: "/").contains(network.ruleSource),
            "\(status.output)")

        // An older version published later is a rollback: refused.
        try publish(network, version: 1, demo: "blocked.test", school: "allowed.test", key: key)
        let rollback = try reload(network)
        #expect(rollback.status == 65 && rollback.output.contains("rollback"), "\(rollback.output)")
        #expect(try network.curl("https", "blocked.test").status == 0)

        // filter-data opens every later store as uid 65534: a folder on the
        // way it cannot search is named before anything is handed over, and
        // version 2 stays in force.
        try publish(network, version: 3, demo: "blocked.test", school: "allowed.test", key: key)
        let lib = network.folder + "/lib"
        #expect(chmod(lib, 0o700) == 0)
        let closed = try reload(network)
        #expect(closed.status == 65 && closed.output.contains("cannot search \(lib)"), "\(closed.output)")
        #expect(chmod(lib, 0o755) == 0)
        #expect(try network.curl("https", "blocked.test").status == 0)

        // What mode bits do not show (an ACL shutting uid 65534 out of the new
        // version's folder) filter-data refuses itself. It keeps version 2,
        // and so does its next start: refused files are not kept for later.
        let acl = try shell("setfacl -m u:65534:--- \(lib)/versions/3")
        #expect(acl.status == 0, "\(acl.output)")
        let denied = try reload(network)
        #expect(denied.status == 65 && denied.output.contains("filter-data refused them"), "\(denied.output)")
        #expect(try network.curl("https", "blocked.test").status == 0)
        let refusing = try filterData(network)
        #expect(kill(refusing, SIGKILL) == 0)
        try network.waitFor("filter-data to start again") {
            network.log("filter-control").contains("is filtering with rules version 2")
                || network.log("filter-control").contains("is filtering with rules version 3")
        }
        #expect(network.log("filter-control").contains("is filtering with rules version 2"), "\(network.log("filter-control"))")
        #expect(try network.curl("https", "blocked.test").status == 0)
        #expect(isReset(try network.curl("https", "allowed.test")))

        // With the ACL gone, the installed version 3 goes in.
        #expect(try shell("setfacl -b \(lib)/versions/3").status == 0)
        let third = try reload(network)
        #expect(third.status == 0 && third.output.contains("rules version 3 now in force (was 2)"), "\(third.output)")
        #expect(isReset(try network.curl("https", "blocked.test")))
        #expect(try network.curl("https", "allowed.test").status == 0)

        // A restart starts from the installed version 3 without downloading it again.
        process.stop()
        let before = network.ruleRequests.count
        let restarted = try network.start(
            [
                "ip", "netns", "exec", network.client, TestNetwork.binaries + "/filter-control", "--config", config,
                "--runtime-dir", network.folder + "/run",
            ], log: "filter-control-2")
        try network.waitFor("the restarted filter-control") { network.log("filter-control-2").contains("is filtering with rules version 3") }
        #expect(network.ruleRequests.count == before)
        #expect(isReset(try network.curl("https", "blocked.test")))
        restarted.stop()
    }
}
