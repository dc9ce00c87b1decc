import Foundation
import HallpassSystem
import SystemPackage
import Testing

@Suite struct AtomicFileTests {
    let folder: String

    init() throws {
        folder = NSTemporaryDirectory() + "hallpass-atomic-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    @Test func aWriteReplacesTheContentWithExactlyTheModeAskedFor() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/state"
        try AtomicFile.write(Array("old".utf8), to: path, mode: 0o600)
        try AtomicFile.write(Array("new content\n".utf8), to: path, mode: 0o644)
        #expect(try BoundedFile.read(path, limit: 64) == Array("new content\n".utf8))
        // The mode of the new file, not the old one's, and not narrowed by the umask (022 or 077).
        #expect(try FileSystem.status(path).permissions.rawValue == 0o644)
        try AtomicFile.write([], to: path, mode: 0o640)
        #expect(try BoundedFile.read(path, limit: 64) == [])
        #expect(try FileSystem.status(path).permissions.rawValue == 0o640)
        #expect(!FileSystem.exists(AtomicFile.temporaryPath(for: path)))
    }

    @Test func aFailedWriteLeavesNoTemporaryFileAndTheOldContent() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/state"
        try AtomicFile.write(Array("kept".utf8), to: path, mode: 0o644)
        // A folder where the file should go: the rename over it fails after the temporary file was written.
        let blocked = folder + "/blocked"
        try FileSystem.makeDirectory(blocked)
        try FileManager.default.createDirectory(atPath: blocked + "/inside", withIntermediateDirectories: true)
        #expect(throws: AtomicFile.Failure.self) { try AtomicFile.write(Array("lost".utf8), to: blocked, mode: 0o644) }
        #expect(!FileSystem.exists(AtomicFile.temporaryPath(for: blocked)))
        // A folder that does not exist: nothing is made at all.
        #expect(throws: AtomicFile.Failure.self) { try AtomicFile.write(Array("lost".utf8), to: folder + "/none/state", mode: 0o644) }
        #expect(try BoundedFile.read(path, limit: 64) == Array("kept".utf8))
        #expect(FileSystem.names(in: folder).sorted() == ["blocked", "state"])
    }

    @Test func createNewNeverReplacesAFileOrALink() throws {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/key.pem"
        try AtomicFile.createNew(Array("secret".utf8), at: path, mode: 0o600)
        #expect(try FileSystem.status(path).permissions.rawValue == 0o600)
        do {
            try AtomicFile.createNew(Array("other".utf8), at: path, mode: 0o600)
            Issue.record("an existing file was replaced")
        } catch {
            #expect(error.alreadyExists)
        }
        try FileSystem.symlink(target: folder + "/elsewhere", at: folder + "/link")
        do {
            try AtomicFile.createNew(Array("other".utf8), at: folder + "/link", mode: 0o600)
            Issue.record("a file was made through a link")
        } catch {
            #expect(error.alreadyExists)
        }
        #expect(!FileSystem.exists(folder + "/elsewhere"))
        #expect(try BoundedFile.read(path, limit: 64) == Array("secret".utf8))
    }
}
