import Crypto
import Foundation
import VerdictCore

/// A person's pseudonym, as the roles of `console.pseudonyms` see them: a
/// keyed hash of the user name (HMAC-SHA-256 with a key only the server
/// holds, in its database), so that it stays the same on every page and
/// every day, and cannot be turned back into the name without the key.
/// 32 bits of it: among a school's few thousand people two pseudonyms meet
/// about once in a thousand schools (the search then says so).
struct Pseudonyms: Sendable {
    static let prefix = "pupil-"
    private let key: SymmetricKey

    init(key: [UInt8]) {
        self.key = SymmetricKey(data: key)
    }

    /// `pupil-3fa9c1d2`.
    func of(_ user: String) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: Array(user.utf8), using: key)
        return Self.prefix + Hex.encode(Array(code).prefix(4))
    }

    /// Whether `text` is written as a pseudonym is.
    static func isPseudonym(_ text: String) -> Bool {
        guard text.hasPrefix(prefix) else { return false }
        let code = text.utf8.dropFirst(prefix.utf8.count)
        return code.count == 8 && code.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }
}

/// Finds whose pseudonym a search names: the pseudonyms of every user name
/// in the records, made again at most once a minute when a search names one
/// not seen yet (a new pupil's first records). The key is read once.
actor PseudonymDirectory {
    enum Resolution: Sendable, Hashable {
        case user(String)
        case unknown
        /// Two people share the pseudonym (rare; see `Pseudonyms`).
        case ambiguous
    }

    private let storage: any ServerStorage
    private var pseudonyms: Pseudonyms?
    private var names: [String: [String]] = [:]
    private var refreshedAt: Int64?

    /// The most user names read: far above any school's people.
    static let maxNames = 200_000
    static let refreshInterval: Int64 = 60

    init(storage: any ServerStorage) {
        self.storage = storage
    }

    func current() async throws -> Pseudonyms {
        if let pseudonyms { return pseudonyms }
        let made = Pseudonyms(key: try await storage.pseudonymKey())
        pseudonyms = made
        return made
    }

    func resolve(_ pseudonym: String, now: Int64) async throws -> Resolution {
        if names[pseudonym] == nil, refreshedAt.map({ now - $0 >= Self.refreshInterval }) ?? true {
            let pseudonyms = try await current()
            var table: [String: [String]] = [:]
            for name in try await storage.recordUserNames(limit: Self.maxNames) { table[pseudonyms.of(name), default: []].append(name) }
            names = table
            refreshedAt = now
        }
        guard let found = names[pseudonym] else { return .unknown }
        return found.count == 1 ? .user(found[0]) : .ambiguous
    }
}
