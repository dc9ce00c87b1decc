@testable import BlockPage
import Foundation
import Glibc
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

    private func endpoint(_ address: String, _ port: Int) -> LocalPeer.Endpoint {
        LocalPeer.Endpoint(address: IPAddress(address)!, port: port)
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
        let server4 = endpoint("127.0.0.1", serverPort)
        let found = clientPorts.filter { LocalPeer.userName(client: endpoint("127.0.0.2", $0), server: server4) == me }
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
        #expect(LocalPeer.userName(client: endpoint("127.0.0.2", clientPort), server: endpoint("127.0.0.1", serverPort)) == me)
        #expect(LocalPeer.userName(client: endpoint("127.0.0.3", clientPort), server: endpoint("127.0.0.1", serverPort)) == nil)
        #expect(LocalPeer.userName(client: endpoint("127.0.0.2", clientPort), server: endpoint("127.0.0.4", serverPort)) == nil)
        // An IPv4-mapped IPv6 address (a dual-stack listener's view of an IPv4 client) is the IPv4 address.
        #expect(endpoint("::ffff:127.0.0.2", clientPort) == endpoint("127.0.0.2", clientPort))
    }

    @Test func procFieldsReadAsTheKernelWritesThem() {
        // 127.0.0.1:8080 and ::1:443 as /proc/net/tcp and tcp6 print them on a little-endian machine.
        #expect(LocalPeer.Endpoint(procField: "0100007F:1F90") == endpoint("127.0.0.1", 8080))
        #expect(LocalPeer.Endpoint(procField: "00000000000000000000000001000000:01BB") == endpoint("::1", 443))
        #expect(LocalPeer.Endpoint(procField: "0100007F") == nil)
        #expect(LocalPeer.Endpoint(procField: "0100007:1F90") == nil)
    }
}
