import FilterControl
import Foundation
import HallpassSystem
import SharedStore
import Testing

struct RuleServerError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Runs a command line through /bin/sh and returns its status and output.
@discardableResult
func runShell(_ command: String, in folder: String) throws -> (status: Int32, output: String) {
    let log = folder + "/shell-\(UUID().uuidString.prefix(8)).log"
    defer { try? FileManager.default.removeItem(atPath: log) }
    let status = try ChildProcess(["/bin/sh", "-c", command], logPath: log).wait()
    return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
}

/// A real nginx on 127.0.0.1 serving a bundle folder over HTTPS, made by the
/// test in a temporary folder and stopped by its pid in ``stop()``:
///
/// - `goodPort`: a certificate for `localhost` and 127.0.0.1 from the test CA (`caFile`);
/// - `otherNamePort`: a certificate from the same CA for `other.example` only;
/// - `untrustedPort`: a certificate for `localhost` from a CA nobody trusts;
/// - `plainPort`: the same files over plain HTTP.
///
/// The bundle lives in `bundleFolder` (`https://localhost:goodPort/bundle/`);
/// `/broken/` answers 503. Every request is logged to `access.log` as
/// `PORT METHOD URI STATUS IF-NONE-MATCH`.
final class RuleServer {
    let folder: String
    private(set) var goodPort = 0
    private(set) var otherNamePort = 0
    private(set) var untrustedPort = 0
    private(set) var plainPort = 0
    private var nginx: ChildProcess?

    var bundleFolder: String { folder + "/www/bundle" }
    var caFile: String { folder + "/ca.pem" }
    var source: String { "https://localhost:\(goodPort)/bundle/" }

    init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-nginx-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: bundleFolder, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: folder + "/www/broken", withIntermediateDirectories: true)
        do {
            try makeCertificates()
            try start()
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    /// Stops nginx (by pid) and removes the folder; safe to call twice.
    func stop() {
        nginx?.stop()
        nginx = nil
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// The access log, one request a line.
    var requests: [String] {
        ((try? String(contentsOfFile: folder + "/access.log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// `sha256/BASE64` of a certificate's SubjectPublicKeyInfo, computed by openssl.
    func pin(ofCertificate name: String) throws -> String {
        let result = try runShell(
            "openssl x509 -in \(folder)/\(name).pem -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64",
            in: folder)
        guard result.status == 0 else { throw RuleServerError("openssl: \(result.output)") }
        return "sha256/" + result.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Sets a file's modification time, so nginx's ETag (time and size) changes with the content.
    func touch(_ name: String, secondsAhead: Int) throws {
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(Double(secondsAhead))], ofItemAtPath: bundleFolder + "/" + name)
    }

    private func makeCertificates() throws {
        let caConfig = """
            [req]
            distinguished_name = dn
            x509_extensions = ca
            prompt = no
            [dn]
            CN = hallpass test CA
            [ca]
            basicConstraints = critical, CA:TRUE
            keyUsage = critical, keyCertSign, cRLSign
            subjectKeyIdentifier = hash
            """
        try caConfig.write(toFile: folder + "/ca.cnf", atomically: true, encoding: .utf8)
        func leafExtensions(_ names: String) -> String {
            """
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = serverAuth
            subjectAltName = \(names)
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid
            """
        }
        try leafExtensions("DNS:localhost, IP:127.0.0.1").write(toFile: folder + "/localhost.ext", atomically: true, encoding: .utf8)
        try leafExtensions("DNS:other.example").write(toFile: folder + "/other.ext", atomically: true, encoding: .utf8)
        let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
        let script = """
            set -e
            cd \(folder)
            openssl req -x509 -config ca.cnf \(ec) -days 2 -keyout ca.key -out ca.pem
            openssl req -x509 -config ca.cnf \(ec) -days 2 -subj /CN=untrusted-ca -keyout rogue-ca.key -out rogue-ca.pem
            leaf() {
              openssl req -new \(ec) -subj "/CN=$1" -keyout "$1.key" -out "$1.csr"
              openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -set_serial "$4" -days 2 -extfile "$3.ext" -out "$1.pem"
            }
            leaf localhost ca localhost 1001
            leaf other ca other 1002
            leaf rogue rogue-ca localhost 1003
            """
        let result = try runShell(script, in: folder)
        guard result.status == 0 else { throw RuleServerError("openssl failed: \(result.output)") }
    }

    /// Four free ports on 127.0.0.1, held open together so they differ, then released for nginx.
    private static func freePorts(_ count: Int) throws -> [Int] {
        var sockets: [Int32] = []
        defer { sockets.forEach { close($0) } }
        var ports: [Int] = []
        for _ in 0..<count {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard descriptor >= 0 else { throw RuleServerError("socket: \(String(cString: strerror(errno)))") }
            sockets.append(descriptor)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                    bind(descriptor, generic, length) == 0 && getsockname(descriptor, generic, &length) == 0
                }
            }
            guard bound else { throw RuleServerError("bind: \(String(cString: strerror(errno)))") }
            ports.append(Int(UInt16(bigEndian: address.sin_port)))
        }
        return ports
    }

    /// Whether a socket listens on 127.0.0.1:`port`, read from /proc/net/tcp
    /// (for a server that must not see a probe connection).
    static func hasListener(_ port: Int) -> Bool {
        // Read to the end: Foundation's String(contentsOfFile:) stops after the
        // first 4 KB of a /proc table, and a busy machine's table is longer.
        let table = String(decoding: (try? BoundedFile.read("/proc/net/tcp", limit: 64 << 20)) ?? [], as: UTF8.self)
        let local = "0100007F:" + String(format: "%04X", port)
        return table.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ")
            return fields.count > 3 && fields[1] == local && fields[3] == "0A"
        }
    }

    /// A one-shot TLS server (Python's ssl module) on a free port with the
    /// `localhost` certificate, that reads a request's head, sends `response`
    /// and drops the connection without a TLS close: a download cut short.
    /// (`openssl s_server` sent the response as soon as the handshake ended,
    /// and a client that had not written its request yet took it for an
    /// answer to nothing.) Returns the process (stop it) and the port.
    func startCuttingServer(response: [UInt8]) throws -> (ChildProcess, Int) {
        try Data(response).write(to: URL(fileURLWithPath: folder + "/cut-response"))
        // Another test may take the port between the probe and the bind, and a
        // loaded machine may be slow to start openssl: try a few ports, wait long.
        var log = ""
        for _ in 0..<3 {
            let port = try RuleServer.freePorts(1)[0]
            let process = try ChildProcess(
                ["python3", "-c", Self.cuttingServer, folder + "/localhost.pem", folder + "/localhost.key", String(port), folder + "/cut-response"],
                logPath: folder + "/s_server.log")
            for _ in 0..<1500 {
                if RuleServer.hasListener(port) { return (process, port) }
                if !process.isRunning { break }
                usleep(10_000)
            }
            process.stop()
            log += (try? String(contentsOfFile: folder + "/s_server.log", encoding: .utf8)) ?? ""
        }
        throw RuleServerError("the cutting server did not start: " + log)
    }

    /// The cutting server: CERTIFICATE KEY PORT RESPONSE_FILE; one request answered, then it ends.
    static let cuttingServer = """
        import socket, ssl, sys
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[1], sys.argv[2])
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(sys.argv[3])))
        listener.listen(4)
        response = open(sys.argv[4], "rb").read()
        while True:
            connection, _ = listener.accept()
            try:
                tls = context.wrap_socket(connection, server_side=True)
                head = b""
                while b"\\r\\n\\r\\n" not in head:
                    data = tls.recv(4096)
                    if not data:
                        break
                    head += data
                if b"\\r\\n\\r\\n" in head:
                    tls.sendall(response)
                    tls.close()  # no close_notify: the body is cut short
                    break
            except (OSError, ssl.SSLError):
                pass
            finally:
                connection.close()
        """

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    static func isListening(_ port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    private func start() throws {
        var lastError = ""
        // Another test may take a port between our probe and nginx's bind: then try new ones.
        for _ in 0..<5 {
            let ports = try RuleServer.freePorts(4)
            (goodPort, otherNamePort, untrustedPort, plainPort) = (ports[0], ports[1], ports[2], ports[3])
            try configuration().write(toFile: folder + "/nginx.conf", atomically: true, encoding: .utf8)
            let process = try ChildProcess(
                ["nginx", "-p", folder, "-c", folder + "/nginx.conf", "-e", folder + "/error.log"], logPath: folder + "/nginx.out")
            nginx = process
            for _ in 0..<400 {
                if !process.isRunning { break }
                if ports.allSatisfy(RuleServer.isListening) { return }
                usleep(10_000)
            }
            process.stop()
            nginx = nil
            lastError = (try? String(contentsOfFile: folder + "/error.log", encoding: .utf8)) ?? ""
        }
        throw RuleServerError("nginx did not start: \(lastError.suffix(2000))")
    }

    private func configuration() -> String {
        func tls(_ port: Int, _ certificate: String) -> String {
            """
              server {
                listen 127.0.0.1:\(port) ssl;
                server_name localhost;
                ssl_protocols TLSv1.2 TLSv1.3;
                ssl_certificate \(folder)/\(certificate).pem;
                ssl_certificate_key \(folder)/\(certificate).key;
                root \(folder)/www;
                location /broken/ { return 503; }
              }
            """
        }
        return """
            daemon off;
            master_process off;
            worker_processes 1;
            pid \(folder)/nginx.pid;
            error_log \(folder)/error.log;
            events { worker_connections 64; }
            http {
              log_format brief '$server_port $request_method $uri $status $http_if_none_match';
              access_log \(folder)/access.log brief;
              client_body_temp_path \(folder)/body;
              proxy_temp_path \(folder)/proxy;
              fastcgi_temp_path \(folder)/fastcgi;
              uwsgi_temp_path \(folder)/uwsgi;
              scgi_temp_path \(folder)/scgi;
              default_type application/octet-stream;
            \(tls(goodPort, "localhost"))
            \(tls(otherNamePort, "other"))
            \(tls(untrustedPort, "rogue"))
              server {
                listen 127.0.0.1:\(plainPort);
                root \(folder)/www;
              }
            }
            """
    }
}
