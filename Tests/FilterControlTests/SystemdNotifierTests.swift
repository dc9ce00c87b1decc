import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

@testable import FilterControl

/// systemd's notify protocol: one datagram to the socket `$NOTIFY_SOCKET`
/// names, here a real datagram socket the test binds (a path and an
/// abstract name), read back as systemd would. unsafe in this file: the
/// socket calls of the receiving end, each on a local within its size.
@Suite struct SystemdNotifierTests {
    /// Binds a unix datagram socket at `name` (`@` first: abstract) and
    /// returns the first datagram `send` makes it receive (nil: none within 5 s).
    func receive(at name: String, _ send: () throws -> Void) throws -> String? {
        var bytes = Array(name.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        try #require(bytes.count < MemoryLayout.size(ofValue: address.sun_path))
        unsafe withUnsafeMutableBytes(of: &address.sun_path) { buffer in unsafe buffer.copyBytes(from: bytes) }
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        let bound = unsafe withUnsafePointer(to: &address) {
            unsafe $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { unsafe bind(descriptor, $0, length) }
        }
        try #require(bound == 0, "bind \(name): errno \(errno)")
        try send()
        var ready = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        guard unsafe poll(&ready, 1, 5000) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = unsafe buffer.withUnsafeMutableBytes { unsafe recv(descriptor, $0.baseAddress, $0.count, 0) }
        return count < 0 ? nil : String(decoding: buffer.prefix(count), as: UTF8.self)
    }

    @Test func readyGoesInOneDatagramToThePathInTheVariable() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UInt32.random(in: 0...UInt32.max))").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let received = try receive(at: path) { try SystemdNotifier(socketPath: path).notify("READY=1\nSTATUS=filtering") }
        #expect(received == "READY=1\nSTATUS=filtering")
    }

    @Test func anAbstractNameStartsWithAnAt() throws {
        let name = "@hallpass-notify-\(UInt32.random(in: 0...UInt32.max))"
        let received = try receive(at: name) { try SystemdNotifier(socketPath: name).notify("READY=1") }
        #expect(received == "READY=1")
    }

    @Test func aNameThatIsNoSocketPathIsRefused() {
        #expect(throws: SystemdNotifier.Failure.self) { try SystemdNotifier(socketPath: "relative/notify").notify("READY=1") }
        #expect(throws: SystemdNotifier.Failure.self) { try SystemdNotifier(socketPath: "/" + String(repeating: "a", count: 200)).notify("READY=1") }
        // A path where nothing listens: the send fails and says so (filter-control logs it and runs on).
        #expect(throws: SystemdNotifier.Failure.self) { try SystemdNotifier(socketPath: "/nonexistent/hallpass-notify").notify("READY=1") }
    }

    @Test func theVariableIsTakenOutOfTheEnvironment() {
        setenv("NOTIFY_SOCKET", "@hallpass-test-notify", 1)
        let notifier = SystemdNotifier.fromEnvironment()
        #expect(notifier?.socketPath == "@hallpass-test-notify")
        #expect(ProcessInfo.processInfo.environment["NOTIFY_SOCKET"] == nil, "filter-data must not inherit it")
        #expect(SystemdNotifier.fromEnvironment() == nil)
    }
}
