import Foundation
public import HallpassConfig

/// What the console's pages need from server.yaml's `console:` keys
/// (docs/console.md): the school's name in the header, who sees pseudonyms
/// instead of names, the default language and a folder of translated strings.
public struct ConsolePageSettings: Sendable, Hashable {
    /// Shown in every page's header and title.
    public var schoolName: String = "hallpass"
    /// The roles that see a keyed pseudonym (`pupil-3fa9c1d2`) wherever a
    /// record names a person, and search by it.
    public var pseudonyms: Set<Role> = [.auditor]
    /// The language when the browser asks for none the console has.
    public var language: String = "en"
    /// A folder of `<language>.strings` files that replace or add to the
    /// built-in strings (docs/console.md, "Translating"); nil: the built-in ones.
    public var stringsFolder: String? = nil

    /// The keys of `console:` that this struct reads.
    public static let keys = ["schoolName", "pseudonyms", "language", "strings"]

    public init() {}

    /// Reads its keys from the `console:` mapping (the other keys of the
    /// section are the sign-in's and are read elsewhere).
    public mutating func read(_ console: [String: ConfigNode]) throws(ConfigurationError) {
        if let name = console["schoolName"] {
            let text = try name.string().trimmingCharacters(in: .whitespaces)
            guard (1...120).contains(text.count), text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
                throw name.error("expected the school's name: 1 to 120 characters on one line")
            }
            schoolName = text
        }
        if let node = console["pseudonyms"] {
            var roles: Set<Role> = []
            for item in try node.list() {
                let role = try item.choice(Role.self)
                guard role != .metrics else { throw item.error("metrics reads no records; the roles are admin, safeguarding, teacher, auditor") }
                roles.insert(role)
            }
            pseudonyms = roles
        }
        if let node = console["language"] {
            let text = try node.string()
            guard let tag = ConsoleLanguage.canonical(text) else { throw node.error("'\(text)' is not a language tag such as en or ko") }
            language = tag
        }
        if let node = console["strings"] { stringsFolder = try node.absolutePath() }
    }
}
