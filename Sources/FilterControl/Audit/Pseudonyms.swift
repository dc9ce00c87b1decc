#if canImport(Glibc)
import Glibc
#endif
import Crypto
import HallpassSystem
import SharedStore
import SystemPackage

/// `log.users: pseudonym`: a person's login name replaced by an HMAC-SHA256
/// of it under the school's key, so records of one person agree across
/// every machine that holds the same key (and across time) without naming
/// them. Whoever holds the key can test a guessed name, so the key is kept
/// like the CA key: mode 0600, root only, never in a bundle (bundles are
/// readable by everyone on the machine).
public struct Pseudonyms: Sendable {
    public struct KeyError: Error, Sendable, CustomStringConvertible {
        public var path: String
        public var reason: String
        public var description: String { "pseudonym key \(path): \(reason)" }
    }

    private let key: SymmetricKey

    public init(key: [UInt8]) {
        self.key = SymmetricKey(data: key)
    }

    /// `p-` and the first 10 bytes of HMAC-SHA256(key, "hallpass user " + name) in hex.
    public func pseudonym(for name: String) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: Array("hallpass user \(name)".utf8), using: key)
        return "p-" + code.prefix(10).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    /// Reads the key at `path` (32 bytes or more), making one of 32 random
    /// bytes (mode 0600) when the file does not exist and `create` is set.
    public static func loadKey(path: String, create: Bool) throws(KeyError) -> [UInt8] {
        let descriptor: FileDescriptor
        do {
            descriptor = try FileSystem.open(path, .readOnly)
        } catch {
            guard error == .noSuchFileOrDirectory, create else { throw KeyError(path: path, reason: error.description) }
            let key = (0..<32).map { _ in UInt8.random(in: 0...255) }
            do {
                try AtomicFile.write(key, to: path, mode: 0o600)
            } catch {
                throw KeyError(path: path, reason: error.description)
            }
            return key
        }
        defer { descriptor.closeQuietly() }
        let permissions: UInt32
        do {
            permissions = UInt32(try descriptor.stat().permissions.rawValue)
        } catch {
            throw KeyError(path: path, reason: error.description)
        }
        guard permissions & 0o077 == 0 else {
            throw KeyError(path: path, reason: "other users may read it (mode \(String(permissions & 0o777, radix: 8))); chmod 600 it")
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count: Int
        do {
            count = try descriptor.readSome(into: &buffer)
        } catch {
            throw KeyError(path: path, reason: error.description)
        }
        guard count >= 32 else { throw KeyError(path: path, reason: "shorter than 32 bytes") }
        return Array(buffer[0..<count])
    }
}

/// Makes the `AuditLine` the outputs write from an `AuditRecord`: the
/// machine's name, and the user and group as `log.users` allows.
public struct AuditLineMaker: Sendable {
    public var machine: String
    public var users: AuditSettings.Users
    public var pseudonyms: Pseudonyms?

    public init(machine: String, users: AuditSettings.Users, pseudonyms: Pseudonyms?) {
        self.machine = machine
        self.users = users
        self.pseudonyms = pseudonyms
    }

    /// `person`: the uid's user name and primary group name, when known.
    public func line(_ record: AuditRecord, person: (user: String?, group: String?)) -> AuditLine {
        let uid = record.report.uid
        switch users {
        case .name:
            return AuditLine(record, machine: machine, uid: uid, user: person.user, group: person.group)
        case .pseudonym:
            // The uid names the person as well as the name does: left out.
            let name = person.user ?? uid.map { "uid \($0)" }
            return AuditLine(record, machine: machine, uid: nil, user: name.flatMap { pseudonyms?.pseudonym(for: $0) }, group: person.group)
        case .none:
            return AuditLine(record, machine: machine, uid: nil, user: nil, group: person.group)
        }
    }

    /// The machine's host name (what `log.machine` defaults to): the kernel's
    /// node name, which gethostname(2) returns too, read from procfs.
    public static func hostName() -> String {
        guard let bytes = try? BoundedFile.read("/proc/sys/kernel/hostname", limit: 256) else { return "localhost" }
        let name = String(decoding: bytes.prefix { $0 != UInt8(ascii: "\n") && $0 != 0 }, as: UTF8.self)
        return name.isEmpty ? "localhost" : name
    }
}
