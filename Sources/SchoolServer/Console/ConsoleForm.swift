import Foundation

/// `application/x-www-form-urlencoded` as browsers send it, in a query
/// string or a posted form: `name=value` pairs joined by `&`, `+` for a
/// space, `%XX` for a byte. A pair that does not decode (bad percent-escape,
/// not UTF-8) is refused whole: the console never acts on half a form.
struct ConsoleForm: Sendable {
    var pairs: [(name: String, value: String)]

    /// The most pairs read: the policy form posts a pair per ticked box,
    /// for the top level and every group, so a school with many groups and
    /// categories posts some hundreds. The body's size is bounded as well.
    static let maxPairs = 2000

    init?(_ text: String) {
        var pairs: [(String, String)] = []
        for piece in text.split(separator: "&", omittingEmptySubsequences: true) {
            guard pairs.count < Self.maxPairs else { return nil }
            let parts = piece.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.decode(parts[0]), let value = Self.decode(parts.count > 1 ? parts[1] : "") else { return nil }
            pairs.append((name, value))
        }
        self.pairs = pairs
    }

    private static func decode(_ text: Substring) -> String? {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        guard spaced.contains("%") else { return spaced }
        return spaced.removingPercentEncoding
    }

    /// The first value of `name`; nil when absent.
    subscript(_ name: String) -> String? { pairs.first { $0.name == name }?.value }

    /// The first value of `name`, trimmed; nil when absent or blank.
    func text(_ name: String) -> String? {
        guard let value = self[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        return value
    }

    /// A query string of the pairs with a value (for the pages' links), or "".
    static func query(_ pairs: [(String, String?)]) -> String {
        let kept = pairs.compactMap { name, value in value.map { (name, $0) } }
        guard !kept.isEmpty else { return "" }
        return "?" + kept.map { encode($0.0) + "=" + encode($0.1) }.joined(separator: "&")
    }

    /// Percent-encodes everything but unreserved characters (RFC 3986).
    static func encode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(127)))
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }
}
