/// The system user filter-data runs as once sandboxed (`queue.user`).
///
/// filter-data drops to a user of its own, shared with no other service:
/// a process of the same user could send it signals and so kill it. The
/// Debian package and `make install` make that user with systemd-sysusers
/// (`packaging/hallpass.sysusers`: `_hallpass`, no home, no login shell).
/// filter-control (root, where asking the user database through NSS is
/// fine) looks the name up once at start and hands filter-data the numbers
/// (`--uid`, `--gid`); filter-data asks no user database and refuses 0.
///
/// A name the database does not know (a program run from the build folder,
/// the tests, the demo, or an install that lost its user) falls back to
/// 65534 (`nobody`), what filter-data ran as before it had a user of its
/// own, and filter-control says so once, at error level: an admin must put
/// the user back (`systemd-sysusers`). The build folder's configurations
/// set `queue.user: nobody` and get no such line.
public struct DataUser: Sendable, Hashable, CustomStringConvertible {
    /// The user the package makes (`packaging/hallpass.sysusers`).
    public static let packageUser = "_hallpass"
    /// The fallback: uid and gid 65534.
    public static let nobody = DataUser(name: "nobody", uid: 65534, gid: 65534)

    public var name: String
    public var uid: UInt32
    public var gid: UInt32

    public init(name: String, uid: UInt32, gid: UInt32) {
        self.name = name
        self.uid = uid
        self.gid = gid
    }

    public var description: String { "\(name) (uid \(uid), gid \(gid))" }

    /// filter-data's arguments that make it this user.
    public var arguments: [String] { ["--uid", String(uid), "--gid", String(gid)] }

    /// What the user database says about `name`.
    public enum Lookup: Sendable, Hashable {
        /// The user exists and is not root.
        case found(DataUser)
        /// No such user: filter-data runs as `nobody`; `warning` says why, for the log.
        case missing(fallback: DataUser, warning: String)
        /// The name is root's (uid 0) or has root's group: refused.
        case privileged(String)
    }

    /// Looks `name` up with `directory` (NSS). Blocks: call it off any event loop.
    public static func lookUp(_ name: String, in directory: UserDirectory = UserDirectory()) -> Lookup {
        guard let uid = directory.uid(named: name), let gid = directory.primaryGroupID(uid: uid) else {
            let remedy =
                name == packageUser
                ? "'systemd-sysusers' makes it again (the package and make install put hallpass.conf in sysusers.d)"
                : "make it, or name a system user of filter-data's own"
            return .missing(
                fallback: .nobody,
                warning: "queue.user: this machine has no user \(name); filter-data runs as nobody (uid 65534), which other"
                    + " services share and could signal it as: \(remedy) (queue.user: nobody runs as nobody without this line)")
        }
        guard uid != 0, gid != 0 else {
            return .privileged("queue.user: \(name) has uid \(uid) and gid \(gid); filter-data never runs as root or with root's group")
        }
        return .found(DataUser(name: name, uid: uid, gid: gid))
    }

    /// A name as `queue.user` accepts it: 1 to 32 of letters, digits, `_`,
    /// `.` and `-`, not starting with `-`, and not all digits (a user is
    /// named, never given by number).
    public static func isUserName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...32).contains(bytes.count), bytes.first != UInt8(ascii: "-") else { return false }
        func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
        guard !bytes.allSatisfy(isDigit) else { return false }
        return bytes.allSatisfy { byte in
            isDigit(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
        }
    }
}
