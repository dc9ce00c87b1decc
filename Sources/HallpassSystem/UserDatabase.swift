// The system's user database through NSS (getpwuid_r, getpwnam_r,
// getgrgid_r, getgrnam_r, getgrouplist), so accounts from LDAP or SSSD count
// like those in /etc/passwd. The calls block (a directory server may be
// slow): make them off any event loop.
//
// unsafe in this file: each reentrant call fills a local `passwd` or `group`
// with pointers into a scratch buffer that outlives it, and what is wanted
// (a name, an id) is copied out before the buffer goes; `result` is only
// compared with nil. getgrouplist writes at most `count` ids into an array
// of that size.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A user's entry: name, uid and primary group.
public struct UserEntry: Sendable, Hashable {
    public var name: String
    public var uid: UInt32
    public var primaryGroup: UInt32

    public init(name: String, uid: UInt32, primaryGroup: UInt32) {
        self.name = name
        self.uid = uid
        self.primaryGroup = primaryGroup
    }
}

public enum UserDatabase {
    /// The most groups read for one user.
    public static let maximumGroups = 1024

    /// The user with this uid, nil when the database has none.
    public static func user(uid: UInt32) -> UserEntry? {
        // unsafe: see the file's comment.
        unsafe passwdEntry { entry, buffer, result in unsafe getpwuid_r(uid, &entry, &buffer, buffer.count, &result) }
    }

    /// The user with this name, nil when the database has none.
    public static func user(named name: String) -> UserEntry? {
        // unsafe: see the file's comment; the name is a C string for the call only.
        unsafe passwdEntry { entry, buffer, result in unsafe getpwnam_r(name, &entry, &buffer, buffer.count, &result) }
    }

    /// The name of a group, nil when the database has none.
    public static func groupName(gid: UInt32) -> String? {
        withEntryBuffer { buffer in
            var entry = unsafe group()
            var result: UnsafeMutablePointer<group>? = nil
            // unsafe: fills `entry` with pointers into `buffer`; the name is copied out before it goes.
            guard unsafe getgrgid_r(gid, &entry, &buffer, buffer.count, &result) == 0, unsafe result != nil, let name = unsafe entry.gr_name else {
                return nil
            }
            return unsafe String(cString: name)
        }
    }

    /// The id of a group name, nil when the database has none.
    public static func groupID(named name: String) -> UInt32? {
        withEntryBuffer { buffer in
            var entry = unsafe group()
            var result: UnsafeMutablePointer<group>? = nil
            // unsafe: fills `entry` with pointers into `buffer`; only the gid is kept.
            guard unsafe getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, unsafe result != nil else { return nil }
            return unsafe entry.gr_gid
        }
    }

    /// The ids of every group `user` is in, its primary group included (at
    /// most ``maximumGroups``).
    public static func groups(of user: UserEntry) -> [UInt32] {
        var count = Int32(64)
        var groups = [gid_t](repeating: 0, count: Int(count))
        // getgrouplist says how many it needs when the array is too small.
        // unsafe: it writes at most `count` ids into `groups`, whose size is `count`.
        while unsafe getgrouplist(user.name, user.primaryGroup, &groups, &count) < 0, count <= Int32(maximumGroups) {
            groups = [gid_t](repeating: 0, count: Int(count))
        }
        return Array(groups.prefix(Int(max(0, min(count, Int32(groups.count))))))
    }

    /// The one reader of a `passwd` entry, for both lookups: `call` is
    /// getpwuid_r or getpwnam_r with its key.
    private static func passwdEntry(
        _ call: (inout passwd, inout [CChar], inout UnsafeMutablePointer<passwd>?) -> Int32
    ) -> UserEntry? {
        withEntryBuffer { buffer in
            var entry = unsafe passwd()
            var result: UnsafeMutablePointer<passwd>? = nil
            // unsafe: fills `entry` with pointers into `buffer`; the name is copied out before it goes.
            guard unsafe call(&entry, &buffer, &result) == 0, unsafe result != nil, let name = unsafe entry.pw_name else { return nil }
            return unsafe UserEntry(name: String(cString: name), uid: entry.pw_uid, primaryGroup: entry.pw_gid)
        }
    }

    /// The scratch space the reentrant calls fill (names, member lists); a
    /// large group's member list can need more than a small buffer holds,
    /// so a lookup that finds nothing is tried once more with 1 MiB (a
    /// buffer too small, ERANGE, and a missing entry look alike here).
    private static func withEntryBuffer<T>(_ body: (inout [CChar]) -> T?) -> T? {
        for size in [16 * 1024, 1 << 20] {
            var buffer = [CChar](repeating: 0, count: size)
            if let result = body(&buffer) { return result }
        }
        return nil
    }
}
