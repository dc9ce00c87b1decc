import HallpassSystem
public import VerdictCore

/// Local users as the system's user database knows them (HallpassSystem's
/// `UserDatabase`: NSS, so accounts from LDAP or SSSD count like those in
/// /etc/passwd). Only filter-control asks: the sandboxed filter-data can
/// open no socket to a directory service.
///
/// The calls block (a directory server may be slow): call them off any
/// event loop.
public struct UserDirectory: Sendable {
    public init() {}

    /// The user with this uid: their name and every group they are in; a uid
    /// with no entry comes back with no name and no groups.
    public func user(uid: UInt32) -> LocalUser {
        guard let entry = UserDatabase.user(uid: uid) else { return LocalUser(uid: uid) }
        let names = UserDatabase.groups(of: entry).compactMap(groupName(gid:))
        return LocalUser(uid: uid, name: entry.name, unixGroups: Array(Set(names)).sorted())
    }

    /// The uid of a user name, nil when the database has none.
    public func uid(named name: String) -> UInt32? {
        UserDatabase.user(named: name)?.uid
    }

    /// The name of the user with this uid, nil when the database has none.
    public func userName(uid: UInt32) -> String? {
        UserDatabase.user(uid: uid)?.name
    }

    /// The primary group of the user with this uid, nil when the database has none.
    public func primaryGroupID(uid: UInt32) -> UInt32? {
        UserDatabase.user(uid: uid)?.primaryGroup
    }

    /// The name of a group, nil when the database has none.
    public func groupName(gid: UInt32) -> String? {
        UserDatabase.groupName(gid: gid)
    }

    /// The id of a group name, nil when the database has none.
    public func groupID(named name: String) -> UInt32? {
        UserDatabase.groupID(named: name)
    }
}
