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

    /// The buffer is the file's size (at most 1 MiB), not the limit's: a file of several parts is still read whole.
    @Test func aFileOfSeveralPartsIsReadWholeAndALimitBelowItIsTooLarge() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let bytes = (0..<(5 << 19)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        #expect(FileManager.default.createFile(atPath: folder + "/large", contents: Data(bytes)))
        var parts: [Int] = []
        let size = try BoundedFile.stream(folder + "/large", limit: 64 << 20) { parts.append($0.count) }
        #expect(size == UInt64(bytes.count) && parts.allSatisfy { $0 <= 1 << 20 } && parts.count >= 3)
        #expect(try BoundedFile.read(folder + "/large", limit: UInt64(bytes.count)) == bytes)
        #expect(throws: BoundedFile.Failure.tooLarge) { try BoundedFile.read(folder + "/large", limit: UInt64(bytes.count - 1)) }
        // A small file under a large limit: one part, the file.
        #expect(FileManager.default.createFile(atPath: folder + "/small", contents: Data(bytes[0..<300])))
        parts = []
        _ = try BoundedFile.stream(folder + "/small", limit: 1 << 20) { parts.append($0.count) }
        #expect(parts == [300])
    }
}
