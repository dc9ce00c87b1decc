import Foundation
import Testing

/// The inspection proxy (docs/inspection.md): the addresses of inspected
/// names, from the DNS answers filter-data sees, go into the kernel sets; TCP
/// 443 to them reaches hallpass-proxy, which splices the names it does not
/// inspect byte for byte and terminates the inspected ones; UDP 443 to them
/// is dropped. The school's policy inspects allowed.test and the names
/// below it (less bank.allowed.test, never inspected) and watch.raw.test;
/// every name resolves, through the server's dnsmasq, to one of two server
/// addresses: shared.test, spliced.test and bank.test (never inspected)
/// share nginx's with allowed.test. Before a splice the proxy checks the
/// certificate the server shows for the name: nginx's own covers
/// allowed.test's names, so shared.test and bank.allowed.test are refused
/// there; spliced.test and bank.test get a certificate of their own.
extension FilterIntegrationTests {
    /// Records the first bytes (a whole TLS record at most) of each connection
    /// to port 443 of `argv[1]` and `argv[2]`, one hex line per connection in `argv[3]`.
    static let recorder = """
        import socket, sys, threading
        def serve(family, address):
            listener = socket.socket(family, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind((address, 443))
            listener.listen()
            while True:
                connection, _ = listener.accept()
                connection.settimeout(3)
                data = b""
                try:
                    while len(data) < 5 or len(data) < 5 + int.from_bytes(data[3:5], "big"):
                        chunk = connection.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    pass
                with open(sys.argv[3], "a") as out:
                    out.write(data.hex() + "\\n")
                connection.close()
        threading.Thread(target=serve, args=(socket.AF_INET6, sys.argv[2]), daemon=True).start()
        serve(socket.AF_INET, sys.argv[1])
        """

    /// Sends a real ClientHello (Python's ssl, for the name `argv[1]`) to
    /// port 443 of that name (`argv[3]`: 4 or 6) and writes its hex to `argv[2]`.
    static let helloSender = """
        import socket, ssl, sys
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_hostname=sys.argv[1])
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outgoing.read()
        family = socket.AF_INET6 if sys.argv[3] == "6" else socket.AF_INET
        address = socket.getaddrinfo(sys.argv[1], 443, family, socket.SOCK_STREAM)[0][4]
        connection = socket.socket(family, socket.SOCK_STREAM)
        connection.settimeout(5)
        connection.connect(address)
        connection.sendall(hello)
        with open(sys.argv[2], "w") as out:
            out.write(hello.hex())
        try:
            connection.recv(16)
        except OSError:
            pass
        """

    @Test func theProxySplicesWhatItDoesNotInspectAndTerminatesWhatItDoes() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let raw4 = "10.77.\(network.subnet).3"
        let raw6 = "fd77:\(network.subnet)::3"
        let added = try shell("ip -n \(network.server) addr add \(raw4)/24 dev v\(network.id)s && ip -n \(network.server) addr add \(raw6)/64 dev v\(network.id)s nodad")
        #expect(added.status == 0, "\(added.output)")
        let recorded = network.folder + "/recorded.hex"
        try Self.recorder.write(toFile: network.folder + "/recorder.py", atomically: true, encoding: .utf8)
        try Self.helloSender.write(toFile: network.folder + "/hello.py", atomically: true, encoding: .utf8)
        try network.start(["ip", "netns", "exec", network.server, "/usr/bin/python3", network.folder + "/recorder.py", raw4, raw6, recorded], log: "recorder")
        try network.start(
            [
                "ip", "netns", "exec", network.server, "dnsmasq", "--keep-in-foreground", "--log-facility=-", "--no-resolv", "--no-hosts",
                "--bind-interfaces", "--listen-address=\(network.serverIPv4)",
                "--address=/allowed.test/\(network.serverIPv4)", "--address=/allowed.test/\(network.serverIPv6)",
                "--address=/shared.test/\(network.serverIPv4)", "--address=/shared.test/\(network.serverIPv6)",
                "--address=/spliced.test/\(network.serverIPv4)", "--address=/spliced.test/\(network.serverIPv6)",
                "--address=/bank.test/\(network.serverIPv4)", "--address=/bank.test/\(network.serverIPv6)",
                "--address=/raw.test/\(raw4)", "--address=/raw.test/\(raw6)",
                "--pid-file=\(network.folder)/dnsmasq.pid", "--user=root", "--local-ttl=300",
            ], log: "dnsmasq")
        try network.waitFor("dnsmasq and the recorder") {
            let listening = try shell("ip netns exec \(network.server) ss -lntu").output
            return listening.contains("\(network.serverIPv4):53") && listening.contains("\(raw4):443")
        }
        try network.useServerDNS()
        let quic = FileManager.default.isExecutableFile(atPath: TestNetwork.python)
        if quic { try network.startQUICServer() }

        let key = network.folder + "/signing.pem"
        let keygen = try shell("\(TestNetwork.binaries)/filterctl bundle keygen --out \(key)")
        #expect(keygen.status == 0, "\(keygen.output)")
        try publishSchoolBundle(
            network, version: 1, key: key,
            policy: """
                policy:
                  block: [adult]
                  inspect:
                    hosts: [allowed.test, "=watch.raw.test"]
                    neverInspect: [bank.allowed.test, bank.test, "=raw.test"]
                """)
        let config = network.folder + "/hallpass.yaml"
        try """
            queue:
              user: nobody
              number: 5
              failMode: open
            proxy:
              user: nobody
              ca: \(network.folder)/inspect-ca
            rules:
              directory: \(network.folder)/lib
              source: file://\(network.folder)/bundle/
              trustedKeys: [ "\(keygen.output.trimmingCharacters(in: .whitespacesAndNewlines))" ]
            log:
              file: \(network.folder)/audit.jsonl
              journald: false
            admin:
              socket: \(network.folder)/control.sock
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let hallpass = try network.start(
            [
                "ip", "netns", "exec", network.client, TestNetwork.binaries + "/filter-control", "--config", config,
                "--runtime-dir", network.folder + "/run",
            ], log: "filter-control")
        func log() -> String { network.log("filter-control") }
        try network.waitFor("filter-data and the proxy") {
            log().contains("is filtering with rules version 1") && log().contains("hallpass-proxy") && log().contains("runs with rules version 1")
        }
        // The proxy is sandboxed as its own user (here nobody).
        let proxy = try #require(network.processIDs(runningExecutable: "hallpass-proxy").first, "\(log())")
        let status = try String(contentsOfFile: "/proc/\(proxy)/status", encoding: .utf8)
        #expect(status.contains("Seccomp:\t2") && status.contains("Uid:\t65534\t65534\t65534\t65534"), "\(status)")
        // Undumpable (it holds the interception CA's key): its /proc files are root's, not its user's.
        let environ = try FileManager.default.attributesOfItem(atPath: "/proc/\(proxy)/environ")
        #expect((environ[.ownerAccountID] as? NSNumber)?.intValue == 0, "\(environ)")
        // Its sandbox refuses what it must (exec, fork, files written, AF_UNIX sockets, bind) and allows TCP.
        let probes = try shell("\(TestNetwork.binaries)/hallpass-proxy --sandbox-self-test 2>&1")
        #expect(probes.status == 0 && probes.output.contains("execve: refused") && probes.output.contains("socket(AF_INET): ALLOWED"), "\(probes.output)")

        func inSet(_ address: String) throws -> Bool {
            try network.inClient("ipset test \(address.contains(":") ? "hallpass-inspect6" : "hallpass-inspect4") \(address) 2>/dev/null").status == 0
        }
        func keyPin(_ certificate: String) throws -> String {
            try shell(
                "openssl x509 -in \(network.folder)/\(certificate) -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64"
            ).output.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let pin = try keyPin("cert.pem"), splicedPin = try keyPin("spliced-cert.pem")
        /// curl through the client's resolver (`ipv6` nil: both families asked, as a browser does), pinning `key`.
        func curl(_ name: String, ipv6: Bool? = false, key: String? = nil) throws -> (status: Int32, output: String) {
            let family = ipv6.map { $0 ? "-6 " : "-4 " } ?? ""
            return try network.inClient("curl -sS -m 5 -k \(family)--pinnedpubkey sha256//\(key ?? pin) https://\(name)/ 2>&1")
        }

        // Before any inspected name is looked up, nothing is selected, and QUIC reaches the server.
        #expect(try !inSet(network.serverIPv4))
        if quic {
            let before = try network.quic("shared.test")
            #expect(before.status == 0, "QUIC before the selection: \(before.output)")
        }

        // (d) An inspected name: its lookup selects its addresses (A and AAAA), and
        // the connection is terminated by the proxy, never passed on: the server's
        // certificate is nginx's self-signed one, which the system's trust store does
        // not hold, so every request gets the block page (theProxyInspectsRequestsOfInspectedNames
        // has servers the proxy can check).
        func inspect(ipv6: Bool?) throws -> (status: Int32, output: String) {
            let family = ipv6.map { $0 ? "-6 " : "-4 " } ?? ""
            return try network.inClient("curl -sS -m 5 -k \(family)https://watch.allowed.test/ 2>&1")
        }
        let inspected = try inspect(ipv6: nil)
        #expect(inspected.status == 0 && inspected.output.contains("certificate could not be checked"), "\(inspected.output)\n\(log())")
        #expect(try inSet(network.serverIPv4) && inSet(network.serverIPv6), "\(log())")
        #expect(try inspect(ipv6: true).output.contains("certificate could not be checked"))
        // Its leaf is the interception CA's, not the server's key.
        #expect(try curl("watch.allowed.test").output.contains("public key does not match pinned"), "\(log())")

        // (a, c) A name on the same address that is not inspected, and one on the
        // never-inspect list, whose certificate covers no inspected name, are spliced:
        // each gets the server's own certificate (the pinned key) and page, over IPv4
        // and (e) IPv6.
        for name in ["spliced.test", "bank.test"] {
            for ipv6 in [false, true] {
                let spliced = try curl(name, ipv6: ipv6, key: splicedPin)
                #expect(spliced.status == 0 && spliced.output == "ok \(name)\n", "\(name) over IPv\(ipv6 ? 6 : 4): \(spliced.output)\n\(log())")
            }
        }
        // The same on an address whose server shows them a certificate that covers an
        // inspected name (nginx's own, for allowed.test and the names below it): the
        // splice is refused, for a never-inspect name too (a TLS access_denied alert),
        // so no request for an inspected name passes inside it unread.
        for name in ["shared.test", "bank.allowed.test"] {
            for ipv6 in [false, true] {
                let refused = try curl(name, ipv6: ipv6)
                #expect(refused.status != 0 && refused.output.contains("access denied"), "\(name) over IPv\(ipv6 ? 6 : 4): \(refused.output)\n\(log())")
            }
        }
        func records() -> [[String: Any]] {
            let text = (try? String(contentsOfFile: network.folder + "/audit.jsonl", encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
        try network.waitFor("the records of the refused splices") { records().count { $0["category"] as? String == "certificate-covers" } >= 4 }
        let refusals = records().filter { $0["category"] as? String == "certificate-covers" }
        #expect(Set(refusals.compactMap { $0["host"] as? String }) == ["shared.test", "bank.allowed.test"], "\(refusals)")
        #expect(refusals.allSatisfy { $0["action"] as? String == "block" && $0["reason"] as? String == "inspect-block" && $0["rule"] as? String == "allowed.test" }, "\(refusals)")
        // A large download through the relay arrives whole (the relay's bounded buffers hold the server back, they lose nothing).
        let big = try shell("head -c 24000000 /dev/urandom > \(network.folder)/big.bin && sha256sum < \(network.folder)/big.bin")
        let download = try network.inClient("curl -sS -m 30 -k --pinnedpubkey sha256//\(splicedPin) https://spliced.test/big | sha256sum")
        #expect(big.status == 0 && download.output == big.output, "\(download.output) vs \(big.output)")
        let redirected = try network.inClient("iptables -t nat -L HALLPASS_NAT -v -n -x; ip6tables -t nat -L HALLPASS_NAT -v -n -x").output
        let counts = redirected.split(separator: "\n").filter { $0.contains("REDIRECT") }.compactMap {
            Int($0.split(separator: " ", omittingEmptySubsequences: true).first ?? "")
        }
        #expect(counts.count == 2 && counts.allSatisfy { $0 > 0 }, "the spliced connections went through the proxy (IPv4 and IPv6):\n\(redirected)")
        // The proxy's own connections to the servers are tracked in a zone of their own (KernelRules.ownZone,
        // 18512), apart from the people's redirected ones: a stale entry of one never hands its redirect, or
        // its lack of one, to the other (docs/inspection.md, "How a connection reaches the proxy").
        let tracked = try network.inClient("conntrack -L -p tcp 2>&1").output.split(separator: "\n")
        let own = tracked.filter { $0.contains("dport=443") && $0.contains("zone-orig=18512") }
        #expect(!own.isEmpty && own.allSatisfy { !$0.contains("src=127.0.0.1") && !$0.contains("src=::1") }, "\(tracked.joined(separator: "\n"))")
        #expect(
            tracked.contains {
                $0.contains("dport=443") && ($0.contains("src=127.0.0.1") || $0.contains("src=::1")) && $0.contains("sport=1023")
                    && !$0.contains("zone-orig")
            },
            "the redirected connections stay in the default zone:\n\(tracked.joined(separator: "\n"))")

        // (a) The server gets the client's ClientHello byte for byte. raw.test is never
        // inspected, and its server (the recorder) shows the proxy's check no certificate:
        // spliced all the same (a never-inspect name is never broken by a failed check),
        // the check's own ClientHello recorded first.
        for ipv6 in [false, true] {
            let lookup = try network.inClient("getent ahosts\(ipv6 ? "v6" : "v4") watch.raw.test")
            #expect(lookup.status == 0, "\(lookup.output)")
            #expect(try inSet(ipv6 ? raw6 : raw4), "\(log())")
            try? FileManager.default.removeItem(atPath: recorded)
            let sent = network.folder + "/sent.hex"
            let sender = try network.inClient("/usr/bin/python3 \(network.folder)/hello.py raw.test \(sent) \(ipv6 ? 6 : 4)")
            #expect(sender.status == 0, "\(sender.output)")
            let hello = try String(contentsOfFile: sent, encoding: .utf8)
            func got() -> [String] { ((try? String(contentsOfFile: recorded, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init) }
            try? network.waitFor("the recorder to get the ClientHello", attempts: 50) { got().contains(hello) }
            #expect(!hello.isEmpty && got().contains(hello), "IPv\(ipv6 ? 6 : 4): sent \(hello.prefix(80))..., the server got \(got().map { $0.prefix(80) })")
            #expect(got().count == 2, "the check's handshake, then the client's: \(got().count)")
        }

        // (b) UDP 443 to a selected address is dropped in the kernel: QUIC gets
        // nowhere (a browser falls back to TCP, which the proxy gets).
        if quic {
            for ipv6 in [false, true] {
                // A drop on the output hook fails the sender's send at once (EPERM):
                // the datagram never leaves, and no answer could come.
                let after = try network.quic("shared.test", ipv6: ipv6)
                #expect(
                    after.status == 2 || (after.status != 0 && after.output.contains("Operation not permitted")),
                    "QUIC to a selected IPv\(ipv6 ? 6 : 4) address: \(after.output)")
            }
        } else {
            // Without aioquic (scripts/test.sh installs it), a datagram that gets no answer and the rule's count.
            let probe = try network.inClient(
                "/usr/bin/python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'probe', ('\(network.serverIPv4)', 443))\" 2>&1")
            #expect(probe.output.contains("Operation not permitted"), "\(probe.output)")
        }
        let dropped = try network.inClient("iptables -L HALLPASS_OUT -v -n -x; ip6tables -L HALLPASS_OUT -v -n -x").output
        let drops = dropped.split(separator: "\n").filter { $0.contains("DROP") && $0.contains("hallpass-inspect") }.compactMap {
            Int($0.split(separator: " ", omittingEmptySubsequences: true).first ?? "")
        }
        #expect(drops.count == 2 && drops[0] > 0, "UDP 443 to the selected addresses was dropped by the kernel:\n\(dropped)")

        // (f) A stop removes every rule, chain and set of hallpass.
        #expect(kill(hallpass.pid, SIGTERM) == 0)
        #expect(hallpass.wait(atMost: 15) == 0, "\(log())")
        let left = try network.inClient("iptables-save; ip6tables-save; ipset list -n").output
        #expect(!left.contains("HALLPASS") && !left.contains("hallpass-inspect"), "\(left)")
        #expect(log().contains("hallpass-proxy stopped"), "\(log())")
    }

    /// A certificate authority of the test's own, standing in for the public
    /// ones of the system's trust store, and a server certificate from it for
    /// `names`; the key and certificate land in `folder` as `NAME-key.pem`, `NAME.pem`.
    static func makeTestCA(folder: String, server: String, names: [String]) throws {
        let sans = names.map { "DNS:" + $0 }.joined(separator: ",")
        let made = try shell(
            """
            set -e
            cd \(folder)
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=hallpass test root" \
              -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
              -keyout test-ca-key.pem -out test-ca.pem 2>&1
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=\(names[0])" -keyout \(server)-key.pem -out \(server).csr 2>&1
            printf 'subjectAltName=%s\\nextendedKeyUsage=serverAuth\\n' '\(sans)' > \(server).ext
            openssl x509 -req -in \(server).csr -CA test-ca.pem -CAkey test-ca-key.pem -CAcreateserial -days 2 -extfile \(server).ext -out \(server).pem 2>&1
            """)
        guard made.status == 0 else { throw TestNetworkError("openssl: \(made.output)") }
    }

    /// Termination (docs/inspection.md): the school's policy inspects youtube.com,
    /// www.google.com and badcert.test. Their connections reach the proxy, which
    /// shows a leaf from the interception CA filter-control made (curl and a real
    /// Chromium trust it, no certificate error), decides each request, sets
    /// YouTube-Restrict on what it forwards, checks the servers' certificates
    /// against `proxy.trustFile` (the test's CA standing in for the system's
    /// store), answers blocked requests (and a server whose certificate is from
    /// an unknown CA) with the block page, and records each decision with its URL
    /// and search term in the audit log.
    @Test func theProxyInspectsRequestsOfInspectedNames() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let folder = network.folder
        let other4 = "10.77.\(network.subnet).3"
        let added = try shell("ip -n \(network.server) addr add \(other4)/24 dev v\(network.id)s")
        #expect(added.status == 0, "\(added.output)")

        // The servers: www.youtube.com and www.google.com with a certificate from the test's CA
        // (logging each request with its YouTube-Restrict header), and badcert.test with one
        // from a CA nobody trusts.
        try Self.makeTestCA(folder: folder, server: "web", names: ["www.youtube.com", "www.google.com"])
        let selfSigned = try shell(
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=badcert.test -addext subjectAltName=DNS:badcert.test"
                + " -keyout \(folder)/bad-key.pem -out \(folder)/bad.pem 2>&1")
        #expect(selfSigned.status == 0, "\(selfSigned.output)")
        try """
            daemon off;
            master_process off;
            worker_processes 1;
            user root;
            pid \(folder)/nginx.pid;
            error_log \(folder)/nginx-error.log;
            events { worker_connections 256; }
            http {
              log_format inspected '$host $request_uri restrict=$http_youtube_restrict';
              access_log \(folder)/access.log inspected;
              client_body_temp_path \(folder)/body;
              proxy_temp_path \(folder)/proxy;
              fastcgi_temp_path \(folder)/fastcgi;
              uwsgi_temp_path \(folder)/uwsgi;
              scgi_temp_path \(folder)/scgi;
              default_type text/html;
              server {
                listen \(network.serverIPv4):443 ssl;
                listen [\(network.serverIPv6)]:443 ssl;
                server_name _;
                ssl_certificate \(folder)/web.pem;
                ssl_certificate_key \(folder)/web-key.pem;
                location /watch { return 200 "<!doctype html><title>watch</title><p id=video>video $arg_v on $host</p>\\n"; }
                location / { return 200 "<!doctype html><title>ok</title><p id=page>ok $host $request_uri</p>\\n"; }
              }
              server {
                listen \(other4):443 ssl;
                server_name _;
                ssl_certificate \(folder)/bad.pem;
                ssl_certificate_key \(folder)/bad-key.pem;
                location / { return 200 "reached badcert.test\\n"; }
              }
            }
            """.write(toFile: folder + "/nginx.conf", atomically: true, encoding: .utf8)
        try network.start(["ip", "netns", "exec", network.server, "nginx", "-c", folder + "/nginx.conf", "-p", folder], log: "nginx")
        try network.start(
            [
                "ip", "netns", "exec", network.server, "dnsmasq", "--keep-in-foreground", "--log-facility=-", "--no-resolv", "--no-hosts",
                "--bind-interfaces", "--listen-address=\(network.serverIPv4)",
                "--address=/youtube.com/\(network.serverIPv4)", "--address=/youtube.com/\(network.serverIPv6)",
                "--address=/google.com/\(network.serverIPv4)", "--address=/google.com/\(network.serverIPv6)",
                "--address=/badcert.test/\(other4)", "--address=/outside.test/\(other4)",
                "--pid-file=\(folder)/dnsmasq.pid", "--user=root", "--local-ttl=300",
            ], log: "dnsmasq")
        try network.waitFor("nginx and dnsmasq") {
            let listening = try shell("ip netns exec \(network.server) ss -lntu").output
            return listening.contains("\(network.serverIPv4):53") && listening.contains("\(other4):443") && listening.contains("\(network.serverIPv4):443")
        }
        try network.useServerDNS()

        // The bundle: UT1's layout, an `adult` category with a domain and a URL under www.google.com.
        let lists = folder + "/ut1"
        try FileManager.default.createDirectory(atPath: lists + "/adult", withIntermediateDirectories: true)
        try "adult.test\n".write(toFile: lists + "/adult/domains", atomically: true, encoding: .utf8)
        try "www.google.com/forbidden\n".write(toFile: lists + "/adult/urls", atomically: true, encoding: .utf8)
        try """
            policy:
              block: [adult]
              inspect:
                hosts: [youtube.com, "=www.google.com", "=badcert.test"]
                youtube:
                  allowVideos: [ALLOWEDvid1]
                  blockVideos: [BLOCKEDvid1]
                searchTerms: capture
                headers:
                  youtubeRestrict: strict
            """.write(toFile: folder + "/policy.yaml", atomically: true, encoding: .utf8)
        let key = folder + "/signing.pem"
        let keygen = try shell("\(TestNetwork.binaries)/filterctl bundle keygen --out \(key)")
        #expect(keygen.status == 0, "\(keygen.output)")
        let build = try shell(
            "\(TestNetwork.binaries)/filterctl bundle build --key \(key) --version 1 --expires 30d --out \(folder)/bundle --policy \(folder)/policy.yaml \(lists)")
        #expect(build.status == 0, "\(build.output)")

        let config = folder + "/hallpass.yaml"
        try """
            queue:
              user: nobody
              number: 6
              failMode: open
            proxy:
              user: nobody
              ca: \(folder)/inspect-ca
              trustFile: \(folder)/test-ca.pem
            rules:
              directory: \(folder)/lib
              source: file://\(folder)/bundle/
              trustedKeys: [ "\(keygen.output.trimmingCharacters(in: .whitespacesAndNewlines))" ]
            blockPage:
              organization: Test School
              requestAccess: { text: Ask for access, url: builtin }
            log:
              file: \(folder)/audit.jsonl
              journald: false
              allowed: all
            admin:
              socket: \(folder)/control.sock
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let hallpass = try network.start(
            ["ip", "netns", "exec", network.client, TestNetwork.binaries + "/filter-control", "--config", config, "--runtime-dir", folder + "/run"],
            log: "filter-control")
        func log() -> String { network.log("filter-control") }
        try network.waitFor("filter-data and the proxy with the interception CA") {
            log().contains("is filtering with rules version 1") && log().contains("interception CA") && log().contains("in use")
        }
        // filter-control made the CA: root's key, constrained to the inspected names.
        let caFolder = folder + "/inspect-ca"
        let keyMode = try FileManager.default.attributesOfItem(atPath: caFolder + "/ca-key.pem")[.posixPermissions] as? Int
        #expect(keyMode == 0o600, "the interception CA's key mode: \(String(keyMode ?? 0, radix: 8))")
        let text = try shell("openssl x509 -in \(caFolder)/ca.pem -noout -text").output
        #expect(text.contains("X509v3 Name Constraints: critical") && text.contains("DNS:youtube.com") && text.contains("DNS:www.google.com"), "\(text)")

        /// curl through the client's resolver, trusting only the interception CA; `status body`.
        func fetch(_ url: String, ipv6: Bool = false) throws -> (status: Int32, code: String, body: String) {
            let out = folder + "/body-\(UUID().uuidString)"
            let ran = try network.inClient(
                "curl -sS -m 10 \(ipv6 ? "-6" : "-4") --cacert \(caFolder)/ca.pem -o \(out) -w '%{http_code}' '\(url)' 2>&1")
            let body = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            return (ran.status, ran.output.trimmingCharacters(in: .whitespacesAndNewlines), body)
        }

        // An allowed video: the server's page, through the proxy (no certificate error: curl trusts only the interception CA).
        let allowed = try fetch("https://www.youtube.com/watch?v=ALLOWEDvid1")
        #expect(allowed.status == 0 && allowed.code == "200" && allowed.body.contains("video ALLOWEDvid1 on www.youtube.com"), "\(allowed)\n\(log())")
        // Over IPv6 too, on a kept-alive connection with two requests.
        let twice = try network.inClient(
            "curl -sS -m 10 -6 --cacert \(caFolder)/ca.pem 'https://www.youtube.com/watch?v=ALLOWEDvid1' 'https://www.youtube.com/' 2>&1")
        #expect(twice.status == 0 && twice.output.contains("video ALLOWEDvid1") && twice.output.contains("ok www.youtube.com /"), "\(twice.output)")
        // A blocked video: the block page, 403, in the school's name, saying the site is inspected.
        let blocked = try fetch("https://www.youtube.com/watch?v=BLOCKEDvid1")
        #expect(blocked.status == 0 && blocked.code == "403", "\(blocked)")
        #expect(blocked.body.contains("Test School") && blocked.body.contains("inspection-notice") && blocked.body.contains("youtube.blockVideos"), "\(blocked.body)")
        // The request-access link leads to the block page's own address, where the form is.
        #expect(blocked.body.contains("http://127.0.0.1/?url=https%3A%2F%2Fwww.youtube.com%2Fwatch%3Fv%3DBLOCKEDvid1"), "\(blocked.body)")
        // Searches, with their terms.
        let search = try fetch("https://www.youtube.com/results?search_query=cute+cats")
        #expect(search.code == "200", "\(search)")
        let google = try fetch("https://www.google.com/search?q=hello+world")
        #expect(google.code == "200" && google.body.contains("ok www.google.com /search?q=hello+world"), "\(google)")
        // The UT1 `urls` entry blocks its URL over HTTPS, and not its host.
        let forbidden = try fetch("https://www.google.com/forbidden/page")
        #expect(forbidden.code == "403" && forbidden.body.contains("adult"), "\(forbidden)")
        let home = try fetch("https://www.google.com/")
        #expect(home.code == "200", "\(home)")
        // A server whose certificate is from a CA the trust store does not have: the block page, never the page.
        let badcert = try fetch("https://badcert.test/")
        #expect(badcert.code == "403" && badcert.body.contains("certificate could not be checked") && !badcert.body.contains("reached"), "\(badcert)\n\(log())")

        // YouTube-Restrict reached the server on YouTube's requests, not on Google's.
        let access = (try? String(contentsOfFile: folder + "/access.log", encoding: .utf8)) ?? ""
        let youtubeLines = access.split(separator: "\n").filter { $0.hasPrefix("www.youtube.com ") }
        #expect(!youtubeLines.isEmpty && youtubeLines.allSatisfy { $0.hasSuffix("restrict=Strict") }, "\(access)")
        #expect(access.split(separator: "\n").filter { $0.hasPrefix("www.google.com ") }.allSatisfy { $0.hasSuffix("restrict=-") }, "\(access)")
        // The blocked requests never reached it.
        #expect(!access.contains("BLOCKEDvid1") && !access.contains("/forbidden"), "\(access)")

        // The audit records: each decision with its URL, the searches with their terms.
        func records() -> [[String: Any]] {
            let text = (try? String(contentsOfFile: folder + "/audit.jsonl", encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                .filter { $0["kind"] as? String == "https" }
        }
        try network.waitFor("the audit records of the inspected requests") {
            records().contains { ($0["url"] as? String)?.contains("forbidden") == true }
        }
        let all = records()
        func record(_ url: String) -> [String: Any]? { all.first { $0["url"] as? String == url } }
        #expect(record("https://www.youtube.com/results?search_query=cute+cats")?["searchTerm"] as? String == "cute cats", "\(all)")
        #expect(record("https://www.google.com/search?q=hello+world")?["searchTerm"] as? String == "hello world", "\(all)")
        let blockedRecord = record("https://www.youtube.com/watch?v=BLOCKEDvid1")
        #expect(blockedRecord?["action"] as? String == "block" && blockedRecord?["reason"] as? String == "inspect-block", "\(all)")
        #expect(record("https://www.youtube.com/watch?v=ALLOWEDvid1")?["action"] as? String == "allow", "\(all)")
        #expect(record("https://www.google.com/forbidden/page")?["category"] as? String == "adult", "\(all)")
        #expect(record("https://badcert.test/")?["category"] as? String == "certificate", "\(all)")

        // A real Chromium, given the CA by `filterctl browser-policies install` (its CACertificates
        // policy, mounted over /etc/chromium in a mount namespace of its own): the allowed video
        // loads, the blocked one shows the block page, with no certificate error. Firefox ESR below.
        let root = folder + "/root"
        // --root reads the CA where proxy.ca says, under the root (as on a machine, where the root is /).
        try FileManager.default.createDirectory(atPath: root + caFolder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: caFolder + "/ca.pem", toPath: root + caFolder + "/ca.pem")
        let installed = try shell("\(TestNetwork.binaries)/filterctl browser-policies install --config \(config) --policy \(folder)/policy.yaml --root \(root) 2>&1")
        #expect(installed.status == 0, "\(installed.output)")
        let managed = (try? String(contentsOfFile: root + "/etc/chromium/policies/managed/hallpass.json", encoding: .utf8)) ?? ""
        #expect(managed.contains("CACertificates"), "\(managed)")
        func chromium(_ url: String) throws -> String {
            let dom = folder + "/dom-\(UUID().uuidString).html"
            let command =
                "mount --bind \(root)/etc/chromium /etc/chromium && HOME=\(folder) chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage"
                + " --no-first-run --user-data-dir=\(folder)/chromium-profile --timeout=8000 --dump-dom '\(url)' > \(dom) 2>\(dom).log"
            let ran = try network.inClient("unshare --mount --propagation private sh -c \"\(command)\"")
            let html = (try? String(contentsOfFile: dom, encoding: .utf8)) ?? ""
            return html.isEmpty ? "exit \(ran.status): \(ran.output) " + ((try? String(contentsOfFile: dom + ".log", encoding: .utf8)) ?? "") : html
        }
        let page = try chromium("https://www.youtube.com/watch?v=ALLOWEDvid1")
        #expect(page.contains("video ALLOWEDvid1 on www.youtube.com"), "Chromium, the allowed video: \(page)\n\(installed.output)")
        let blockPage = try chromium("https://www.youtube.com/watch?v=BLOCKEDvid1")
        #expect(blockPage.contains("inspection-notice") && blockPage.contains("Test School"), "Chromium, the blocked video: \(blockPage)")

        // The name constraints hold: a leaf the interception CA's key signs for a name the
        // policy does not inspect (as a thief of the key would) is refused by Chromium and curl.
        let outside = try shell(
            """
            set -e
            cd \(folder)
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=outside.test -keyout outside-key.pem -out outside.csr 2>&1
            printf 'subjectAltName=DNS:outside.test\\nextendedKeyUsage=serverAuth\\n' > outside.ext
            openssl x509 -req -in outside.csr -CA \(caFolder)/ca.pem -CAkey \(caFolder)/ca-key.pem -CAcreateserial -days 1 -extfile outside.ext -out outside.pem 2>&1
            """)
        #expect(outside.status == 0, "\(outside.output)")
        try network.start(
            [
                "ip", "netns", "exec", network.server, "openssl", "s_server", "-accept", "\(other4):8443", "-cert", folder + "/outside.pem",
                "-key", folder + "/outside-key.pem", "-www", "-quiet",
            ], log: "outside")
        try network.waitFor("the server of outside.test") { try shell("ip netns exec \(network.server) ss -ltn").output.contains("\(other4):8443") }
        let outsideCurl = try network.inClient("curl -sS -m 5 --cacert \(caFolder)/ca.pem --resolve outside.test:8443:\(other4) https://outside.test:8443/ 2>&1")
        #expect(outsideCurl.status == 60, "curl: \(outsideCurl.output)")
        let outsidePage = try chromium("https://outside.test:8443/")
        #expect(outsidePage.contains("ERR_CERT_INVALID") && !outsidePage.contains("s_server"), "Chromium, a name outside the constraints: \(outsidePage.suffix(600))")


        // A real Firefox ESR (Debian's), given the CA by the same install (Certificates.Install in
        // /etc/firefox/policies/policies.json, which reaches it through an overlay over /etc in a
        // mount namespace of its own; the host's /etc is never changed): the same three pages.
        var firefoxRun = 0
        func firefox(_ url: String) throws -> String {
            firefoxRun += 1
            let upper = folder + "/firefox-etc-\(firefoxRun)", work = folder + "/firefox-work-\(firefoxRun)"
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: upper, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: root + "/etc/firefox", toPath: upper + "/firefox")
            // The overlay shows /etc itself, not the netns resolver file `ip netns exec` mounted over it.
            try FileManager.default.copyItem(atPath: "/etc/netns/\(network.client)/resolv.conf", toPath: upper + "/resolv.conf")
            let helper = TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/firefox_page.py"
            let command =
                "mount -t overlay overlay -o lowerdir=/etc,upperdir=\(upper),workdir=\(work) /etc && HOME=\(folder)"
                + " python3 \(helper) /usr/bin/firefox-esr \(folder)/firefox-profile-\(firefoxRun) '\(url)'"
            return try network.inClient("unshare --mount --propagation private sh -c \"\(command)\" 2>&1").output
        }
        let firefoxPage = try firefox("https://www.youtube.com/watch?v=ALLOWEDvid1")
        #expect(firefoxPage.contains("video ALLOWEDvid1 on www.youtube.com"), "Firefox, the allowed video: \(firefoxPage)")
        let firefoxBlocked = try firefox("https://www.youtube.com/watch?v=BLOCKEDvid1")
        #expect(firefoxBlocked.contains("inspection-notice") && firefoxBlocked.contains("Test School"), "Firefox, the blocked video: \(firefoxBlocked)")
        let firefoxOutside = try firefox("https://outside.test:8443/")
        #expect(firefoxOutside.contains("ERROR insecure certificate"), "Firefox, a name outside the constraints: \(firefoxOutside)")

        #expect(kill(hallpass.pid, SIGTERM) == 0)
        #expect(hallpass.wait(atMost: 15) == 0, "\(log())")
    }
}

extension FilterIntegrationTests {
    /// An inspected name sent to an address the kernel sets do not hold (curl
    /// `--resolve`, as a hard-coded address or an answer filter-data never saw):
    /// filter-data resets the connection and selects the address, so the retry
    /// reaches the proxy and is inspected; a name nobody inspects, on an
    /// address of its own, is not touched.
    @Test func anInspectedNameOutsideTheRedirectIsResetAndItsRetryInspected() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let folder = network.folder
        let other4 = "10.77.\(network.subnet).3"
        let added = try shell("ip -n \(network.server) addr add \(other4)/24 dev v\(network.id)s")
        #expect(added.status == 0, "\(added.output)")
        try Self.makeTestCA(folder: folder, server: "web", names: ["www.youtube.com"])
        let plain = try shell(
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=plain.test -addext subjectAltName=DNS:plain.test"
                + " -keyout \(folder)/plain-key.pem -out \(folder)/plain.pem 2>&1")
        #expect(plain.status == 0, "\(plain.output)")
        try """
            daemon off;
            master_process off;
            worker_processes 1;
            user root;
            pid \(folder)/nginx.pid;
            error_log \(folder)/nginx-error.log;
            events { worker_connections 256; }
            http {
              access_log off;
              client_body_temp_path \(folder)/body;
              proxy_temp_path \(folder)/proxy;
              fastcgi_temp_path \(folder)/fastcgi;
              uwsgi_temp_path \(folder)/uwsgi;
              scgi_temp_path \(folder)/scgi;
              server {
                listen \(network.serverIPv4):443 ssl;
                listen [\(network.serverIPv6)]:443 ssl;
                server_name _;
                ssl_certificate \(folder)/web.pem;
                ssl_certificate_key \(folder)/web-key.pem;
                location / { return 200 "ok $host $request_uri\\n"; }
              }
              server {
                listen \(other4):443 ssl;
                server_name _;
                ssl_certificate \(folder)/plain.pem;
                ssl_certificate_key \(folder)/plain-key.pem;
                location / { return 200 "plain $host\\n"; }
              }
            }
            """.write(toFile: folder + "/nginx.conf", atomically: true, encoding: .utf8)
        try network.start(["ip", "netns", "exec", network.server, "nginx", "-c", folder + "/nginx.conf", "-p", folder], log: "nginx")
        try network.waitFor("nginx") {
            let listening = try shell("ip netns exec \(network.server) ss -lnt").output
            return listening.contains("\(other4):443") && listening.contains("\(network.serverIPv4):443")
        }

        let lists = folder + "/ut1"
        try FileManager.default.createDirectory(atPath: lists + "/adult", withIntermediateDirectories: true)
        try "adult.test\n".write(toFile: lists + "/adult/domains", atomically: true, encoding: .utf8)
        try """
            policy:
              block: [adult]
              inspect:
                hosts: [youtube.com]
                youtube:
                  blockVideos: [BLOCKEDvid1]
            """.write(toFile: folder + "/policy.yaml", atomically: true, encoding: .utf8)
        let key = folder + "/signing.pem"
        let keygen = try shell("\(TestNetwork.binaries)/filterctl bundle keygen --out \(key)")
        #expect(keygen.status == 0, "\(keygen.output)")
        let build = try shell(
            "\(TestNetwork.binaries)/filterctl bundle build --key \(key) --version 1 --expires 30d --out \(folder)/bundle --policy \(folder)/policy.yaml \(lists)")
        #expect(build.status == 0, "\(build.output)")
        let config = folder + "/hallpass.yaml"
        try """
            queue:
              user: nobody
              number: 8
              failMode: open
            proxy:
              user: nobody
              ca: \(folder)/inspect-ca
              trustFile: \(folder)/test-ca.pem
            rules:
              directory: \(folder)/lib
              source: file://\(folder)/bundle/
              trustedKeys: [ "\(keygen.output.trimmingCharacters(in: .whitespacesAndNewlines))" ]
            log:
              file: \(folder)/audit.jsonl
              journald: false
              allowed: all
            admin:
              socket: \(folder)/control.sock
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let hallpass = try network.start(
            ["ip", "netns", "exec", network.client, TestNetwork.binaries + "/filter-control", "--config", config, "--runtime-dir", folder + "/run"],
            log: "filter-control")
        func log() -> String { network.log("filter-control") }
        try network.waitFor("filter-data and the proxy with the interception CA") {
            log().contains("is filtering with rules version 1") && log().contains("interception CA") && log().contains("in use")
        }
        let caFolder = folder + "/inspect-ca"
        func inSet(_ address: String) throws -> Bool {
            try network.inClient("ipset test \(address.contains(":") ? "hallpass-inspect6" : "hallpass-inspect4") \(address) 2>/dev/null").status == 0
        }
        /// curl to `name` at `address` (no lookup), trusting only the interception CA; `-w` writes the status code last.
        func fetch(_ name: String, at address: String, path: String = "/") throws -> (status: Int32, output: String) {
            let bracketed = address.contains(":") ? "[\(address)]" : address
            return try network.inClient(
                "curl -sS -m 10 --cacert \(caFolder)/ca.pem --resolve \(name):443:\(bracketed) -w ' code=%{http_code}' 'https://\(name)\(path)' 2>&1")
        }

        for address in [network.serverIPv4, network.serverIPv6] {
            #expect(try !inSet(address), "nothing looked the name up: \(address) is not selected")
            // The first try goes straight to the server: filter-data reads the inspected name and resets it.
            let first = try fetch("www.youtube.com", at: address, path: "/watch?v=BLOCKEDvid1")
            #expect(first.status != 0 && first.output.contains("reset"), "\(address): \(first.output)\n\(log())")
            #expect(try inSet(address), "\(address) is selected by the reset connection\n\(log())")
            // The retry is redirected to the proxy and inspected: the blocked video gets the block page,
            // another page the server's answer, under the interception CA's leaf (curl trusts nothing else).
            let blocked = try fetch("www.youtube.com", at: address, path: "/watch?v=BLOCKEDvid1")
            #expect(blocked.status == 0 && blocked.output.hasSuffix("code=403"), "\(address): \(blocked.output)\n\(log())")
            let page = try fetch("www.youtube.com", at: address, path: "/feed")
            #expect(page.status == 0 && page.output == "ok www.youtube.com /feed\n code=200", "\(address): \(page.output)\n\(log())")
        }

        // A name nobody inspects, on an address no answer gave: judged by its name and passed, its address left alone.
        let other = try network.inClient("curl -sS -m 10 -k --resolve plain.test:443:\(other4) https://plain.test/ 2>&1")
        #expect(other.status == 0 && other.output == "plain plain.test\n", "\(other.output)\n\(log())")
        #expect(try !inSet(other4))

        // The records: the reset connections with their reason, the retries' requests as the proxy decided them.
        func records() -> [[String: Any]] {
            let text = (try? String(contentsOfFile: folder + "/audit.jsonl", encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
        try network.waitFor("the audit records") {
            records().filter { $0["kind"] as? String == "https" }.count >= 4
        }
        let all = records()
        let resets = all.filter { $0["category"] as? String == "outside-redirect" }
        #expect(resets.count == 2 && resets.allSatisfy { $0["action"] as? String == "block" && $0["reason"] as? String == "inspect-block" }, "\(all)")
        let blockedRequests = all.filter { $0["url"] as? String == "https://www.youtube.com/watch?v=BLOCKEDvid1" }
        #expect(blockedRequests.count == 2 && blockedRequests.allSatisfy { $0["category"] as? String == "youtube.blockVideos" }, "\(all)")

        #expect(kill(hallpass.pid, SIGTERM) == 0)
        #expect(hallpass.wait(atMost: 15) == 0, "\(log())")
    }
}
