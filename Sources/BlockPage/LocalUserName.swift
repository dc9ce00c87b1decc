// The name of a local user, for the block page's access request: the only
// call of the module into the system's user database, and its only unsafe code.
#if canImport(Glibc)
import Glibc
#endif

enum LocalUserName {
    /// The user name of `uid` (getpwuid_r: files, LDAP, SSSD as NSS says), or the number when none is known.
    static func name(of uid: uid_t) -> String {
        var entry = unsafe passwd()
        var result: UnsafeMutablePointer<passwd>? = nil
        var buffer = [CChar](repeating: 0, count: 4096)
        // unsafe: getpwuid_r fills `entry` with pointers into `buffer`, both locals that outlive
        // the copy of the name made below; `result` is only compared with nil.
        guard unsafe getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, unsafe result != nil,
            let name = unsafe entry.pw_name
        else {
            return String(uid)
        }
        return unsafe String(cString: name)
    }
}
