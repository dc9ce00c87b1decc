import Foundation
import Glibc
import HallpassSystem
import SystemPackage
import Testing

@Suite struct UnixSocketTests {
    @Test func aPairCarriesDatagramsBothWays() throws {
        let (left, right) = try UnixSocket.pair(.sequencedPacket)
        defer {
            left.closeQuietly()
            right.closeQuietly()
        }
        #expect(try left.send(Array("ping".utf8), flags: [.dontWait, .noSignal]) == 4)
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(try right.receive(into: &buffer, flags: .dontWait) == 4)
        #expect(Array(buffer[0..<4]) == Array("ping".utf8))
        // Nothing waiting: EAGAIN, not a wait.
        #expect(throws: Errno.resourceTemporarilyUnavailable) { try right.receive(into: &buffer, flags: .dontWait) }
        _ = try right.send(Array("pong!".utf8), flags: .noSignal)
        #expect(try Poll.wait(for: Int16(POLLIN), on: left, timeoutMilliseconds: 1000))
        #expect(try left.receive(into: &buffer, flags: []) == 5)
        // The peer's end closed: a read of 0, and a send fails without SIGPIPE.
        right.closeQuietly()
        #expect(try left.receive(into: &buffer, flags: []) == 0)
        #expect(throws: Errno.brokenPipe) { try left.send([1], flags: .noSignal) }
    }

    @Test func aStreamSocketAtAPathRoundTrips() throws {
        let folder = NSTemporaryDirectory() + "hallpass-socket-\(UUID().uuidString)"
        try FileSystem.makeDirectory(folder)
        defer { FileSystem.removeTree(folder) }
        let path = folder + "/server.sock"
        // No server yet: nobody answers.
        #expect(throws: Errno.noSuchFileOrDirectory) { try UnixSocket.connect(to: path) }
        let server = try UnixSocket.open(.stream)
        defer { server.closeQuietly() }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(server.rawValue, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(server.rawValue, 1) == 0)
        #expect(try FileSystem.status(path).type == .socket)

        let client = try UnixSocket.connect(to: path)
        defer { client.closeQuietly() }
        let accepted = FileDescriptor(rawValue: accept(server.rawValue, nil, nil))
        try #require(accepted.rawValue >= 0)
        defer { accepted.closeQuietly() }
        try client.setTimeouts(seconds: 5)
        let request = Array("{\"command\":\"status\"}\n".utf8)
        var offset = 0
        while offset < request.count { offset += try client.send(request, from: offset, flags: .noSignal) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = try accepted.readSome(into: &buffer)
        #expect(Array(buffer[0..<count]) == request)
        try accepted.write(contentsOf: Array("ok\n".utf8))
        try accepted.shutdownWrites()
        #expect(try client.readSome(into: &buffer) == 3)
        #expect(try client.readSome(into: &buffer) == 0)
    }

    @Test func aDatagramGoesToAPathAndToAnAbstractName() throws {
        let name = "@hallpass-test-\(UUID().uuidString.prefix(8))"
        let receiver = try UnixSocket.open(.datagram)
        defer { receiver.closeQuietly() }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(name.utf8)
        bytes[0] = 0
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(receiver.rawValue, $0, length) } }
        try #require(bound == 0)
        let sender = try UnixSocket.open(.datagram)
        defer { sender.closeQuietly() }
        #expect(try sender.send(Array("READY=1".utf8), toSocketAt: name, flags: .noSignal) == 7)
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(try receiver.receive(into: &buffer, flags: .dontWait) == 7)
        #expect(Array(buffer[0..<7]) == Array("READY=1".utf8))
        #expect(!UnixSocket.fits("/" + String(repeating: "a", count: 200)))
        #expect(throws: Errno.fileNameTooLong) { try sender.send([1], toSocketAt: "/" + String(repeating: "a", count: 200), flags: []) }
    }
}
