import CHallpassSys
import FilterControl
import FilterData
import HallpassWire
import HallpassIPC
import Foundation
import Testing
import Synchronization
import VerdictCore

/// Runs `body` on a thread of its own inside the network namespace `name`
/// (setns affects only the calling thread), and returns its result.
func inNetworkNamespace<T: Sendable>(_ name: String, _ body: @escaping @Sendable () -> T) throws -> T {
    let descriptor = open("/run/netns/\(name)", O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { throw TestNetworkError("cannot open the namespace \(name)") }
    defer { close(descriptor) }
    let result = Mutex<T?>(nil)
    let entered = Mutex(false)
    let done = DispatchSemaphore(value: 0)
    let thread = Thread {
        if hp_enter_network_namespace(descriptor) == 0 {
            entered.withLock { $0 = true }
            let value = body()
            result.withLock { $0 = value }
        }
        done.signal()
    }
    thread.start()
    done.wait()
    guard entered.withLock({ $0 }) else { throw TestNetworkError("setns into \(name) failed") }
    return result.withLock { $0 }!
}

extension FilterIntegrationTests {
    /// A program holding a connection open (TCP and UDP, waiting to read) is
    /// told at once when the connection is cut, and its connection's mark says blocked.
    @Test func aCutConnectionIsResetAtOnceEvenWhenIdle() throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let holder = """
            import socket, sys
            kind = sys.argv[1]
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
            s.settimeout(30)
            s.connect((sys.argv[2], 80 if kind == "tcp" else 9999))
            if kind == "udp":
                s.send(b"hello")  # a UDP flow exists for conntrack once a datagram went out
            print(s.getsockname()[1], flush=True)
            try:
                data = s.recv(100)
                print("read", len(data), flush=True)
            except OSError as error:
                print("error", error.errno, flush=True)
            """
        try holder.write(toFile: network.folder + "/holder.py", atomically: true, encoding: .utf8)
        // A UDP peer that reads and never answers.
        try network.start(
            ["ip", "netns", "exec", network.server, "python3", "-c",
             "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('0.0.0.0', 9999))\nwhile True: s.recv(100)"],
            log: "udp-sink")
        try network.waitFor("the UDP sink") { try shell("ip netns exec \(network.server) ss -lun | grep -q ':9999'").status == 0 }
        // Connection tracking runs in a namespace once a rule needs it (hallpass's chains do).
        #expect(try network.inClient("iptables -A OUTPUT -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT").status == 0)
        for kind in ["tcp", "udp"] {
            let process = try network.start(
                ["ip", "netns", "exec", network.client, "python3", network.folder + "/holder.py", kind, network.serverIPv4], log: "holder-\(kind)")
            var port: UInt16 = 0
            try network.waitFor("the \(kind) holder to connect") {
                port = UInt16(network.log("holder-\(kind)").split(separator: "\n").first ?? "") ?? 0
                return port != 0
            }
            let connection = FlowKey(
                protocolNumber: kind == "tcp" ? 6 : 17, source: IPAddress("10.77.\(network.subnet).1")!, sourcePort: port,
                destination: IPAddress(network.serverIPv4)!, destinationPort: kind == "tcp" ? 80 : 9999)
            let outcome = try inNetworkNamespace(network.client) { ConnectionCutter().cut(connection) }
            #expect(outcome.socketDestroyed && outcome.errors.isEmpty, "\(kind): \(outcome)")
            #expect(outcome.marked, "\(kind): the connection is tracked, its mark is set")
            #expect(process.wait() == 0)
            // ECONNABORTED (103): the program learned at once, not after its 30 s timeout.
            #expect(network.log("holder-\(kind)").contains("error 103"), "\(kind): \(network.log("holder-\(kind)"))")
            // A connection that is gone already is no error.
            let again = try inNetworkNamespace(network.client) { ConnectionCutter().cut(connection) }
            #expect(!again.socketDestroyed && again.errors.isEmpty, "\(again)")
        }
    }
}
