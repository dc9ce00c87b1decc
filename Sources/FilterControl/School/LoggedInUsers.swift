import HallpassSystem

/// Who is logged in, for the check-in: systemd-logind's record of each user
/// with a session, `/run/systemd/users/UID` (`NAME=alice`, `STATE=active`).
/// People only: uids from 1000 (Debian's first for people) but nobody
/// (65534), with a session that is active or online (not lingering, closing).
enum LoggedInUsers {
    static let defaultFolder = "/run/systemd/users"

    static func names(folder: String = defaultFolder) -> [String] {
        var names: Set<String> = []
        for file in FileSystem.names(in: folder) {
            guard let uid = UInt32(file), uid >= 1000, uid != 65534,
                let bytes = try? BoundedFile.read(folder + "/" + file, limit: 64 << 10)
            else { continue }
            var name: String?
            var state: String?
            for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
                if line.hasPrefix("NAME=") { name = String(line.dropFirst(5)) }
                if line.hasPrefix("STATE=") { state = String(line.dropFirst(6)) }
            }
            if let name, !name.isEmpty, state == "active" || state == "online" { names.insert(name) }
        }
        return names.sorted()
    }
}
