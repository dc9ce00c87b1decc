import FilterControl
import Foundation
import Testing

/// Runs a shell command and returns its exit status and output (through a file).
@discardableResult
func shell(_ command: String) throws -> (status: Int32, output: String) {
    let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-shell-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: outputPath) }
    let status = try ChildProcess(["/bin/sh", "-c", command], logPath: outputPath).wait()
    return (status, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "")
}

/// Two network namespaces joined by a veth pair, made by the test and
/// removed by `tearDown`, also when the test fails:
///
/// - client `hp<id>c`: 10.77.x.1 and fd77:x::1, where hallpass runs;
/// - server `hp<id>s`: 10.77.x.2 and fd77:x::2, nginx with HTTP and HTTPS
///   for allowed.test and blocked.test (a self-signed certificate).
///
/// No traffic leaves the machine.
final class TestNetwork {
    let id: String
    let client: String
    let server: String
    let folder: String
    let subnet: Int
    private var processes: [ChildProcess] = []
    /// Lab machines beside `client` (`addClient`), removed with the rest.
    private var extraClients: [String] = []

    var serverIPv4: String { "10.77.\(subnet).2" }
    var serverIPv6: String { "fd77:\(subnet)::2" }

    /// The folder with the built products (filterctl, filter-control, filter-data).
    static var binaries: String {
        let executable = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
        var folder = executable.deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: folder.appendingPathComponent("filter-control").path), folder.path != "/" {
            folder = folder.deletingLastPathComponent()
        }
        return folder.path
    }

    init() throws {
        guard getuid() == 0 else {
            throw TestNetworkError("the integration tests need root (network namespaces, iptables, NFQUEUE); run scripts/test.sh as root")
        }
        subnet = Int.random(in: 1...250)
        id = String(ProcessInfo.processInfo.processIdentifier % 100_000) + String(subnet)
        client = "hp\(id)c"
        server = "hp\(id)s"
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-it-\(id)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let setup = """
            set -e
            ip netns add \(client)
            ip netns add \(server)
            ip link add v\(id)c type veth peer name v\(id)s
            ip link set v\(id)c netns \(client)
            ip link set v\(id)s netns \(server)
            ip -n \(client) link set lo up
            ip -n \(server) link set lo up
            ip -n \(client) addr add 10.77.\(subnet).1/24 dev v\(id)c
            ip -n \(server) addr add 10.77.\(subnet).2/24 dev v\(id)s
            ip -n \(client) addr add fd77:\(subnet)::1/64 dev v\(id)c nodad
            ip -n \(server) addr add fd77:\(subnet)::2/64 dev v\(id)s nodad
            ip -n \(client) link set v\(id)c up
            ip -n \(server) link set v\(id)s up
            """
        let result = try shell(setup)
        guard result.status == 0 else {
            tearDown()
            throw TestNetworkError("cannot build the test network: \(result.output)")
        }
    }

    /// Another lab machine: a namespace of its own with a veth pair to the
    /// server namespace (10.78.SUBNET.0/24 for the first, .79 for the next)
    /// and a route to the server's addresses, which it reaches as `client`
    /// does. Returns the namespace's name.
    func addClient() throws -> String {
        let index = extraClients.count + 1
        let name = "hp\(id)c\(index)"
        let net = 77 + index
        let setup = """
            set -e
            ip netns add \(name)
            ip link add x\(id)c\(index) type veth peer name x\(id)s\(index)
            ip link set x\(id)c\(index) netns \(name)
            ip link set x\(id)s\(index) netns \(server)
            ip -n \(name) link set lo up
            ip -n \(name) addr add 10.\(net).\(subnet).1/24 dev x\(id)c\(index)
            ip -n \(server) addr add 10.\(net).\(subnet).2/24 dev x\(id)s\(index)
            ip -n \(name) link set x\(id)c\(index) up
            ip -n \(server) link set x\(id)s\(index) up
            ip -n \(name) route add 10.77.\(subnet).0/24 via 10.\(net).\(subnet).2
            """
        extraClients.append(name)
        let result = try shell(setup)
        guard result.status == 0 else { throw TestNetworkError("cannot add a lab machine's namespace: \(result.output)") }
        return name
    }

    /// Starts nginx in the server namespace; each name answers `ok <name>`.
    /// Its certificate (`cert.pem`) covers allowed.test, blocked.test and the
    /// names below them; spliced.test and bank.test get one of their own
    /// (`spliced-cert.pem`), which covers only those two.
    func startNginx() throws {
        let certificate = try shell(
            """
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
              -subj /CN=allowed.test -addext "subjectAltName=DNS:allowed.test,DNS:*.allowed.test,DNS:blocked.test,DNS:*.blocked.test" \
              -keyout \(folder)/key.pem -out \(folder)/cert.pem 2>&1 && \
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
              -subj /CN=spliced.test -addext "subjectAltName=DNS:spliced.test,DNS:bank.test" \
              -keyout \(folder)/spliced-key.pem -out \(folder)/spliced-cert.pem 2>&1
            """)
        guard certificate.status == 0 else { throw TestNetworkError("openssl: \(certificate.output)") }
        let configuration = """
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
                listen \(serverIPv4):80;
                listen [\(serverIPv6)]:80;
                listen \(serverIPv4):443 ssl;
                listen [\(serverIPv6)]:443 ssl;
                server_name _;
                ssl_certificate \(folder)/cert.pem;
                ssl_certificate_key \(folder)/key.pem;
                location / { return 200 "ok $host\\n"; }
                location /big { alias \(folder)/big.bin; }
              }
              server {
                listen \(serverIPv4):443 ssl;
                listen [\(serverIPv6)]:443 ssl;
                server_name spliced.test bank.test;
                ssl_certificate \(folder)/spliced-cert.pem;
                ssl_certificate_key \(folder)/spliced-key.pem;
                location / { return 200 "ok $host\\n"; }
                location /big { alias \(folder)/big.bin; }
              }
            }
            """
        try configuration.write(toFile: folder + "/nginx.conf", atomically: true, encoding: .utf8)
        try start(["ip", "netns", "exec", server, "nginx", "-c", folder + "/nginx.conf", "-p", folder], log: "nginx")
        try waitFor("nginx to listen") { try shell("ip netns exec \(server) ss -ltn | grep -q ':443'").status == 0 }
    }

    /// The package root (for the helper scripts and the test virtualenv).
    static var packageRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// The Python with aioquic that scripts/test.sh prepares (or $HALLPASS_TEST_PYTHON).
    static var python: String {
        ProcessInfo.processInfo.environment["HALLPASS_TEST_PYTHON"] ?? packageRoot + "/.build/test-venv/bin/python"
    }

    /// A QUIC server (aioquic) on UDP 443 of both server addresses; answers `ok <name>`.
    func startQUICServer() throws {
        let script = TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/quic_server.py"
        try start(
            ["ip", "netns", "exec", server, TestNetwork.python, script, "--host", "::", "--cert", folder + "/cert.pem", "--key", folder + "/key.pem"],
            log: "quic-server")
        try waitFor("the QUIC server to listen") { try shell("ip netns exec \(server) ss -lun | grep -q ':443'").status == 0 }
    }

    /// QUIC from the client: exit 0 with the answer, 3 refused (ICMP), 2 no answer.
    /// One QUIC connection (Helpers/quic_client.py); `localPort` binds the client's
    /// port, `junkFirst` sends a datagram that is no QUIC from it first.
    func quic(_ name: String, ipv6: Bool = false, version: Int = 1, localPort: Int = 0, junkFirst: Bool = false) throws -> (status: Int32, output: String) {
        let script = TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/quic_client.py"
        var command = "\(TestNetwork.python) \(script) --address \(ipv6 ? serverIPv6 : serverIPv4) --name \(name) --version \(version)"
        if localPort != 0 { command += " --local-port \(localPort)" }
        if junkFirst { command += " --junk-first" }
        return try inClient(command)
    }

    /// dnsmasq on the server: every name under allowed.test and blocked.test resolves to the server.
    func startDNS() throws {
        try start(
            [
                // In the foreground but otherwise as a real server runs it: --no-daemon would serve
                // TCP in its main loop, so one connection refused by the filter (whose server side
                // waits for its timeout) would stop every other query.
                "ip", "netns", "exec", server, "dnsmasq", "--keep-in-foreground", "--log-facility=-", "--no-resolv", "--no-hosts", "--bind-interfaces",
                "--listen-address=\(serverIPv4)", "--address=/allowed.test/\(serverIPv4)", "--address=/blocked.test/\(serverIPv4)",
                "--address=/allowed.test/\(serverIPv6)", "--address=/blocked.test/\(serverIPv6)",
                "--pid-file=\(folder)/dnsmasq.pid", "--user=root", "--local-ttl=300",
            ], log: "dnsmasq")
        try waitFor("dnsmasq to listen") { try shell("ip netns exec \(server) ss -lun | grep -q '\(serverIPv4):53'").status == 0 }
    }

    /// Programs started in the client from now on resolve names with the
    /// server's dnsmasq: `ip netns exec` mounts /etc/netns/<client>/resolv.conf
    /// over /etc/resolv.conf. Removed by `tearDown`.
    func useServerDNS() throws {
        try FileManager.default.createDirectory(atPath: "/etc/netns/\(client)", withIntermediateDirectories: true)
        try "nameserver \(serverIPv4)\noptions timeout:2 attempts:1\n".write(
            toFile: "/etc/netns/\(client)/resolv.conf", atomically: true, encoding: .utf8)
    }

    /// Starts a process (no shell) and keeps it for `tearDown`; output goes to `<log>.log`.
    @discardableResult
    func start(_ arguments: [String], log: String) throws -> ChildProcess {
        let process = try ChildProcess(arguments, logPath: folder + "/\(log).log")
        processes.append(process)
        return process
    }

    /// Processes whose command line names `executable` and this test's folder.
    func processIDs(runningExecutable executable: String) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { entry -> Int32? in
            guard let pid = Int32(entry),
                let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline")
            else { return nil }
            let arguments = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            guard let first = arguments.first, first.hasSuffix("/" + executable),
                arguments.contains(where: { $0.hasPrefix(folder) })
            else { return nil }
            return pid
        }
    }

    func log(_ name: String) -> String { (try? String(contentsOfFile: folder + "/\(name).log", encoding: .utf8)) ?? "" }

    /// Runs a command in the client namespace.
    func inClient(_ command: String) throws -> (status: Int32, output: String) {
        try shell("ip netns exec \(client) sh -c '\(command.replacingOccurrences(of: "'", with: "'\\''"))'")
    }

    /// curl from the client to `name` at the server (no DNS: --resolve), returning
    /// curl's exit status and the body. Connection errors come back fast; a
    /// timeout (exit 28) would mean a hang. `person`: curl runs as them.
    func curl(
        _ scheme: String, _ name: String, ipv6: Bool = false, path: String = "/", as person: TestPerson? = nil, localPort: UInt16? = nil
    ) throws -> (status: Int32, output: String) {
        let address = ipv6 ? "[\(serverIPv6)]" : serverIPv4
        let port = scheme == "https" ? 443 : 80
        let bind = localPort.map { " --local-port \($0)" } ?? ""
        let command = "curl -sS -k -m 5\(bind) --resolve \(name):\(port):\(address) '\(scheme)://\(name)\(path)'"
        return try inClient(person.map { $0.running(command) } ?? command)
    }

    func waitFor(_ what: String, attempts: Int = 300, _ condition: () throws -> Bool) throws {
        for _ in 0..<attempts {
            if try condition() { return }
            usleep(100_000)
        }
        // filter-control's log says why, when it runs (CI shows only this message).
        let control = log("filter-control")
        throw TestNetworkError("timed out waiting for \(what)" + (control.isEmpty ? "" : "; filter-control's log ends:\n" + control.suffix(6000)))
    }

    /// Stops what the test started (by pid), removes kernel rules in the
    /// namespaces and the namespaces themselves.
    func tearDown() {
        for process in processes.reversed() { process.stop() }
        processes.removeAll()
        for name in extraClients { _ = try? shell("ip netns del \(name) 2>/dev/null") }
        _ = try? shell("ip netns del \(client) 2>/dev/null; ip netns del \(server) 2>/dev/null")
        try? FileManager.default.removeItem(atPath: "/etc/netns/\(client)")
        try? FileManager.default.removeItem(atPath: folder)
    }
}

struct TestNetworkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
