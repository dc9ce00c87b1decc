import FilterControl
import Foundation
import Testing

/// hallpass filtering real traffic: filter-control and filter-data on the
/// kernel's queue in a client namespace, nginx in a server namespace.
@Suite(.serialized) struct FilterIntegrationTests {
    /// Compiles a store that blocks blocked.test (category demo) and writes a
    /// config; `policy` adds lines to its `policy:` section.
    func prepare(_ network: TestNetwork, failMode: String = "open", policy: [String] = []) throws -> (config: String, store: String) {
        try "blocked.test\n".write(toFile: network.folder + "/demo.txt", atomically: true, encoding: .utf8)
        let store = network.folder + "/rules.hpstore"
        let compile = try shell("\(TestNetwork.binaries)/filterctl compile --quiet --out \(store) \(network.folder)/demo.txt")
        #expect(compile.status == 0, "\(compile.output)")
        let config = network.folder + "/hallpass.yaml"
        try """
            queue:
              # The build folder has no _hallpass (the package's user for filter-data).
              user: nobody
              number: 3
              failMode: \(failMode)
            rules:
              directory: \(network.folder)/lib
            policy:
              block: [ demo ]
              unknown: allow
            \(policy.map { "  " + $0 + "\n" }.joined())log:
              file: \(network.folder)/audit.jsonl
              journald: false
            admin:
              socket: \(network.folder)/control.sock
            """.write(toFile: config, atomically: true, encoding: .utf8)
        return (config, store)
    }

    /// `wrapper` runs filter-control (e.g. setpriv with fewer capabilities).
    func startHallpass(_ network: TestNetwork, config: String, store: String, wrapper: [String] = []) throws -> ChildProcess {
        let process = try network.start(
            ["ip", "netns", "exec", network.client] + wrapper + [
                TestNetwork.binaries + "/filter-control", "--config", config, "--store", store,
                "--runtime-dir", network.folder + "/run",
            ], log: "filter-control")
        try network.waitFor("filter-data to bind queue 3") {
            let queues = try network.inClient("cat /proc/net/netfilter/nfnetlink_queue").output
            return queues.split(separator: "\n").contains { $0.split(separator: " ", omittingEmptySubsequences: true).first == "3" }
        }
        return process
    }

    @Test func blockedNamesFailFastAndAllowedNamesWork() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (config, store) = try prepare(network)
        _ = try startHallpass(network, config: config, store: store)

        for ipv6 in [false, true] {
            let family = ipv6 ? "IPv6" : "IPv4"
            for scheme in ["http", "https"] {
                let allowed = try network.curl(scheme, "allowed.test", ipv6: ipv6)
                #expect(allowed.status == 0, "\(scheme) allowed.test over \(family): \(allowed.output)\n\(network.log("filter-control"))")
                #expect(allowed.output == "ok allowed.test\n")
                let blocked = try network.curl(scheme, "blocked.test", ipv6: ipv6)
                // A reset (56, or 35 during the TLS handshake), never a timeout (28).
                #expect([35, 56].contains(blocked.status), "\(scheme) blocked.test over \(family): exit \(blocked.status) \(blocked.output)")
                let sub = try network.curl(scheme, "www.blocked.test", ipv6: ipv6)
                #expect([35, 56].contains(sub.status), "subdomain over \(family): exit \(sub.status)")
            }
        }

        // A new connection from the local port of a blocked one, to the same server,
        // is judged on its own name: the kernel keeps the old connection's entry with
        // its decision (the reset came from the server's side), and without the
        // reopened-SYN rule the new connection was refused before filter-data saw it.
        for (offset, scheme) in ["http", "https"].enumerated() {
            let port = UInt16(45_123 + offset)
            let blocked = try network.curl(scheme, "blocked.test", localPort: port)
            #expect([35, 56].contains(blocked.status), "\(scheme) blocked.test from port \(port): exit \(blocked.status) \(blocked.output)")
            let allowed = try network.curl(scheme, "allowed.test", localPort: port)
            #expect(allowed.status == 0 && allowed.output == "ok allowed.test\n", "\(scheme) allowed.test from the same port: exit \(allowed.status) \(allowed.output)")
        }
        // Those SYNs came to filter-data marked as reopened (counted at the next health check).
        try network.waitFor("filter-data to count the connections on reused ports") {
            let status = try shell("\(TestNetwork.binaries)/filterctl status --socket \(network.folder)/control.sock")
            return status.output.contains("(2 on reused ports)")
        }

        // The other way round, as a program that wants past the filter does it: an allowed
        // connection ended with a reset (SO_LINGER 0: the port is free at once, and
        // conntrack starts a fresh entry for the next SYN, which is then not queued),
        // then at once a new connection from the same port to the same server that
        // names a blocked site. It must not get the allowed connection's decision.
        let client = """
            import socket, struct, sys, time
            def get(host):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
                s.bind(('', 45200))
                s.settimeout(5)
                try:
                    s.connect((sys.argv[1], 80))
                    s.sendall(('GET / HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n' % host).encode())
                    answer = s.recv(4096).decode(errors='replace').split('\\r\\n\\r\\n')[-1].strip()
                except OSError as error:
                    answer = 'error %s' % error.errno
                s.close()
                return answer or 'closed'
            print(get('allowed.test'))
            # A server on the Internet is milliseconds away: the new connection's request
            # cannot come sooner than that after the old one's decision.
            time.sleep(0.05)
            print(get('blocked.test'))
            """
        try client.write(toFile: network.folder + "/reuse.py", atomically: true, encoding: .utf8)
        let reuse = try network.inClient("python3 \(network.folder)/reuse.py \(network.serverIPv4)")
        let answers = reuse.output.split(separator: "\n").map(String.init)
        #expect(answers.first == "ok allowed.test", "\(reuse.output)")
        // Refused with a reset when its request is judged (ECONNRESET), as any blocked name.
        #expect(answers.count == 2 && ["error 104", "closed"].contains(answers[1]), "blocked.test from the allowed connection's port: \(reuse.output)")

        // The running filter-data is sandboxed: unprivileged, no_new_privs, seccomp, only CAP_NET_ADMIN.
        let pid = try #require(network.processIDs(runningExecutable: "filter-data").first, "no filter-data process")
        let processStatus = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let fields = Dictionary(
            processStatus.split(separator: "\n").compactMap { line -> (String, String)? in
                let parts = line.split(separator: ":", maxSplits: 1)
                return parts.count == 2 ? (String(parts[0]), parts[1].trimmingCharacters(in: .whitespaces)) : nil
            }, uniquingKeysWith: { first, _ in first })
        #expect(fields["Uid"]?.split(whereSeparator: \.isWhitespace).allSatisfy { $0 == "65534" } == true, "\(fields["Uid"] ?? "?")")
        #expect(fields["Gid"]?.split(whereSeparator: \.isWhitespace).allSatisfy { $0 == "65534" } == true)
        #expect(fields["NoNewPrivs"] == "1")
        #expect(fields["Seccomp"] == "2")
        #expect(fields["CapEff"] == "0000000000001000", "only CAP_NET_ADMIN")
        #expect(fields["CapPrm"] == "0000000000001000")

        // Still filtering under load, sandboxed: many new flows, each with its own name.
        let load = try network.inClient(
            "for i in $(seq 1 200); do curl -s -o /dev/null -w '%{http_code}\\n' -m 5 --resolve h$i.allowed.test:80:\(network.serverIPv4) http://h$i.allowed.test/; done | sort | uniq -c")
        #expect(load.output.trimmingCharacters(in: .whitespacesAndNewlines) == "200 200", "\(load.output)")
        let blockedAfterLoad = try network.curl("https", "blocked.test")
        #expect([35, 56].contains(blockedAfterLoad.status))

        // Packets conntrack does not track (or found invalid) have no connection to
        // carry a decision: judged once, they go on or are refused, never queued again
        // (they went round between the kernel and filter-data for as long as they lived).
        _ = try network.inClient("iptables -t raw -I OUTPUT -p tcp --dport 80 -j CT --notrack")
        let untrackedAllowed = try network.curl("http", "allowed.test")
        #expect(untrackedAllowed.status == 0 && untrackedAllowed.output == "ok allowed.test\n", "untracked allowed.test: exit \(untrackedAllowed.status) \(untrackedAllowed.output)")
        let untrackedBlocked = try network.curl("http", "blocked.test")
        #expect([35, 56].contains(untrackedBlocked.status), "untracked blocked.test: exit \(untrackedBlocked.status) \(untrackedBlocked.output)")
        _ = try network.inClient("iptables -t raw -D OUTPUT -p tcp --dport 80 -j CT --notrack")
    }

    @Test func quicIsJudgedByItsInitialServerName() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()  // makes the certificate
        try network.startQUICServer()
        let (config, store) = try prepare(network)
        _ = try startHallpass(network, config: config, store: store)
        for ipv6 in [false, true] {
            for version in [1, 2] {
                let allowed = try network.quic("allowed.test", ipv6: ipv6, version: version)
                #expect(allowed.status == 0 && allowed.output == "ok allowed.test\n", "QUIC v\(version) ipv6=\(ipv6): \(allowed.output)\n\(network.log("quic-server"))")
                // Refused at once by the kernel rule (ICMP unreachable), not left to time out.
                let blocked = try network.quic("www.blocked.test", ipv6: ipv6, version: version)
                #expect(blocked.status == 3, "QUIC v\(version) ipv6=\(ipv6) blocked: exit \(blocked.status) \(blocked.output)")
            }
        }
        // A new QUIC connection from the port of a decided one (conntrack keeps the UDP
        // entry and its decision for minutes) is judged on its own Initial: allowed then
        // blocked, blocked then allowed, and after a datagram that shows no name (which
        // noName: allow lets through) a blocked name is still refused.
        for ipv6 in [false, true] {
            let port = ipv6 ? 47_101 : 47_001
            #expect(try network.quic("allowed.test", ipv6: ipv6, localPort: port).status == 0)
            let after = try network.quic("www.blocked.test", ipv6: ipv6, localPort: port)
            #expect(after.status == 3, "ipv6=\(ipv6): blocked after allowed on port \(port): exit \(after.status) \(after.output)")
            let back = try network.quic("allowed.test", ipv6: ipv6, localPort: port)
            #expect(back.status == 0 && back.output == "ok allowed.test\n", "ipv6=\(ipv6): allowed after blocked: exit \(back.status) \(back.output)")
            let junk = try network.quic("www.blocked.test", ipv6: ipv6, localPort: port + 1, junkFirst: true)
            #expect(junk.status == 3, "ipv6=\(ipv6): blocked after a nameless datagram: exit \(junk.status) \(junk.output)")
        }
    }

    /// A real ClientHello (Python's ssl) padded past the 16 KiB peek bound by one
    /// 20 KB GREASE extension before its server name and sent in two records, as
    /// a student's own client can (nginx answers it): judged by its name. One
    /// that declares more than 64 KiB is never read: blocked as a way around the
    /// filter (`bypass.tunnels`), with the reason in the audit record.
    @Test func paddedClientHellosAreJudgedByTheirName() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (config, store) = try prepare(network)
        _ = try startHallpass(network, config: config, store: store)
        let script = TestNetwork.packageRoot + "/scripts/lib/padded-hello.py"
        func send(_ name: String, padding: String, ipv6: Bool = false) throws -> String {
            let address = ipv6 ? network.serverIPv6 : network.serverIPv4
            return try network.inClient("python3 \(script) \(address) 443 \(name) \(padding)").output.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        for ipv6 in [false, true] {
            #expect(try send("allowed.test", padding: "20000", ipv6: ipv6) == "serverhello", "ipv6=\(ipv6)\n\(network.log("filter-control"))")
            #expect(try send("www.blocked.test", padding: "20000", ipv6: ipv6) == "reset", "ipv6=\(ipv6)")
            // Unpadded, for comparison: the same answers.
            #expect(try send("allowed.test", padding: "0", ipv6: ipv6) == "serverhello")
            #expect(try send("www.blocked.test", padding: "0", ipv6: ipv6) == "reset")
        }
        // Extensions filled up to their 16-bit length: the message is longer than 64 KiB.
        let tooLarge = try send("allowed.test", padding: "max")
        #expect(tooLarge == "reset", "\(network.log("filter-control"))")
        try network.waitFor("the audit record of the hello too large to read") {
            let records = (try? String(contentsOfFile: network.folder + "/audit.jsonl", encoding: .utf8)) ?? ""
            return records.split(separator: "\n").contains {
                $0.contains("\"kind\":\"oversizedHello\"") && $0.contains("\"rule\":\"oversizedHello\"") && $0.contains("\"category\":\"tunnels\"")
            }
        }
    }

    @Test func dnsQueriesAreJudgedOneByOne() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startDNS()
        let (config, store) = try prepare(network)
        _ = try startHallpass(network, config: config, store: store)
        func dig(_ name: String, _ type: String = "A") throws -> (status: Int32, output: String) {
            let result = try network.inClient("dig +short +time=2 +tries=1 @\(network.serverIPv4) \(name) \(type)")
            return (result.status, result.output.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let allowed = try dig("www.allowed.test")
        #expect(allowed.status == 0 && allowed.output == network.serverIPv4, "\(allowed.output)")
        #expect(try dig("www.allowed.test", "AAAA").output == network.serverIPv6)
        // A blocked name resolves to the block page (policy.blockedDNS: rewrite, the default).
        let blocked = try dig("www.blocked.test")
        #expect(blocked.status == 0 && blocked.output == "127.0.0.1", "dig exit \(blocked.status): \(blocked.output)")
        #expect(try dig("www.blocked.test", "AAAA").output == "::1")
        // The rewritten answer lives 10 s at most (dnsmasq gives 300 s); others keep theirs.
        func ttl(_ name: String) throws -> String? {
            let answer = try network.inClient("dig +noall +answer +time=2 +tries=1 @\(network.serverIPv4) \(name) A")
            return answer.output.split(whereSeparator: \.isWhitespace).dropFirst().first.map(String.init)
        }
        #expect(try ttl("blocked.test") == "10")
        #expect(try ttl("allowed.test") == "300")
        // The same client socket flow may ask an allowed name next: judged again, not by the flow's past.
        #expect(try dig("allowed.test").output == network.serverIPv4)

        // One trip to user space per lookup: an allowed name's answer passes in
        // the kernel; a blocked name's answer comes up to be rewritten.
        func queued() throws -> Int {
            let table = try network.inClient("cat /proc/net/netfilter/nfnetlink_queue").output
            let fields = table.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true) }.first { $0.first == "3" }
            return Int(fields?[7] ?? "") ?? -1  // the id of the last packet queued
        }
        let beforeAllowed = try queued()
        for index in 0..<20 { #expect(try dig("n\(index).allowed.test").output == network.serverIPv4) }
        let afterAllowed = try queued()
        #expect(afterAllowed - beforeAllowed == 20, "20 allowed lookups should cost 20 queued packets: \(beforeAllowed) -> \(afterAllowed)\n\(network.log("filter-control"))")
        let beforeBlocked = try queued()
        #expect(try dig("n1.blocked.test").output == "127.0.0.1")
        #expect(try queued() - beforeBlocked == 2, "a blocked lookup: its query and its answer")
        // One socket asks a blocked name, then an allowed one: the second answer
        // comes up too (the connection is marked) and passes unchanged.
        let sameSocket = """
            import socket, struct, sys, time
            def query(name, id):
                labels = b"".join(bytes([len(l)]) + l.encode() for l in name.split("."))
                return struct.pack(">HHHHHH", id, 0x0100, 1, 0, 0, 0) + labels + b"\\0" + struct.pack(">HH", 1, 1)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(2)
            s.connect((sys.argv[1], 53))
            for id, name in enumerate(["www.blocked.test", "www.allowed.test"], 1):
                s.send(query(name, id))
                print(name, ".".join(str(b) for b in s.recv(512)[-4:]))
            """
        try sameSocket.write(toFile: network.folder + "/same-socket.py", atomically: true, encoding: .utf8)
        let answers = try network.inClient("python3 \(network.folder)/same-socket.py \(network.serverIPv4)")
        #expect(answers.output == "www.blocked.test 127.0.0.1\nwww.allowed.test \(network.serverIPv4)\n", "\(answers.status): \(answers.output)")

        // DNS over TCP: each query on a connection is judged, not only the first; one whose
        // answer would need a change (the canary: NXDOMAIN over UDP) resets the connection.
        let tcpQueries = """
            import socket, struct, sys
            def query(name, id):
                labels = b"".join(bytes([len(l)]) + l.encode() for l in name.split("."))
                message = struct.pack(">HHHHHH", id, 0x0100, 1, 0, 0, 0) + labels + b"\\0" + struct.pack(">HH", 1, 1)
                return struct.pack(">H", len(message)) + message
            s = socket.create_connection((sys.argv[1], 53), timeout=3)
            for id, name in enumerate(sys.argv[2:], 1):
                try:
                    s.sendall(query(name, id))
                    length = struct.unpack(">H", s.recv(2))[0]
                    answer = s.recv(length)
                    print(name, ".".join(str(b) for b in answer[-4:]))
                except (ConnectionResetError, struct.error, socket.timeout) as error:
                    print(name, "refused", type(error).__name__)
                    break
            """
        try tcpQueries.write(toFile: network.folder + "/tcp-queries.py", atomically: true, encoding: .utf8)
        let overTCP = try network.inClient("python3 \(network.folder)/tcp-queries.py \(network.serverIPv4) www.allowed.test use-application-dns.net www.allowed.test")
        #expect(overTCP.output == "www.allowed.test \(network.serverIPv4)\nuse-application-dns.net refused ConnectionResetError\n", "\(overTCP.status): \(overTCP.output)")
        let blockedOverTCP = try network.inClient("python3 \(network.folder)/tcp-queries.py \(network.serverIPv4) n2.allowed.test n2.blocked.test")
        #expect(blockedOverTCP.output == "n2.allowed.test \(network.serverIPv4)\nn2.blocked.test refused ConnectionResetError\n", "\(blockedOverTCP.status): \(blockedOverTCP.output)")

        // With policy.blockedDNS: drop, the query for a blocked name goes nowhere.
        try (String(contentsOfFile: config, encoding: .utf8).replacingOccurrences(of: "policy:\n", with: "policy:\n  blockedDNS: drop\n"))
            .write(toFile: config, atomically: true, encoding: .utf8)
        let reload = try shell("\(TestNetwork.binaries)/filterctl reload --socket \(network.folder)/control.sock")
        #expect(reload.status == 0, "\(reload.output)")
        try network.waitFor("the new policy in filter-data") { network.log("filter-control").contains("now uses rules version") }
        let dropped = try network.inClient("dig +short +time=1 +tries=1 @\(network.serverIPv4) www.blocked.test A")
        #expect(dropped.status == 9, "dig exit \(dropped.status): \(dropped.output)")
        #expect(try dig("allowed.test").output == network.serverIPv4)
    }

    /// Each operation the sandbox must refuse, tried by the real binary after it locked itself down.
    @Test func theSandboxRefusesNetworkExecPtraceAndWrites() throws {
        guard getuid() == 0 else { throw TestNetworkError("needs root") }
        let result = try shell("\(TestNetwork.binaries)/filter-data --sandbox-self-test")
        #expect(result.status == 0, "\(result.output)")
        let lines = result.output.split(separator: "\n").map(String.init)
        for name in ["socket(AF_INET)", "socket(AF_INET6)", "socket(AF_UNIX)", "connect", "bind", "open for writing", "openat for read-write", "execve", "ptrace", "fork"] {
            #expect(lines.contains { $0.hasPrefix(name + ": refused") }, "\(name): \(result.output)")
        }
        #expect(lines.contains("open for reading: allowed (as it must be)"))
    }

    @Test func stoppingRemovesTheKernelRules() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let (config, store) = try prepare(network)
        let hallpass = try startHallpass(network, config: config, store: store)
        #expect(try network.inClient("iptables -w -S HALLPASS_OUT").status == 0)
        #expect(try network.inClient("ip6tables -w -S HALLPASS_OUT").status == 0)
        #expect(hallpass.stop() == 0, "\(network.log("filter-control"))")
        // filter-data finished its batch and reported, rather than being killed.
        #expect(network.log("filter-control").contains("filter-data: stopped:"), "\(network.log("filter-control"))")
        #expect(try network.inClient("iptables -w -S HALLPASS_OUT").status != 0)
        #expect(try network.inClient("ip6tables -w -S OUTPUT").output.contains("HALLPASS") == false)
        // Every table's chains and jumps, the nat and raw tables' too.
        let left = try network.inClient("iptables-save; ip6tables-save").output
        #expect(!left.contains("HALLPASS"), "\(left)")
    }
}
