import SharedStore
import VerdictCore
import Yams

/// A YAML node with the dotted key it was found under, for error messages.
struct ConfigNode {
    let node: Node
    let key: String

    init(_ node: Node, key: String) {
        self.node = node
        self.key = key
    }

    func error(_ message: String) -> ConfigurationError {
        ConfigurationError(key: key, line: node.mark.map { $0.line }, message: message)
    }

    func mapping(allowed: [String]) throws(ConfigurationError) -> [String: ConfigNode] {
        guard case .mapping(let mapping) = node else {
            if case .scalar = node, node.null != nil { return [:] }
            throw error("expected a mapping of keys (\(allowed.joined(separator: ", ")))")
        }
        var result: [String: ConfigNode] = [:]
        for (keyNode, value) in mapping {
            guard let name = keyNode.string else { throw error("a key is not a string") }
            let path = key.isEmpty ? name : key + "." + name
            guard allowed.contains(name) else {
                throw ConfigurationError(
                    key: path, line: keyNode.mark.map { $0.line },
                    message: "unknown key (known here: \(allowed.joined(separator: ", ")))")
            }
            guard result[name] == nil else {
                throw ConfigurationError(key: path, line: keyNode.mark.map { $0.line }, message: "the key appears twice")
            }
            result[name] = ConfigNode(value, key: path)
        }
        return result
    }

    func string() throws(ConfigurationError) -> String {
        guard case .scalar(let scalar) = node else { throw error("expected a single value") }
        return scalar.string
    }

    func list() throws(ConfigurationError) -> [ConfigNode] {
        switch node {
        case .sequence(let sequence):
            return sequence.enumerated().map { ConfigNode($1, key: "\(key)[\($0)]") }
        case .scalar where node.null != nil:
            return []
        default:
            throw error("expected a list, e.g. [ a, b ]")
        }
    }

    func integer(in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let value = Int(try string()), range.contains(value) else {
            throw error("expected a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    func choice<Choice: RawRepresentable & CaseIterable>(_ type: Choice.Type) throws(ConfigurationError) -> Choice
    where Choice.RawValue == String {
        let text = try string()
        guard let value = Choice(rawValue: text) else {
            throw error("expected one of \(Choice.allCases.map(\.rawValue).joined(separator: ", ")), got '\(text)'")
        }
        return value
    }

    func absolutePath() throws(ConfigurationError) -> String {
        let text = try string()
        guard text.hasPrefix("/") else { throw error("expected an absolute path, got '\(text)'") }
        return text
    }

    /// `500ms`, `2s`, or a number of milliseconds.
    func milliseconds(in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        let text = try string()
        var value: Int?
        if text.hasSuffix("ms") {
            value = Int(text.dropLast(2))
        } else if text.hasSuffix("s") {
            value = Int(text.dropLast()).map { $0 * 1000 }
        } else {
            value = Int(text)
        }
        guard let value, range.contains(value) else {
            throw error("expected a duration like 500ms or 2s, from \(range.lowerBound)ms to \(range.upperBound / 1000)s")
        }
        return value
    }

    /// `90s`, `30m`, `6h`, `1d`, or a number of seconds.
    func duration(minimum: Int) throws(ConfigurationError) -> Int {
        let text = try string()
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        var seconds: Int?
        if let unit = text.last, let factor = units[unit], let value = Int(text.dropLast()) {
            seconds = value * factor
        } else if let value = Int(text) {
            seconds = value
        }
        guard let seconds, seconds >= minimum, seconds <= 30 * 86_400 else {
            throw error("expected a duration like 90s, 30m, 6h or 1d, at least \(minimum) seconds and at most 30 days")
        }
        return seconds
    }
}


extension PolicyKeys {
    /// The keys a policy level may set, in hallpass.yaml's `policy:` and in
    /// the school's policy file (top level, groups, schedules).
    static let fieldNames = ["block", "allow", "deny", "unknown", "noName", "askDefault", "askTimeout"] + BypassKeys.fieldNames

    /// Reads the policy keys among `fields` (which the caller checked for unknown keys).
    init(_ fields: [String: ConfigNode]) throws(ConfigurationError) {
        self.init()
        if let block = fields["block"] {
            if case .scalar = block.node, try block.string() == "all" {
                self.block = .all
            } else {
                let names = try block.list().map { node throws(ConfigurationError) in
                    let name = try node.string().lowercased()
                    guard RuleStoreBuilder.isValidCategoryName(name) else {
                        throw node.error("'\(name)' is not a category name (a-z, 0-9, '-', '_')")
                    }
                    return name
                }
                self.block = .only(Set(names))
            }
        }
        if let list = fields["allow"] { self.allow = try list.patterns() }
        if let list = fields["deny"] { self.deny = try list.patterns() }
        if let unknown = fields["unknown"] { self.unknown = try unknown.choice(Policy.UnknownAction.self) }
        if let noName = fields["noName"] { self.noName = try noName.choice(Policy.NoNameAction.self) }
        if let askDefault = fields["askDefault"] { self.askDefault = try askDefault.choice(Policy.DefaultAction.self) }
        if let askTimeout = fields["askTimeout"] { self.askTimeoutMilliseconds = try askTimeout.milliseconds(in: 10...60_000) }
        self.bypass = try BypassKeys(fields)
    }
}

extension ConfigNode {
    /// A list of rule patterns (names, `=exact`, `*.subdomains`, URL prefixes, addresses).
    func patterns() throws(ConfigurationError) -> [RulePattern] {
        try list().map { node throws(ConfigurationError) in
            do {
                return try RulePattern(node.string())
            } catch let error as RulePattern.ParseError {
                throw node.error(error.description)
            } catch {
                throw error as! ConfigurationError
            }
        }
    }
}

extension ConfigurationError {
    /// Yams's complaint about text that is not YAML, with its line when Yams gives one.
    init(notYAML error: any Error) {
        var line: Int? = nil
        var message = "\(error)"
        if let yaml = error as? YamlError {
            switch yaml {
            case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
                line = mark.line
                message = problem
            case .duplicatedKeysInMapping(let duplicates, let context):
                line = context.mark.line
                message = "a key appears twice in one mapping: \(duplicates.joined(separator: ", "))"
            default:
                break
            }
        }
        self.init(key: "", line: line, message: "not valid YAML: \(message)")
    }
}
