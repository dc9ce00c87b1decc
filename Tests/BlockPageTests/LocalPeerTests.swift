@testable import BlockPage
import Foundation
import Glibc
import Testing

/// The block page names the user of a browser's connection from the kernel's
/// socket tables; a lab machine has far more than a few dozen sockets open.
@Suite struct LocalPeerTests {
    @Test func everyConnectionsOwnerIsFoundNotOnlyThoseInTheTablesFirst4KB() throws {
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(server) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(server, $0, length) == 0 && getsockname(server, $0, &length) == 0 }
        }
        try #require(bound && listen(server, 256) == 0)
        let serverPort = Int(UInt16(bigEndian: address.sin_port))

        // 100 connections (and their 100 other ends) make /proc/net/tcp about 30 KB:
        // Foundation's reader saw its first 4 KB, some 26 sockets.
        var clients: [Int32] = []
        defer { clients.forEach { close($0) } }
        var clientPorts: [Int] = []
        for _ in 0..<100 {
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            clients.append(client)
            var local = sockaddr_in()
            var localLength = socklen_t(MemoryLayout<sockaddr_in>.size)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            try #require(connected)
            _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(client, $0, &localLength) } }
            clientPorts.append(Int(UInt16(bigEndian: local.sin_port)))
        }
        let me = LocalUserName.name(of: getuid())
        let found = clientPorts.filter { LocalPeer.userName(clientPort: $0, serverPort: serverPort) == me }
        #expect(found.count == clientPorts.count, "found the owner of \(found.count) of \(clientPorts.count) connections")
        #expect(LocalPeer.userName(clientPort: serverPort, serverPort: serverPort) == nil, "no connection from the server's own port")
    }
}
