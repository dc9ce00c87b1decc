public import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

/// Local users as the system's user database knows them: through NSS
/// (getpwuid_r, getgrouplist, getgrgid_r), so accounts from LDAP or SSSD
/// count like those in /etc/passwd. Only filter-control asks: the
/// sandboxed filter-data can open no socket to a directory service.
///
/// The calls block (a directory server may be slow): call them off any
/// event loop.
///
/// This is filter-control's one file that calls the user database, and the
/// only unsafe code those calls need stays here: each reentrant call fills
/// a local `passwd` or `group` with pointers into a scratch buffer that
/// outlives it, and what is wanted (a name, an id) is copied out before the
/// buffer goes; `result` is only compared with nil.
public struct UserDirectory: Sendable {
    /// The most groups read for one user.
    static let maximumGroups = 1024

    public init() {}

    /// The user with this uid: their name and every group they are in; a uid
    /// with no entry comes back with no name and no groups.
    public func user(uid: UInt32) -> LocalUser {
        guard let (name, primaryGroup) = passwdEntry(uid: uid) else { return LocalUser(uid: uid) }
        var count = Int32(64)
        var groups = [gid_t](repeating: 0, count: Int(count))
        // getgrouplist says how many it needs when the array is too small.
        // unsafe: it writes at most `count` ids into `groups`, whose size is `count`.
        while unsafe getgrouplist(name, primaryGroup, &groups, &count) < 0, count <= Int32(Self.maximumGroups) {
            groups = [gid_t](repeating: 0, count: Int(count))
        }
        let names = groups.prefix(Int(max(0, min(count, Int32(groups.count))))).compactMap(groupName(gid:))
        return LocalUser(uid: uid, name: name, unixGroups: Array(Set(names)).sorted())
    }

    /// The uid of a user name, nil when the database has none.
    public func uid(named name: String) -> UInt32? {
        withEntryBuffer { buffer in
            var entry = unsafe passwd()
            var result: UnsafeMutablePointer<passwd>? = nil
            // unsafe: fills `entry` with pointers into `buffer` (see the type's comment); only the uid is kept.
            guard unsafe getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, unsafe result != nil else { return nil }
            return unsafe entry.pw_uid
        }
    }

    /// The name of the user with this uid, nil when the database has none.
    public func userName(uid: UInt32) -> String? {
        passwdEntry(uid: uid)?.name
    }

    /// The primary group of the user with this uid, nil when the database has none.
    public func primaryGroupID(uid: UInt32) -> UInt32? {
        passwdEntry(uid: uid)?.group
    }

    /// The name of a group, nil when the database has none.
    public func groupName(gid: UInt32) -> String? {
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
    public func groupID(named name: String) -> UInt32? {
        withEntryBuffer { buffer in
            var entry = unsafe group()
            var result: UnsafeMutablePointer<group>? = nil
            // unsafe: fills `entry` with pointers into `buffer`; only the gid is kept.
            guard unsafe getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, unsafe result != nil else { return nil }
            return unsafe entry.gr_gid
        }
    }

    /// The name and primary group of the user with this uid, nil when the database has none.
    func passwdEntry(uid: UInt32) -> (name: String, group: gid_t)? {
        withEntryBuffer { buffer in
            var entry = unsafe passwd()
            var result: UnsafeMutablePointer<passwd>? = nil
            // unsafe: fills `entry` with pointers into `buffer`; the name is copied out before it goes.
            guard unsafe getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, unsafe result != nil, let name = unsafe entry.pw_name else {
                return nil
            }
            return unsafe (String(cString: name), entry.pw_gid)
        }
    }

    /// The scratch space the reentrant calls fill (names, member lists); a
    /// large group's member list can need more than a small buffer holds.
    private func withEntryBuffer<T>(_ body: (inout [CChar]) -> T?) -> T? {
        for size in [16 * 1024, 1 << 20] {
            var buffer = [CChar](repeating: 0, count: size)
            if let result = body(&buffer) { return result }
        }
        return nil
    }
}
