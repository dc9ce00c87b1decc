/// The school's filtering test (docs/safeguarding.md, "The filtering test"):
/// the school's server asks each enrolled machine, through the live channel,
/// how it judges a list of test names for each group, and the machine
/// answers with what its own rules and policy do, as `filterctl check
/// --user` would for a person of that group. These are the two messages and
/// the judging; the server compares the answers with what the published
/// policy blocks.
public enum FilteringTest {
    /// How the test names the people in no group (`Audience.ungrouped`).
    public static let noGroup = "(no group)"
    /// Bounds of one run, on both sides: names, groups, and the results of one machine.
    public static let maximumNames = 500
    public static let maximumGroups = 200
    public static let maximumResults = maximumNames * maximumGroups
    /// A name's and a category's longest, in bytes.
    public static let maximumNameBytes = 253
    public static let maximumCategoryBytes = 64
    /// A group's and a run's id's longest, in bytes.
    public static let maximumGroupBytes = 256
    public static let maximumRunBytes = 64

    /// The audience a group of the test stands for.
    public static func audience(ofGroup group: String) -> Audience {
        group == noGroup ? .ungrouped : .group(group)
    }

    /// Why `name` cannot be a test name (a host name: a-z, 0-9, '-' and dots,
    /// at least two labels, as `filterctl check` reads it); nil when it can.
    public static func nameRefusal(_ name: String) -> String? {
        let bytes = Array(name.utf8)
        guard (3...maximumNameBytes).contains(bytes.count) else { return "a test name is 3 to \(maximumNameBytes) characters" }
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2,
            labels.allSatisfy({ label in
                (1...63).contains(label.utf8.count) && !label.hasPrefix("-") && !label.hasSuffix("-")
                    && label.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
            })
        else { return "a test name is a host name in lower case: labels of a-z, 0-9 and '-' joined by dots, like casino.example" }
        guard (try? CheckTarget(utf8: bytes[...])) != nil else { return "'\(name)' is not a name filterctl check reads" }
        return nil
    }

    /// Why `category` cannot be a test's category (1 to 64 of a-z, A-Z, 0-9, '_' and '-'); nil when it can.
    public static func categoryRefusal(_ category: String) -> String? {
        guard (1...maximumCategoryBytes).contains(category.utf8.count),
            category.utf8.allSatisfy({
                ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F || $0 == 0x2D
            })
        else { return "a category is 1 to \(maximumCategoryBytes) of a-z, A-Z, 0-9, '_' and '-'" }
        return nil
    }

    /// One test name and the category whose list should hold it.
    public struct Name: Sendable, Hashable, Codable {
        public var name: String
        public var category: String

        public init(name: String, category: String) {
            self.name = name
            self.category = category
        }
    }

    /// What the server asks a machine: judge every name for every group.
    public struct Request: Sendable, Hashable, Codable {
        /// The run's id.
        public var run: String
        public var groups: [String]
        public var names: [Name]

        public init(run: String, groups: [String], names: [Name]) {
            self.run = run
            self.groups = groups
            self.names = names
        }

        /// Why a machine does not take the request (too large, or not names it can judge); nil when it does.
        public var refusal: String? {
            guard (1...maximumRunBytes).contains(run.utf8.count), run.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                return "a run's id is 1 to \(maximumRunBytes) printable ASCII characters"
            }
            guard (1...maximumGroups).contains(groups.count), (1...maximumNames).contains(names.count) else {
                return "a run has 1 to \(maximumGroups) groups and 1 to \(maximumNames) names"
            }
            guard groups.allSatisfy({ (1...maximumGroupBytes).contains($0.utf8.count) }) else { return "a group is 1 to \(maximumGroupBytes) bytes" }
            for name in names {
                if let refusal = nameRefusal(name.name) ?? categoryRefusal(name.category) { return refusal }
            }
            return nil
        }
    }

    /// What the machine found for one name and one group.
    public struct Result: Sendable, Hashable, Codable {
        public var group: String
        public var name: String
        /// `allow`, `block` or `ask`, as `filterctl check` prints it.
        public var action: String
        /// The category the machine's rules put the name in (the one that decided, when one did).
        public var category: String?
        /// Why, as `filterctl check` says it.
        public var reason: String
        /// What decided, as the audit records name it (`category`,
        /// `local-allow`, `unknown`, ...): the server takes an allow by the
        /// group's own allow list as the school's choice, not a hole.
        public var source: String?

        public init(group: String, name: String, action: String, category: String?, reason: String, source: String? = nil) {
            self.group = group
            self.name = name
            self.action = action
            self.category = category
            self.reason = reason
            self.source = source
        }
    }

    /// The machine's answer to one run.
    public struct Answer: Sendable, Hashable, Codable {
        public var run: String
        /// The version of the rules bundle in force on the machine.
        public var bundleVersion: Int64
        public var results: [Result]

        public init(run: String, bundleVersion: Int64, results: [Result]) {
            self.run = run
            self.bundleVersion = bundleVersion
            self.results = results
        }
    }

    /// Judges every name of `request` for every group with the engine
    /// `engine` gives for the group's audience, in the request's order; a
    /// name listed under two categories is judged once (the server files
    /// the answer under each of its categories).
    public static func judge<Rules: RuleSource>(_ request: Request, engine: (Audience) -> VerdictEngine<Rules>) -> [Result] {
        var results: [Result] = []
        results.reserveCapacity(request.groups.count * request.names.count)
        var names: [String] = []
        var seen: Set<String> = []
        for name in request.names where seen.insert(name.name).inserted { names.append(name.name) }
        for group in request.groups {
            let engine = engine(audience(ofGroup: group))
            for name in names {
                guard let target = try? CheckTarget(utf8: Array(name.utf8)[...]) else { continue }
                let decision = engine.decide(target.facts)
                var reason: [UInt8] = []
                decision.reason.appendDescription(to: &reason)
                results.append(
                    Result(
                        group: group, name: name, action: decision.verdict.actionWord, category: decision.reason.category,
                        reason: String(decoding: reason, as: UTF8.self), source: decision.reason.source.rawValue))
            }
        }
        return results
    }
}
