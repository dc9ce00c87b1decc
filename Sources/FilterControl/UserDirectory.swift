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
        while getgrouplist(name, primaryGroup, &groups, &count) < 0, count <= Int32(Self.maximumGroups) {
            groups = [gid_t](repeating: 0, count: Int(count))
        }
        let names = groups.prefix(Int(max(0, min(count, Int32(groups.count))))).compactMap(groupName)
        return LocalUser(uid: uid, name: name, unixGroups: Array(Set(names)).sorted())
    }

    /// The uid of a user name, nil when the database has none.
    public func uid(named name: String) -> UInt32? {
        withEntryBuffer { buffer in
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>? = nil
            guard getpwnam_r(name, &entry, buffer.baseAddress!, buffer.count, &result) == 0, result != nil else { return nil }
            return entry.pw_uid
        }
    }

    private func passwdEntry(uid: UInt32) -> (String, gid_t)? {
        withEntryBuffer { buffer in
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>? = nil
            guard getpwuid_r(uid, &entry, buffer.baseAddress!, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else { return nil }
            return (String(cString: name), entry.pw_gid)
        }
    }

    private func groupName(_ gid: gid_t) -> String? {
        withEntryBuffer { buffer in
            var entry = group()
            var result: UnsafeMutablePointer<group>? = nil
            guard getgrgid_r(gid, &entry, buffer.baseAddress!, buffer.count, &result) == 0, result != nil, let name = entry.gr_name else { return nil }
            return String(cString: name)
        }
    }

    /// The scratch space the reentrant calls fill (names, member lists); a
    /// large group's member list can need more than a small buffer holds.
    private func withEntryBuffer<T>(_ body: (UnsafeMutableBufferPointer<CChar>) -> T?) -> T? {
        for size in [16 * 1024, 1 << 20] {
            let result = withUnsafeTemporaryAllocation(of: CChar.self, capacity: size) { body($0) }
            if result != nil { return result }
        }
        return nil
    }
}
