import FilterControl
import Foundation
import Testing

/// What keeps filter-data (uid 65534 once locked down) from reading a file
/// it is handed on a reload.
@Suite struct DataReadableTests {
    let folder: TemporaryFolder
    let file: String

    init() throws {
        folder = try TemporaryFolder("readable")
        try FileManager.default.createDirectory(atPath: folder.sub("rules/versions/7"), withIntermediateDirectories: true)
        file = folder.sub("rules/versions/7/rules.hpstore")
        #expect(FileManager.default.createFile(atPath: file, contents: Data([1, 2, 3])))
        for path in [folder.path, folder.sub("rules"), folder.sub("rules/versions"), folder.sub("rules/versions/7")] {
            #expect(chmod(path, 0o755) == 0)
        }
        #expect(chmod(file, 0o644) == 0)
    }

    @Test func aFileEveryoneMayReadUnderSearchableFoldersIsFine() {
        #expect(DataReadable.problem(path: file) == nil)
    }

    @Test func aClosedFolderOnTheWayIsNamedWithItsMode() throws {
        #expect(chmod(folder.sub("rules"), 0o700) == 0)
        let problem = try #require(DataReadable.problem(path: file))
        #expect(problem.contains("cannot search \(folder.sub("rules"))"))
        #expect(problem.contains("mode 0700"))
    }

    @Test func aFileOnlyItsOwnerMayReadIsNamed() throws {
        #expect(chmod(file, 0o600) == 0)
        let problem = try #require(DataReadable.problem(path: file))
        #expect(problem.contains("cannot read \(file)"))
    }

    @Test func theUsersOwnBitsAndGroupBitsCount() {
        #expect(chmod(file, 0o600) == 0)
        // Owned by this test's user: that user may read it; someone else may not.
        #expect(DataReadable.problem(path: file, uid: getuid(), gid: 4_000_000) == nil)
        #expect(chmod(file, 0o640) == 0)
        #expect(DataReadable.problem(path: file, uid: 4_000_000, gid: getgid()) == nil)
        #expect(DataReadable.problem(path: file, uid: 4_000_000, gid: 4_000_001) != nil)
    }

    @Test func aLinkIsFollowedAndTheFoldersOfItsTargetAreChecked() throws {
        try FileManager.default.createSymbolicLink(atPath: folder.sub("current"), withDestinationPath: "rules/versions/7")
        #expect(DataReadable.problem(path: folder.sub("current/rules.hpstore")) == nil)
        #expect(chmod(folder.sub("rules/versions"), 0o700) == 0)
        let problem = try #require(DataReadable.problem(path: folder.sub("current/rules.hpstore")))
        #expect(problem.contains(folder.sub("rules/versions")))
    }
}
