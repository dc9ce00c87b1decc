/// Picks the page language from an HTTP `Accept-Language` header (RFC 9110
/// section 12.5.4, RFC 4647 lookup).
///
/// - Entries are tried by quality (`q`), highest first; equal qualities keep
///   the browser's order. `q=0` means "not this language".
/// - A tag with a region or script falls back to shorter tags (`ko-KR` →
///   `ko`); a bare tag also matches a longer available one (`zh` → `zh-TW`).
/// - `*` means any language: the default, unless the header refused it.
/// - Malformed entries (bad tag, bad `q`) are skipped, not fatal.
/// - Work is bounded: only the first `maximumHeaderBytes` bytes and the
///   first `maximumEntries` entries are read.
public enum AcceptLanguage {
    public static let maximumEntries = 32
    public static let maximumHeaderBytes = 4096

    /// One usable entry of the header.
    struct Preference: Equatable {
        /// Lowercased language range, or `*`.
        var range: String
        /// Quality in thousandths (0...1000).
        var quality: Int
    }

    /// Returns the spelling from `available` of the best match, or `default`.
    public static func choose(_ header: String?, from available: [String], default defaultLanguage: String) -> String {
        guard let header else { return defaultLanguage }
        let preferences = parse(header)
        let refused = Set(preferences.filter { $0.quality == 0 }.map(\.range))
        let candidates = available.filter { !refused.contains($0.lowercased()) }
        // A stable sort: equal qualities keep the header's order.
        let wanted = preferences.enumerated()
            .filter { $0.element.quality > 0 }
            .sorted { ($0.element.quality, -$0.offset) > ($1.element.quality, -$1.offset) }
            .map(\.element.range)

        for range in wanted {
            if range == "*" {
                if !refused.contains(defaultLanguage.lowercased()) { return defaultLanguage }
                if let first = candidates.first { return first }
                continue
            }
            if let match = lookup(range, in: candidates) { return match }
        }
        return defaultLanguage
    }

    /// RFC 4647 lookup (drop subtags from the end), then a prefix match so
    /// that `zh` finds `zh-TW`.
    private static func lookup(_ range: String, in candidates: [String]) -> String? {
        var tag = Substring(range)
        while !tag.isEmpty {
            if let exact = candidates.first(where: { $0.lowercased() == tag }) { return exact }
            guard let dash = tag.lastIndex(of: "-") else { break }
            tag = tag[..<dash]
        }
        return candidates.first { $0.lowercased().hasPrefix(range + "-") }
    }

    /// The well-formed entries among the first `maximumEntries`.
    static func parse(_ header: String) -> [Preference] {
        let bytes = header.utf8.prefix(maximumHeaderBytes)
        var preferences: [Preference] = []
        // maxSplits bounds the work: the rest of a long header stays in one
        // last piece, which is dropped.
        let entries = bytes.split(separator: UInt8(ascii: ","), maxSplits: maximumEntries, omittingEmptySubsequences: false)
        for entry in entries.prefix(maximumEntries) {
            if let preference = parseEntry(entry) { preferences.append(preference) }
        }
        return preferences
    }

    private static func parseEntry(_ entry: some Collection<UInt8>) -> Preference? {
        let parts = entry.split(separator: UInt8(ascii: ";"), omittingEmptySubsequences: false)
        guard let first = parts.first, let range = languageRange(trimmed(first)) else { return nil }
        var quality: Int?
        for parameter in parts.dropFirst() {
            let text = trimmed(parameter)
            guard let equals = text.firstIndex(of: UInt8(ascii: "=")) else { return nil }
            let name = trimmed(text[..<equals])
            guard name.count == 1, name[name.startIndex] | 0x20 == UInt8(ascii: "q") else { continue }
            guard quality == nil, let value = qualityValue(trimmed(text[text.index(after: equals)...])) else { return nil }
            quality = value
        }
        return Preference(range: range, quality: quality ?? 1000)
    }

    /// `*` or `alpha{1,8}(-alphanum{1,8})*`, lowercased; nil when malformed.
    private static func languageRange(_ bytes: ArraySlice<UInt8>) -> String? {
        if bytes.elementsEqual([UInt8(ascii: "*")]) { return "*" }
        let subtags = bytes.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        guard let primary = subtags.first, (1...8).contains(primary.count), primary.allSatisfy(isLetter) else { return nil }
        for subtag in subtags.dropFirst() {
            guard (1...8).contains(subtag.count), subtag.allSatisfy({ isLetter($0) || isDigit($0) }) else { return nil }
        }
        return String(decoding: bytes.map { isLetter($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// `0`, `0.d`, `0.dd`, `0.ddd`, `1`, `1.0`, `1.00`, `1.000`, in thousandths.
    private static func qualityValue(_ bytes: ArraySlice<UInt8>) -> Int? {
        guard let lead = bytes.first, lead == UInt8(ascii: "0") || lead == UInt8(ascii: "1") else { return nil }
        var rest = bytes.dropFirst()
        var value = lead == UInt8(ascii: "1") ? 1000 : 0
        guard !rest.isEmpty else { return value }
        guard rest.first == UInt8(ascii: "."), rest.count <= 4 else { return nil }
        rest = rest.dropFirst()
        var scale = 100
        for digit in rest {
            guard isDigit(digit) else { return nil }
            value += Int(digit - UInt8(ascii: "0")) * scale
            scale /= 10
        }
        return value <= 1000 ? value : nil
    }

    private static func trimmed(_ bytes: some Collection<UInt8>) -> ArraySlice<UInt8> {
        let array = ArraySlice(bytes)
        let isSpace = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        guard let start = array.firstIndex(where: { !isSpace($0) }), let end = array.lastIndex(where: { !isSpace($0) }) else {
            return []
        }
        return array[start...end]
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20)
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
