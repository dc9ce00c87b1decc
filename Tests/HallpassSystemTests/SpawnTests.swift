import Foundation
import Glibc
import HallpassSystem
import SystemPackage
import Testing

@Suite struct SpawnTests {
    @Test func trueAndFalseEndWithTheirExitStatus() throws {
        let success = try ProcessID.spawn(executable: "/bin/true", arguments: [])
        #expect(success.reap(blocking: true) == 0)
        let failure = try ProcessID.spawn(executable: "false", arguments: [])
        #expect(failure.reap(blocking: true) == 1)
        // Reaped once: a second wait finds no child (ECHILD), which reads as gone.
        #expect(failure.reap(blocking: true) == 255)
    }

    @Test func aSignalEndsAChildWith128PlusTheSignal() throws {
        let child = try ProcessID.spawn(executable: "/bin/sleep", arguments: ["30"])
        #expect(child.reap(blocking: false) == nil)
        try child.send(SIGTERM)
        #expect(child.reap(blocking: true) == 128 + SIGTERM)
        #expect(throws: Errno.noSuchProcess) { try child.send(SIGTERM) }
    }

    @Test func anExecutableThatIsNotThereIsAnError() {
        #expect(throws: Errno.noSuchFileOrDirectory) { try ProcessID.spawn(executable: "/nonexistent/hallpass-tool", arguments: []) }
    }

    /// The child sees the descriptors it was given under their new numbers,
    /// its environment as asked, and nothing else of this process's.
    @Test func theChildHoldsWhatItWasGiven() throws {
        let (readEnd, writeEnd) = try FileDescriptor.pipe(options: .closeOnExec)
        defer { readEnd.closeQuietly() }
        // A descriptor that is not close-on-exec must still not reach the child.
        let stray = try FileDescriptor.pipe()
        defer {
            stray.readEnd.closeQuietly()
            stray.writeEnd.closeQuietly()
        }
        setenv("HALLPASS_SPAWN_TEST", "inherited", 1)
        defer { unsetenv("HALLPASS_SPAWN_TEST") }
        let script = "echo \"$HALLPASS_SPAWN_TEST/$EXTRA\"; ls /proc/self/fd | sort -n | tr '\\n' ' '"
        let child = try ProcessID.spawn(
            executable: "/bin/sh", arguments: ["-c", script], descriptors: [(writeEnd, .standardOutput)], environment: ["EXTRA": "set"])
        writeEnd.closeQuietly()
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while case let count = try readEnd.readSome(into: &buffer), count > 0 { output += buffer[0..<count] }
        #expect(child.reap(blocking: true) == 0)
        let lines = String(decoding: output, as: UTF8.self).split(separator: "\n")
        #expect(lines.first == "inherited/set")
        // 0, 1, 2, and the one ls opens to list them.
        #expect(lines.last?.split(separator: " ").count == 4)

        let (readAgain, writeAgain) = try FileDescriptor.pipe(options: .closeOnExec)
        defer { readAgain.closeQuietly() }
        let alone = try ProcessID.spawn(
            executable: "/bin/sh", arguments: ["-c", "echo \"[$HALLPASS_SPAWN_TEST]\""], descriptors: [(writeAgain, .standardOutput)],
            inheritEnvironment: false)
        writeAgain.closeQuietly()
        let count = try readAgain.readSome(into: &buffer)
        #expect(String(decoding: buffer[0..<count], as: UTF8.self) == "[]\n")
        #expect(alone.reap(blocking: true) == 0)
    }
}
