import FilterControl
import Foundation
import Testing

/// SafeSearch from the first second (issue 26): with `safeSearch: [ google ]`,
/// the first DNS answer for www.google.com after filter-control says it is
/// ready already points at the enforcement host, and TLS to it works. The
/// enforcement host is nginx on a second address of the server namespace,
/// which dnsmasq gives as forcesafesearch.google.com's; filter-control asks
/// that dnsmasq (the client's /etc/resolv.conf). Closed mode, where a lookup
/// sent before filter-data had the queue was lost and the next one came 30 s
/// later. When the host cannot be resolved, the answers carry the addresses
/// Google publishes for it, which the test reads in the answers and never
/// connects to. Part of the serialized suite.
extension FilterIntegrationTests {
    /// The enforcement host's addresses in the server namespace.
    func enforcementHost(_ network: TestNetwork) -> (ipv4: String, ipv6: String) {
        ("10.77.\(network.subnet).3", "fd77:\(network.subnet)::3")
    }

    /// dnsmasq on the server: www.google.com is the server's own address (the
    /// search without SafeSearch); forcesafesearch.google.com the enforcement
    /// host, or NXDOMAIN when `resolvable` is false. Logs its queries.
    func startSearchDNS(_ network: TestNetwork, resolvable: Bool, log: String = "dnsmasq") throws -> ChildProcess {
        let host = enforcementHost(network)
        let enforcement =
            resolvable
            ? ["--address=/forcesafesearch.google.com/\(host.ipv4)", "--address=/forcesafesearch.google.com/\(host.ipv6)"]
            : ["--address=/forcesafesearch.google.com/"]
        let process = try network.start(
            [
                "ip", "netns", "exec", network.server, "dnsmasq", "--keep-in-foreground", "--log-facility=-", "--log-queries", "--no-resolv",
                "--no-hosts", "--bind-interfaces", "--listen-address=\(network.serverIPv4)",
                "--address=/www.google.com/\(network.serverIPv4)", "--address=/www.google.com/\(network.serverIPv6)",
                "--pid-file=\(network.folder)/\(log).pid", "--user=root", "--local-ttl=300",
            ] + enforcement, log: log)
        try network.waitFor("dnsmasq to listen") {
            try shell("ip netns exec \(network.server) ss -lun | grep -q '\(network.serverIPv4):53 '").status == 0
        }
        return process
    }

    /// filter-control with `safeSearch: [ google ]` in closed mode; returns once its log says "ready".
    func startWithSafeSearch(_ network: TestNetwork) throws {
        let (config, store) = try prepare(network, failMode: "closed", policy: ["safeSearch: [ google ]"])
        try network.start(
            [
                "ip", "netns", "exec", network.client, TestNetwork.binaries + "/filter-control", "--config", config, "--store", store,
                "--runtime-dir", network.folder + "/run",
            ], log: "filter-control")
        try network.waitFor("filter-control to say it is ready") { network.log("filter-control").contains("ready: filter-data filters") }
    }

    /// The answer section of `dig` for www.google.com, asked from the client.
    func digGoogle(_ network: TestNetwork, _ type: String) throws -> String {
        try network.inClient("dig +noall +answer +time=3 +tries=1 @\(network.serverIPv4) www.google.com \(type)").output
    }

    @Test func safeSearchIsInForceFromTheMomentFilterControlSaysItIsReady() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let host = enforcementHost(network)
        let added = try shell(
            "ip -n \(network.server) addr add \(host.ipv4)/24 dev v\(network.id)s && ip -n \(network.server) addr add \(host.ipv6)/64 dev v\(network.id)s nodad")
        #expect(added.status == 0, "\(added.output)")
        // The enforcement host: nginx with a certificate of the test's own for Google's names.
        let certificate = try shell(
            """
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=www.google.com \
              -addext "subjectAltName=DNS:www.google.com,DNS:forcesafesearch.google.com" \
              -keyout \(network.folder)/google-key.pem -out \(network.folder)/google-cert.pem 2>&1
            """)
        #expect(certificate.status == 0, "\(certificate.output)")
        try """
            daemon off;
            master_process off;
            worker_processes 1;
            user root;
            pid \(network.folder)/enforcement.pid;
            error_log \(network.folder)/enforcement-error.log;
            events { worker_connections 64; }
            http {
              access_log off;
              client_body_temp_path \(network.folder)/e-body;
              proxy_temp_path \(network.folder)/e-proxy;
              fastcgi_temp_path \(network.folder)/e-fastcgi;
              uwsgi_temp_path \(network.folder)/e-uwsgi;
              scgi_temp_path \(network.folder)/e-scgi;
              server {
                listen \(host.ipv4):443 ssl;
                listen [\(host.ipv6)]:443 ssl;
                ssl_certificate \(network.folder)/google-cert.pem;
                ssl_certificate_key \(network.folder)/google-key.pem;
                location / { return 200 "SafeSearch enforcement host: $host\\n"; }
              }
            }
            """.write(toFile: network.folder + "/enforcement.conf", atomically: true, encoding: .utf8)
        try network.start(
            ["ip", "netns", "exec", network.server, "nginx", "-c", network.folder + "/enforcement.conf", "-p", network.folder], log: "enforcement")
        try network.waitFor("the enforcement host to listen") {
            try shell("ip netns exec \(network.server) ss -ltn | grep -q '\(host.ipv4):443 '").status == 0
        }
        _ = try startSearchDNS(network, resolvable: true)
        try network.useServerDNS()
        try startWithSafeSearch(network)

        // The first answers after "ready": a CNAME to the enforcement host and its address, both families.
        let a = try digGoogle(network, "A")
        #expect(a.contains("CNAME\tforcesafesearch.google.com.") && a.contains("A\t\(host.ipv4)"), "A: \(a)\n\(network.log("filter-control"))")
        #expect(!a.contains(network.serverIPv4), "the unrestricted search's address must not come through: \(a)")
        let aaaa = try digGoogle(network, "AAAA")
        #expect(aaaa.contains("CNAME\tforcesafesearch.google.com.") && aaaa.contains("AAAA\t\(host.ipv6)"), "AAAA: \(aaaa)")
        // TLS to it works: curl resolves www.google.com through the filter (the client's resolv.conf)
        // and checks the certificate.
        let search = try network.inClient("curl -sS -m 5 --cacert \(network.folder)/google-cert.pem https://www.google.com/")
        #expect(search.status == 0 && search.output == "SafeSearch enforcement host: www.google.com\n", "curl: exit \(search.status) \(search.output)")
        let log = network.log("filter-control")
        #expect(log.contains("SafeSearch: google -> forcesafesearch.google.com \(host.ipv4)"), "the ready line names where Google goes: \(log)")
        #expect(!log.contains("cannot resolve"), "\(log)")
    }

    @Test func anEnforcementHostThatCannotBeResolvedGetsThePublishedAddressesUntilItResolves() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        let host = enforcementHost(network)
        let unresolvable = try startSearchDNS(network, resolvable: false)
        try network.useServerDNS()
        try startWithSafeSearch(network)

        // Google's published addresses, read in the answers only (never connected to).
        let a = try digGoogle(network, "A")
        #expect(a.contains("CNAME\tforcesafesearch.google.com.") && a.contains("A\t216.239.38.120"), "A: \(a)\n\(network.log("filter-control"))")
        let aaaa = try digGoogle(network, "AAAA")
        #expect(aaaa.contains("AAAA\t2001:4860:4802:32::78"), "AAAA: \(aaaa)")
        // Asked again and again (1 s, 2 s, ...), said once.
        try network.waitFor("three lookups of the enforcement host") {
            network.log("dnsmasq").components(separatedBy: "query[A] forcesafesearch.google.com").count > 3
        }
        let said = network.log("filter-control").components(separatedBy: "cannot resolve forcesafesearch.google.com").count - 1
        #expect(said == 1, "the failure is logged once: \(network.log("filter-control"))")
        #expect(network.log("filter-control").contains("216.239.38.120 2001:4860:4802:32::78"), "the log names what is used meanwhile")

        // The host resolves: its addresses replace the published ones as soon as a lookup brings them.
        _ = unresolvable.stop()
        _ = try startSearchDNS(network, resolvable: true, log: "dnsmasq-resolvable")
        try network.waitFor("the enforcement host's own address in the answers", attempts: 600) {
            try digGoogle(network, "A").contains("A\t\(host.ipv4)")
        }
        let after = try digGoogle(network, "A")
        #expect(!after.contains("216.239.38.120"), "the published address is gone once resolved: \(after)")
        #expect(network.log("filter-control").contains("SafeSearch: forcesafesearch.google.com resolved (\(host.ipv4)"), "\(network.log("filter-control"))")
    }
}
