import Yams

/// A YAML node of server.yaml with the dotted key it was found under, so
/// that every complaint names the key and its line. The same checks as the
/// machine's hallpass.yaml (FilterControl's ConfigNode): unknown keys and
/// keys written twice are errors, values are checked against their range.
/// The server keeps its own copy rather than share the machine's: that one
/// reads the machine's policy keys and throws the machine's error type.
struct ServerConfigNode {
    let node: Node
    let key: String

    init(_ node: Node, key: String) {
        self.node = node
        self.key = key
    }

    func error(_ message: String) -> ServerConfigurationError {
        ServerConfigurationError(key: key, line: node.mark.map { $0.line }, message: message)
    }

    func mapping(allowed: [String]) throws(ServerConfigurationError) -> [String: ServerConfigNode] {
        guard case .mapping(let mapping) = node else {
            if case .scalar = node, node.null != nil { return [:] }
            throw error("expected a mapping of keys (\(allowed.joined(separator: ", ")))")
        }
        var result: [String: ServerConfigNode] = [:]
        for (keyNode, value) in mapping {
            guard let name = keyNode.string else { throw error("a key is not a string") }
            let path = key.isEmpty ? name : key + "." + name
            guard allowed.contains(name) else {
                throw ServerConfigurationError(
                    key: path, line: keyNode.mark.map { $0.line },
                    message: "unknown key (known here: \(allowed.joined(separator: ", ")))")
            }
            guard result[name] == nil else {
                throw ServerConfigurationError(key: path, line: keyNode.mark.map { $0.line }, message: "the key appears twice")
            }
            result[name] = ServerConfigNode(value, key: path)
        }
        return result
    }

    func string() throws(ServerConfigurationError) -> String {
        guard case .scalar(let scalar) = node, node.null == nil else { throw error("expected a single value") }
        return scalar.string
    }

    func integer(in range: ClosedRange<Int>) throws(ServerConfigurationError) -> Int {
        guard let value = Int(try string()), range.contains(value) else {
            throw error("expected a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    func boolean() throws(ServerConfigurationError) -> Bool {
        switch try string() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        case let text: throw error("expected true or false, got '\(text)'")
        }
    }

    func absolutePath() throws(ServerConfigurationError) -> String {
        let text = try string()
        guard text.hasPrefix("/") else { throw error("expected an absolute path, got '\(text)'") }
        return text
    }

    /// `90s`, `30m`, `6h`, `1d`, or a number of seconds, within `range` (seconds).
    func duration(in range: ClosedRange<Int>) throws(ServerConfigurationError) -> Int {
        let text = try string()
        guard let seconds = DurationText.seconds(text), range.contains(seconds) else {
            throw error("expected a duration like 90s, 30m, 6h or 1d, from \(range.lowerBound) to \(range.upperBound) seconds")
        }
        return seconds
    }
}

/// Durations as people write them in server.yaml and on the command line.
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

extension ServerConfigurationError {
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
