import HallpassSystem
import Testing

/// The system's own user database (no test users are made on the host).
@Suite struct UserDatabaseTests {
    @Test func rootIsFoundByUidAndByName() throws {
        let root = try #require(UserDatabase.user(uid: 0))
        #expect(root == UserEntry(name: "root", uid: 0, primaryGroup: 0))
        #expect(UserDatabase.user(named: "root") == root)
        #expect(UserDatabase.groups(of: root).contains(0))
        #expect(UserDatabase.groupName(gid: 0) == "root")
        #expect(UserDatabase.groupID(named: "root") == 0)
    }

    @Test func aUidWithNoEntryIsNotFound() {
        // Far above any account Debian makes.
        #expect(UserDatabase.user(uid: 3_999_999_999) == nil)
        #expect(UserDatabase.user(named: "no-such-user-hallpass") == nil)
        #expect(UserDatabase.groupName(gid: 3_999_999_999) == nil)
        #expect(UserDatabase.groupID(named: "no-such-group-hallpass") == nil)
    }
}
