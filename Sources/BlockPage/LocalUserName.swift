// The name of a local user, for the block page's access request.
import HallpassSystem

enum LocalUserName {
    /// The user name of `uid` (the system's user database: files, LDAP, SSSD
    /// as NSS says), or the number when none is known.
    static func name(of uid: UInt32) -> String {
        UserDatabase.user(uid: uid)?.name ?? String(uid)
    }
}
