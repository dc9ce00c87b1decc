import Foundation
import Glibc
import HallpassSystem
import Testing

@Suite struct BoundedFileTests {
    let folder: String

    init() throws {
        folder = NSTemporaryDirectory() + "hallpass-bounded-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    @Test func anEmptyFileIsEmptyAndAFileAtItsLimitIsWhole() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(FileManager.default.createFile(atPath: folder + "/empty", contents: Data()))
        #expect(try BoundedFile.read(folder + "/empty", limit: 16) == [])
        #expect(FileManager.default.createFile(atPath: folder + "/four", contents: Data("abcd".utf8)))
        #expect(try BoundedFile.read(folder + "/four", limit: 4) == Array("abcd".utf8))
        #expect(throws: BoundedFile.Failure.tooLarge) { try BoundedFile.read(folder + "/four", limit: 3) }
        #expect(throws: BoundedFile.Failure.missing) { try BoundedFile.read(folder + "/none", limit: 3) }
        #expect(throws: BoundedFile.Failure.notRegular) { try BoundedFile.read(folder, limit: 3) }
        // A FIFO is refused at once, not waited on until something writes to it.
        #expect(mkfifo(folder + "/fifo", 0o600) == 0)
        #expect(throws: BoundedFile.Failure.notRegular) { try BoundedFile.read(folder + "/fifo", limit: 3, followingLinks: true) }
    }

    @Test func aSymbolicLinkIsReadOnlyWhenAsked() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(FileManager.default.createFile(atPath: folder + "/target", contents: Data("nameserver 192.0.2.1\n".utf8)))
        try FileManager.default.createSymbolicLink(atPath: folder + "/link", withDestinationPath: folder + "/target")
        #expect(throws: BoundedFile.Failure.symbolicLink) { try BoundedFile.read(folder + "/link", limit: 1024) }
        #expect(try BoundedFile.read(folder + "/link", limit: 1024, followingLinks: true) == Array("nameserver 192.0.2.1\n".utf8))
    }

    /// A /proc file says its size is 0; it is read to its end, well past the first page.
    @Test func aProcFileIsReadToItsEnd() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let maps = try BoundedFile.read("/proc/self/smaps", limit: 64 << 20)
        let text = String(decoding: maps, as: UTF8.self)
        #expect(maps.count > 8192)
        #expect(text.hasSuffix("\n"))
        #expect(text.contains("[stack]"))
    }
}
