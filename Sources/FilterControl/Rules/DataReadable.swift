import Foundation
import HallpassSystem
import SystemPackage

/// Whether filter-data can open a file once it runs locked down.
///
/// filter-data opens its first rules as root, before its sandbox, but every
/// later `useRules` or `usePolicy` it opens as its own user (`queue.user`,
/// `DataUser`; 65534 when the machine has no such user) with no
/// capability over files: the file must be readable, and every folder on
/// the way searchable, for that user. A `rules.directory` under a 0700
/// folder starts fine and then refuses every reload, so filter-control
/// checks before it hands files over, and says which folder is in the way.
/// (Mode bits only: an ACL that lets that user through is not seen and reads as
/// a problem; one that shuts it out is not seen either, and filter-data's
/// own refusal then tells.)
public enum DataReadable {
    /// What keeps filter-data from reading `path`, or nil when nothing does.
    /// filter-data's user and group when the machine has no `queue.user` (`Sandbox.unprivilegedID`).
    public static let dataUser: UInt32 = 65534

    public static func problem(path: String, uid: UInt32 = dataUser, gid: UInt32 = dataUser) -> String? {
        guard path.hasPrefix("/") else { return "\(path) is not an absolute path" }
        var checked: Set<String> = []
        // The folders of the path as given (symbolic links are looked up in
        // them) and of the path the links lead to.
        var paths = [path]
        if let resolved = FileSystem.canonicalPath(path), resolved != path { paths.append(resolved) }
        for candidate in paths {
            var folder = ""
            let parts = candidate.split(separator: "/", omittingEmptySubsequences: true)
            for (index, part) in parts.enumerated() {
                let parent = folder.isEmpty ? "/" : folder
                if !checked.contains(parent) {
                    checked.insert(parent)
                    if let problem = check(parent, need: 0o1, what: "search", uid: uid, gid: gid) { return problem }
                }
                folder += "/" + part
                if index == parts.count - 1, !checked.contains(folder) {
                    checked.insert(folder)
                    if let problem = check(folder, need: 0o4, what: "read", uid: uid, gid: gid) { return problem }
                }
            }
        }
        return nil
    }

    /// `need` is the permission bit in "other" position (4 read, 1 search).
    private static func check(_ path: String, need: mode_t, what: String, uid: UInt32, gid: UInt32) -> String? {
        guard let status = try? FileSystem.status(path) else {
            // A link in the way that leads nowhere, or a file gone: filter-data's own answer says more.
            return nil
        }
        let mode = status.permissions.rawValue
        let owner = status.userID.rawValue
        let group = status.groupID.rawValue
        let granted: Bool
        if owner == uid {
            granted = (mode >> 6) & need != 0
        } else if group == gid {
            granted = (mode >> 3) & need != 0
        } else {
            granted = mode & need != 0
        }
        guard !granted else { return nil }
        let shown = String(mode & 0o7777, radix: 8)
        return "filter-data runs as uid \(uid) and cannot \(what) \(path) (mode 0\(shown), owner \(owner):\(group));"
            + " give others \(need == 0o4 ? "read" : "search (x)") permission there or move rules.directory"
    }
}
