public import HallpassConfig
import Yams
public import VerdictCore

/// The names the filtering test checks (docs/safeguarding.md, "The filtering
/// test"): two a category of the lists hallpass ships (rules/ut1 and
/// rules/bypass), each a name its category's list holds and no other
/// shipped list does, so a machine on a bundle of the shipped lists blocks
/// it exactly when its group's policy blocks the category; and the school's
/// own (server.yaml `filteringTest:`, category to names), for the lists it
/// adds (an adult, drugs or weapons list is not shipped).
public enum FilteringTestNames {
    public static let shipped: [FilteringTest.Name] = ([
        ("gambling", ["pokerstars.com", "888casino.com"]),
        ("games", ["miniclip.com", "roblox.com"]),
        ("dating", ["tinder.com", "badoo.com"]),
        ("vpn", ["nordvpn.com", "expressvpn.com"]),
        ("hacking", ["backtrack-linux.org", "antionline.com"]),
        ("warez", ["1337x.to", "rarbg.to"]),
        ("stalkerware", ["mspy.com", "flexispy.com"]),
        ("cryptojacking", ["coinhive.com", "coin-hive.com"]),
        ("doh", ["cloudflare-dns.com", "dns.google"]),
    ] as [(String, [String])]).flatMap { category, names in names.map { FilteringTest.Name(name: $0, category: category) } }

    /// The most names `filteringTest:` may add.
    public static let maximumSchoolNames = FilteringTest.maximumNames - 100

    /// The names of a run: the shipped ones, then the school's, each (name, category) once.
    public static func all(school: [FilteringTest.Name]) -> [FilteringTest.Name] {
        var seen: Set<FilteringTest.Name> = []
        return (shipped + school).filter { seen.insert($0).inserted }
    }

    /// Reads `filteringTest:`: a mapping of categories to lists of names.
    public static func read(_ node: ConfigNode) throws(ConfigurationError) -> [FilteringTest.Name] {
        guard case .mapping(let mapping) = node.node else {
            if node.node.null != nil { return [] }
            throw node.error("expected a mapping of categories to lists of test names, e.g. adult: [pornhub.com, xvideos.com]")
        }
        var names: [FilteringTest.Name] = []
        var categories: Set<String> = []
        // The categories are the lists': any name a list may have, so the keys are read as names here.
        for (keyNode, value) in mapping {
            guard let category = keyNode.string else { throw node.error("a category is not a string") }
            let path = node.key + "." + category
            let line = keyNode.mark.map { $0.line }
            if let refusal = FilteringTest.categoryRefusal(category) {
                throw ConfigurationError(key: path, line: line, message: refusal, document: node.document)
            }
            guard categories.insert(category).inserted else {
                throw ConfigurationError(key: path, line: line, message: "the category appears twice", document: node.document)
            }
            let items = try ConfigNode(value, key: path, document: node.document).list()
            guard !items.isEmpty else {
                throw ConfigurationError(key: path, line: line, message: "give at least one name, or leave the category out", document: node.document)
            }
            for item in items {
                let name = try item.string()
                if let refusal = FilteringTest.nameRefusal(name) { throw item.error("\(refusal), got '\(name.prefix(120))'") }
                names.append(FilteringTest.Name(name: name, category: category))
            }
        }
        guard names.count <= maximumSchoolNames else {
            throw node.error("at most \(maximumSchoolNames) test names (the shipped ones are checked as well)")
        }
        return names.sorted { ($0.category, $0.name) < ($1.category, $1.name) }
    }
}
