public import Yams

/// A YAML node with the dotted key it was found under (`rules.refresh`,
/// `listen.port`), so that every complaint about a configuration names the
/// key and its line. The machine's hallpass.yaml and the server's
/// server.yaml are read with it: unknown keys and keys written twice are
/// errors, and values are checked against their range.
public struct ConfigNode {
    public let node: Node
    public let key: String
    /// What the errors call the file: "configuration", "server configuration".
    public let document: String

    public init(_ node: Node, key: String, document: String = ConfigurationError.machineDocument) {
        self.node = node
        self.key = key
        self.document = document
    }

    public func error(_ message: String) -> ConfigurationError {
        ConfigurationError(key: key, line: node.mark.map { $0.line }, message: message, document: document)
    }

    /// The node's keys, each checked against `allowed`; an empty value is an empty mapping.
    public func mapping(allowed: [String]) throws(ConfigurationError) -> [String: ConfigNode] {
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
                    message: "unknown key (known here: \(allowed.joined(separator: ", ")))", document: document)
            }
            guard result[name] == nil else {
                throw ConfigurationError(key: path, line: keyNode.mark.map { $0.line }, message: "the key appears twice", document: document)
            }
            result[name] = ConfigNode(value, key: path, document: document)
        }
        return result
    }

    /// A single value; an empty one (`key:` or `key: ~`) is refused, as a value left out by mistake.
    public func string() throws(ConfigurationError) -> String {
        guard case .scalar(let scalar) = node, node.null == nil else { throw error("expected a single value") }
        return scalar.string
    }

    /// The items of a list; an empty value is an empty list.
    public func list() throws(ConfigurationError) -> [ConfigNode] {
        switch node {
        case .sequence(let sequence):
            return sequence.enumerated().map { ConfigNode($1, key: "\(key)[\($0)]", document: document) }
        case .scalar where node.null != nil:
            return []
        default:
            throw error("expected a list, e.g. [ a, b ]")
        }
    }

    public func integer(in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let value = Int(try string()), range.contains(value) else {
            throw error("expected a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// `true` / `false`, and YAML's yes/no/on/off, in any case.
    public func boolean() throws(ConfigurationError) -> Bool {
        switch try string().lowercased() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        case let text: throw error("expected true or false, got '\(text)'")
        }
    }

    public func choice<Choice: RawRepresentable & CaseIterable>(_ type: Choice.Type) throws(ConfigurationError) -> Choice
    where Choice.RawValue == String {
        let text = try string()
        guard let value = Choice(rawValue: text) else {
            throw error("expected one of \(Choice.allCases.map(\.rawValue).joined(separator: ", ")), got '\(text)'")
        }
        return value
    }

    public func absolutePath() throws(ConfigurationError) -> String {
        let text = try string()
        guard text.hasPrefix("/") else { throw error("expected an absolute path, got '\(text)'") }
        return text
    }

    /// `500ms`, `2s`, or a number of milliseconds.
    public func milliseconds(in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
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

    /// `90s`, `30m`, `6h`, `1d`, or a number of seconds: at least `minimum`, at most 30 days.
    public func duration(minimum: Int) throws(ConfigurationError) -> Int {
        guard let seconds = DurationText.seconds(try string()), seconds >= minimum, seconds <= 30 * 86_400 else {
            throw error("expected a duration like 90s, 30m, 6h or 1d, at least \(minimum) seconds and at most 30 days")
        }
        return seconds
    }

    /// `90s`, `30m`, `6h`, `1d`, or a number of seconds, within `range` (seconds).
    public func duration(in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let seconds = DurationText.seconds(try string()), range.contains(seconds) else {
            throw error("expected a duration like 90s, 30m, 6h or 1d, from \(range.lowerBound) to \(range.upperBound) seconds")
        }
        return seconds
    }

    /// A number of bytes, or with a unit: `512k`, `16M`, `1G` (powers of 1024).
    public func byteSize(in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        let text = try string()
        let units: [Character: Int] = ["k": 1 << 10, "K": 1 << 10, "m": 1 << 20, "M": 1 << 20, "g": 1 << 30, "G": 1 << 30]
        var value: Int?
        if let unit = text.last, let factor = units[unit], let number = Int(text.dropLast()) {
            value = number.multipliedReportingOverflow(by: factor).overflow ? nil : number * factor
        } else {
            value = Int(text)
        }
        guard let value, range.contains(value) else {
            throw error("expected a size like 16M, 512k or a number of bytes, from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }
}

/// Durations as people write them in the configuration files and on the command line.
public enum DurationText {
    /// `90s`, `30m`, `6h`, `7d`, or a bare number of seconds; nil for anything else.
    public static func seconds(_ text: String) -> Int? {
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        if let unit = text.last, let factor = units[unit], let value = Int(text.dropLast()), value >= 0 {
            let (product, overflow) = value.multipliedReportingOverflow(by: factor)
            return overflow ? nil : product
        }
        if let value = Int(text), value >= 0 { return value }
        return nil
    }
}

/// A configuration problem, naming the key (`policy.unknown`) and, where
/// known, the line in the file.
public struct ConfigurationError: Error, Hashable, Sendable, CustomStringConvertible {
    public static let machineDocument = "configuration"
    public static let serverDocument = "server configuration"

    public var key: String
    public var line: Int?
    public var message: String
    /// What the message calls the file (`machineDocument`, `serverDocument`).
    public var document: String

    public init(key: String, line: Int? = nil, message: String, document: String = ConfigurationError.machineDocument) {
        self.key = key
        self.line = line
        self.message = message
        self.document = document
    }

    public var description: String {
        let place = line.map { " (line \($0))" } ?? ""
        return key.isEmpty ? "\(document)\(place): \(message)" : "\(document) key \(key)\(place): \(message)"
    }

    /// Yams's complaint about text that is not YAML, with its line when Yams gives one.
    public init(notYAML error: any Error, document: String = ConfigurationError.machineDocument) {
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
        self.init(key: "", line: line, message: "not valid YAML: \(message)", document: document)
    }
}
