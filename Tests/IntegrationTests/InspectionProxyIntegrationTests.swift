import Foundation
import Testing

/// The inspection proxy's first part (docs/inspection.md): the addresses of
/// inspected names, from the DNS answers filter-data sees, go into the kernel
/// sets; TCP 443 to them reaches hallpass-proxy, which splices the names it
/// does not inspect byte for byte and refuses the inspected ones; UDP 443 to
/// them is dropped. The school's policy inspects allowed.test and the names
/// below it (less bank.allowed.test, never inspected) and watch.raw.test;
/// every name resolves, through the server's dnsmasq, to one of two server
/// addresses: shared.test shares nginx's with allowed.test.
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

    @Test func theProxySplicesWhatItDoesNotInspectAndRefusesWhatItWould() throws {
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
                    neverInspect: [bank.allowed.test]
                """)
        let config = network.folder + "/hallpass.yaml"
        try """
            queue:
              user: nobody
              number: 5
              failMode: open
            proxy:
              user: nobody
            rules:
              directory: \(network.folder)/lib
              source: file://\(network.folder)/bundle/
              trustedKeys: [ "\(keygen.output.trimmingCharacters(in: .whitespacesAndNewlines))" ]
            log:
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
        // Its sandbox refuses what it must (exec, fork, files written, AF_UNIX sockets, bind) and allows TCP.
        let probes = try shell("\(TestNetwork.binaries)/hallpass-proxy --sandbox-self-test 2>&1")
        #expect(probes.status == 0 && probes.output.contains("execve: refused") && probes.output.contains("socket(AF_INET): ALLOWED"), "\(probes.output)")

        func inSet(_ address: String) throws -> Bool {
            try network.inClient("ipset test \(address.contains(":") ? "hallpass-inspect6" : "hallpass-inspect4") \(address) 2>/dev/null").status == 0
        }
        let pin = try shell(
            "openssl x509 -in \(network.folder)/cert.pem -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64"
        ).output.trimmingCharacters(in: .whitespacesAndNewlines)
        /// curl through the client's resolver (`ipv6` nil: both families asked, as a browser does).
        func curl(_ name: String, ipv6: Bool? = false) throws -> (status: Int32, output: String) {
            let family = ipv6.map { $0 ? "-6 " : "-4 " } ?? ""
            return try network.inClient("curl -sS -m 5 -k \(family)--pinnedpubkey sha256//\(pin) https://\(name)/ 2>&1")
        }

        // Before any inspected name is looked up, nothing is selected, and QUIC reaches the server.
        #expect(try !inSet(network.serverIPv4))
        if quic {
            let before = try network.quic("shared.test")
            #expect(before.status == 0, "QUIC before the selection: \(before.output)")
        }

        // (d) An inspected name: its lookup selects its addresses (A and AAAA),
        // and the connection is refused by the proxy, never passed on.
        let inspected = try curl("watch.allowed.test", ipv6: nil)
        #expect(inspected.status != 0 && inspected.output.contains("alert access denied"), "\(inspected.output)\n\(log())")
        #expect(try inSet(network.serverIPv4) && inSet(network.serverIPv6), "\(log())")
        #expect(try curl("watch.allowed.test", ipv6: true).output.contains("alert access denied"))

        // (a, c) A name on the same address that is not inspected, and one on the
        // never-inspect list, are spliced: each gets the server's own certificate
        // (the pinned key) and page, over IPv4 and (e) IPv6.
        for name in ["shared.test", "bank.allowed.test"] {
            for ipv6 in [false, true] {
                let spliced = try curl(name, ipv6: ipv6)
                #expect(spliced.status == 0 && spliced.output == "ok \(name)\n", "\(name) over IPv\(ipv6 ? 6 : 4): \(spliced.output)\n\(log())")
            }
        }
        // A large download through the relay arrives whole (the relay's bounded buffers hold the server back, they lose nothing).
        let big = try shell("head -c 24000000 /dev/urandom > \(network.folder)/big.bin && sha256sum < \(network.folder)/big.bin")
        let download = try network.inClient("curl -sS -m 30 -k --pinnedpubkey sha256//\(pin) https://shared.test/big | sha256sum")
        #expect(big.status == 0 && download.output == big.output, "\(download.output) vs \(big.output)")
        let redirected = try network.inClient("iptables -t nat -L HALLPASS_NAT -v -n -x; ip6tables -t nat -L HALLPASS_NAT -v -n -x").output
        let counts = redirected.split(separator: "\n").filter { $0.contains("REDIRECT") }.compactMap {
            Int($0.split(separator: " ", omittingEmptySubsequences: true).first ?? "")
        }
        #expect(counts.count == 2 && counts.allSatisfy { $0 > 0 }, "the spliced connections went through the proxy (IPv4 and IPv6):\n\(redirected)")

        // (a) The server gets the client's ClientHello byte for byte.
        for ipv6 in [false, true] {
            let lookup = try network.inClient("getent ahosts\(ipv6 ? "v6" : "v4") watch.raw.test")
            #expect(lookup.status == 0, "\(lookup.output)")
            #expect(try inSet(ipv6 ? raw6 : raw4), "\(log())")
            try? FileManager.default.removeItem(atPath: recorded)
            let sent = network.folder + "/sent.hex"
            let sender = try network.inClient("/usr/bin/python3 \(network.folder)/hello.py raw.test \(sent) \(ipv6 ? 6 : 4)")
            #expect(sender.status == 0, "\(sender.output)")
            try network.waitFor("the recorder to get the ClientHello", attempts: 50) { FileManager.default.fileExists(atPath: recorded) }
            let hello = try String(contentsOfFile: sent, encoding: .utf8)
            let got = try String(contentsOfFile: recorded, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(!hello.isEmpty && got == hello, "IPv\(ipv6 ? 6 : 4): sent \(hello.prefix(80))..., the server got \(got.prefix(80))...")
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
}
