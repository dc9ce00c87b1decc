import Foundation
import HallpassSystem
import SystemPackage
import Testing

@Suite struct FileSystemTests {
    let folder: String

    init() throws {
        folder = NSTemporaryDirectory() + "hallpass-files-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    @Test func foldersAreMadeListedAndRemovedWithoutFollowingLinks() throws {
        defer { FileSystem.removeTree(folder) }
        try FileSystem.makeDirectories(folder + "/a/b/c")
        #expect(try FileSystem.status(folder + "/a/b").permissions.rawValue == 0o755)
        #expect(FileSystem.isDirectory(folder + "/a/b/c"))
        // Made already: nothing changes, no error.
        try FileSystem.makeDirectories(folder + "/a/b/c")
        #expect(throws: FileError.self) { try FileSystem.makeDirectory(folder + "/a") }

        let outside = folder + "/outside"
        try FileSystem.makeDirectory(outside)
        let kept = try NewFile(outside + "/kept")
        try kept.write(Array("x".utf8))
        try kept.finish()
        try FileSystem.symlink(target: outside, at: folder + "/a/link")
        #expect(FileSystem.linkTarget(folder + "/a/link") == outside)
        #expect(!FileSystem.isDirectory(folder + "/a/link"))
        #expect(FileSystem.names(in: folder + "/a").sorted() == ["b", "link"])
        FileSystem.removeTree(folder + "/a")
        #expect(!FileSystem.exists(folder + "/a"))
        #expect(FileSystem.exists(outside + "/kept"))
    }

    @Test func aNewFileIsNeverAnExistingOneAndHasItsMode() throws {
        defer { FileSystem.removeTree(folder) }
        let file = try NewFile(folder + "/manifest", mode: 0o644)
        try file.write(Array("first".utf8))
        try file.reset()
        try file.write(Array("second".utf8))
        try file.finish()
        #expect(try BoundedFile.read(folder + "/manifest", limit: 64) == Array("second".utf8))
        #expect(try FileSystem.status(folder + "/manifest").permissions.rawValue == 0o644)
        do {
            _ = try NewFile(folder + "/manifest")
            Issue.record("an existing file was opened as new")
        } catch {
            #expect(error.errno == .fileExists)
            #expect(error.description == "\(folder)/manifest: cannot create the file: File exists")
        }
        try FileSystem.rename(folder + "/manifest", to: folder + "/renamed")
        #expect(FileSystem.names(in: folder) == ["renamed"])
        try FileSystem.sync(folder, directory: true)
        #expect(FileSystem.canonicalPath(folder + "/./renamed") == FileSystem.canonicalPath(folder)! + "/renamed")
    }

    @Test func aLockIsHeldByOneAtATime() throws {
        defer { FileSystem.removeTree(folder) }
        let first = try #require(try FileLock(folder + "/.lock"))
        #expect(try FileLock(folder + "/.lock") == nil)
        first.release()
        #expect(try FileLock(folder + "/.lock") != nil)
    }

    @Test func aUniqueFolderIsPrivate() throws {
        defer { FileSystem.removeTree(folder) }
        let made = try FileSystem.makeUniqueDirectory(prefix: folder + "/.admin-")
        #expect(made.hasPrefix(folder + "/.admin-"))
        #expect(try FileSystem.status(made).permissions.rawValue == 0o700)
        FileSystem.removeDirectory(made)
        #expect(!FileSystem.exists(made))
    }
}
