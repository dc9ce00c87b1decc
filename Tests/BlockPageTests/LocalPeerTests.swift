@testable import BlockPage
import Foundation
import Glibc
import HallpassIPC
import Testing
import VerdictCore

/// The block page names the user of a browser's connection from the kernel's
/// socket tables; a lab machine has far more than a few dozen sockets open.
@Suite struct LocalPeerTests {
    /// A TCP socket bound to `address` (port chosen by the kernel), and its port.
    private func bound(_ socket: Int32, _ address: String) -> Int? {
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(address)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let done = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        return done ? Int(UInt16(bigEndian: local.sin_port)) : nil
    }

    private func connect(_ socket: Int32, to address: String, port: Int) -> Bool {
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_addr.s_addr = inet_addr(address)
        remote.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    private func connection(_ client: String, _ clientPort: Int, _ server: String, _ serverPort: Int) -> FlowKey {
        LocalPeer.connection(client: IPAddress(client)!, clientPort: UInt16(clientPort), server: IPAddress(server)!, serverPort: UInt16(serverPort))
    }

    @Test func everyConnectionsOwnerIsFoundNotOnlyThoseInTheTablesFirst4KB() throws {
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(server) }
        let serverPort = try #require(bound(server, "127.0.0.1"))
        try #require(listen(server, 256) == 0)

        // 100 connections (and their 100 other ends) make /proc/net/tcp about 30 KB:
        // Foundation's reader saw its first 4 KB, some 26 sockets.
        var clients: [Int32] = []
        defer { clients.forEach { close($0) } }
        var clientPorts: [Int] = []
        for _ in 0..<100 {
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            clients.append(client)
            clientPorts.append(try #require(bound(client, "127.0.0.2")))
            try #require(connect(client, to: "127.0.0.1", port: serverPort))
        }
        let me = LocalUserName.name(of: getuid())
        let found = clientPorts.filter { LocalPeer.userName(of: connection("127.0.0.2", $0, "127.0.0.1", serverPort)) == me }
        #expect(found.count == clientPorts.count, "found the owner of \(found.count) of \(clientPorts.count) connections")
    }

    /// The same ports from another address are another connection: a student
    /// binding the local port of someone else's connection is not that person.
    @Test func bothAddressesMustMatchNotOnlyThePorts() throws {
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(server) }
        let serverPort = try #require(bound(server, "127.0.0.1"))
        try #require(listen(server, 16) == 0)
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        let clientPort = try #require(bound(client, "127.0.0.2"))
        try #require(connect(client, to: "127.0.0.1", port: serverPort))

        let me = LocalUserName.name(of: getuid())
        #expect(LocalPeer.userName(of: connection("127.0.0.2", clientPort, "127.0.0.1", serverPort)) == me)
        #expect(LocalPeer.userName(of: connection("127.0.0.3", clientPort, "127.0.0.1", serverPort)) == nil)
        #expect(LocalPeer.userName(of: connection("127.0.0.2", clientPort, "127.0.0.4", serverPort)) == nil)
        // Both ports too: the server's port from another connection is not this one.
        #expect(LocalPeer.userName(of: connection("127.0.0.2", clientPort, "127.0.0.1", serverPort == 1 ? 2 : 1)) == nil)
        // An IPv4-mapped IPv6 address (a dual-stack listener's view of an IPv4 client) is the IPv4 address.
        #expect(connection("::ffff:127.0.0.2", clientPort, "::ffff:127.0.0.1", serverPort) == connection("127.0.0.2", clientPort, "127.0.0.1", serverPort))
        #expect(LocalPeer.userName(of: connection("::ffff:127.0.0.2", clientPort, "127.0.0.1", serverPort)) == me)
    }

    @Test func procFieldsReadAsTheKernelWritesThem() {
        // 127.0.0.1:8080 and ::1:443 as /proc/net/tcp and tcp6 print them on a little-endian machine.
        #expect(LocalPeer.connection(procLocal: "0100007F:1F90", procRemote: "0200007F:01BB") == connection("127.0.0.1", 8080, "127.0.0.2", 443))
        let loopback6 = "00000000000000000000000001000000"
        #expect(LocalPeer.connection(procLocal: "\(loopback6):01BB", procRemote: "\(loopback6):1F90") == connection("::1", 443, "::1", 8080))
        // An IPv4 client in the tcp6 table of a dual-stack socket: ::ffff:127.0.0.1.
        #expect(LocalPeer.connection(procLocal: "0000000000000000FFFF00000100007F:1F90", procRemote: "0100007F:01BB") == connection("127.0.0.1", 8080, "127.0.0.1", 443))
        #expect(LocalPeer.connection(procLocal: "0100007F", procRemote: "0100007F:01BB") == nil)
        #expect(LocalPeer.connection(procLocal: "0100007:1F90", procRemote: "0100007F:01BB") == nil)
        #expect(LocalPeer.connection(procLocal: "0100007F:1F90", procRemote: "0100007F:10000") == nil, "a port past 16 bits")
    }
}
