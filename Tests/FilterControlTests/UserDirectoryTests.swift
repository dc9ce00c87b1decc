@testable import FilterControl
import Testing
import VerdictCore

/// The system's own user database (no test users are made on the host).
@Suite struct UserDirectoryTests {
    @Test func rootIsFoundWithItsGroups() {
        let root = UserDirectory().user(uid: 0)
        #expect(root.name == "root")
        #expect(root.unixGroups.contains("root"))
        #expect(UserDirectory().uid(named: "root") == 0)
    }

    @Test func aUidWithNoEntryIsStillAUser() {
        // Far above any account Debian makes; test users are uids like this one, run with setpriv.
        let unknown = UserDirectory().user(uid: 3_999_999_999)
        #expect(unknown == LocalUser(uid: 3_999_999_999))
        #expect(UserDirectory().uid(named: "no-such-user-hallpass") == nil)
    }
}
