public import VerdictCore

/// Reads rule lists in the formats schools actually get them in, line by line:
///
/// - plain lists: one entry per line in `RulePattern` syntax (`example.com`,
///   `=exact.example.com`, `*.example.com`, `.example.com`, `192.0.2.0/24`,
///   `example.com/path`); UT1 `domains` and `urls` files are plain lists;
/// - hosts files: `0.0.0.0 name [name...]` or `127.0.0.1 name` (any address
///   first); the usual local names (`localhost`, `broadcasthost`, ...) are skipped;
/// - AdBlock-style `||example.com^` lines (without `$` options or paths);
/// - dnsmasq `server=/example.com/` and `address=/example.com/...` lines.
///
/// Blank lines and comments (`#`, `!`, `;`, `[Adblock ...]` headers, and
/// ` #...` after an entry) are ignored. Every other line that cannot be read
/// is skipped and counted with its reason, so a bad line never loses the rest.
public struct RuleListParser: Sendable {
    /// What one list contributed.
    public struct Report: Sendable, Hashable {
        public var domainRules = 0
        public var urlRules = 0
        public var networkRules = 0
        public var skippedLines = 0
        /// The first few skipped lines: line number, the line, and why.
        public var skippedSamples: [SkippedLine] = []

        public var acceptedRules: Int { domainRules + urlRules + networkRules }

        public init() {}

        public mutating func merge(_ other: Report) {
            domainRules += other.domainRules
            urlRules += other.urlRules
            networkRules += other.networkRules
            skippedLines += other.skippedLines
            skippedSamples += other.skippedSamples.prefix(max(0, RuleListParser.sampleLimit - skippedSamples.count))
        }
    }

    public struct SkippedLine: Sendable, Hashable, CustomStringConvertible {
        public var source: String
        public var lineNumber: Int
        public var line: String
        public var reason: String

        public var description: String { "\(source):\(lineNumber): \(reason): \(line)" }
    }

    static let sampleLimit = 20

    private static let hostsFileLocalNames: Set<String> = [
        "localhost", "localhost.localdomain", "local", "broadcasthost", "ip6-localhost", "ip6-loopback",
        "ip6-localnet", "ip6-mcastprefix", "ip6-allnodes", "ip6-allrouters", "ip6-allhosts", "0.0.0.0",
    ]

    public init() {}

    /// Adds every rule of `contents` (the bytes of one list file) to `builder` under `category`.
    /// `sourceName` names the file in the report.
    /// With `urlList` (UT1 `urls` files), `192.0.2.7/42` is a host and path, not a network.
    public func parse(
        _ contents: [UInt8],
        sourceName: String,
        category: CategoryID,
        urlList: Bool = false,
        into builder: inout RuleStoreBuilder
    ) -> Report {
        var report = Report()
        var lineNumber = 0
        var lineStart = 0
        let bytes = contents.span
        while lineStart < bytes.count {
            var lineEnd = lineStart
            while lineEnd < bytes.count, bytes[lineEnd] != UInt8(ascii: "\n") { lineEnd += 1 }
            lineNumber += 1
            parseLine(
                bytes, lineStart, lineEnd, lineNumber: lineNumber, sourceName: sourceName, category: category,
                urlList: urlList, builder: &builder, report: &report)
            lineStart = lineEnd + 1
        }
        return report
    }

    private func parseLine(
        _ bytes: Span<UInt8>, _ lineStart: Int, _ lineEnd: Int, lineNumber: Int, sourceName: String,
        category: CategoryID, urlList: Bool, builder: inout RuleStoreBuilder, report: inout Report
    ) {
        // Trim spaces and a UTF-8 byte order mark.
        var start = lineStart
        var end = lineEnd
        if lineNumber == 1, end - start >= 3, bytes[start] == 0xEF, bytes[start + 1] == 0xBB, bytes[start + 2] == 0xBF { start += 3 }
        while start < end, isSpace(bytes[start]) { start += 1 }
        while end > start, isSpace(bytes[end - 1]) { end -= 1 }
        guard start < end else { return }
        switch bytes[start] {
        case UInt8(ascii: "#"), UInt8(ascii: "!"), UInt8(ascii: ";"), UInt8(ascii: "["):
            return
        default:
            break
        }
        // Cut a trailing comment: " #..." (a '#' right after a space or tab).
        var index = start
        while index < end {
            if bytes[index] == UInt8(ascii: "#"), index > start, isSpace(bytes[index - 1]) {
                end = index
                while end > start, isSpace(bytes[end - 1]) { end -= 1 }
                break
            }
            index += 1
        }

        // The common case first, with no allocation beyond the name: a bare domain.
        if let (fingerprint, labelCount) = bareDomainFingerprint(bytes, start, end) {
            builder.addDomain(fingerprint: fingerprint, labelCount: labelCount, kind: .subtree, category: category)
            report.domainRules += 1
            return
        }

        let line = String(decoding: lineBytes(bytes, start..<end), as: UTF8.self)
        func skip(_ reason: String) {
            report.skippedLines += 1
            if report.skippedSamples.count < RuleListParser.sampleLimit {
                report.skippedSamples.append(SkippedLine(source: sourceName, lineNumber: lineNumber, line: line, reason: reason))
            }
        }
        func add(_ text: Substring) {
            do {
                let pattern = try RulePattern(text, urlList: urlList)
                builder.add(pattern, category: category)
                switch pattern {
                case .domain: report.domainRules += 1
                case .urlPrefix: report.urlRules += 1
                case .network: report.networkRules += 1
                }
            } catch {
                skip(error.description)
            }
        }

        if line.hasPrefix("@@") {
            return skip("AdBlock exception rules (@@) are not supported; put the name in policy.allow instead")
        }
        if line.hasPrefix("||") {
            var body = line.dropFirst(2)
            if body.hasSuffix("^") || body.hasSuffix("^|") {
                body = body[..<body.lastIndex(of: "^")!]
            } else if body.contains("^") {
                return skip("AdBlock rules with options ($...) or paths are not supported")
            }
            guard !body.contains("/"), !body.contains("*"), !body.contains("$") else {
                return skip("AdBlock rules with options ($...), paths or wildcards are not supported")
            }
            return add(body)
        }
        for prefix in ["server=/", "address=/", "local=/"] where line.hasPrefix(prefix) {
            let names = line.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
            // server=/a/b/10.0.0.1: every part but the last (the target) is a domain.
            for name in names.dropLast() where !name.isEmpty { add(name) }
            return
        }

        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        if fields.count >= 2 {
            guard IPAddress(fields[0]) != nil else {
                return skip("expected one entry per line, or a hosts-file line starting with an address")
            }
            for name in fields.dropFirst() where !RuleListParser.hostsFileLocalNames.contains(name.lowercased()) {
                if IPAddress(name) != nil { continue }
                add(name)
            }
            return
        }
        var entry = Substring(line)
        if let colon = entry.firstIndex(of: ":"), entry[colon...].hasPrefix("://") {
            entry = entry[entry.index(colon, offsetBy: 3)...]
        }
        add(entry)
    }

    /// The fingerprint of a line that is nothing but an ordinary host name
    /// (letters, digits, `-`, `_`, dots, at least one letter), or nil for anything else.
    private func bareDomainFingerprint(_ bytes: Span<UInt8>, _ start: Int, _ end: Int) -> (UInt64, Int)? {
        guard end - start <= 253 else { return nil }
        var hasLetter = false
        var labelLength = 0
        var previousDot = true
        for index in start..<end {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "_"):
                hasLetter = true
                labelLength += 1
                previousDot = false
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"):
                labelLength += 1
                previousDot = false
            case UInt8(ascii: "."):
                if previousDot { return nil }
                previousDot = true
                labelLength = 0
            default:
                // Upper case, IDN, paths, markers: the general path handles them.
                return nil
            }
            if labelLength > 63 { return nil }
        }
        guard hasLetter, !previousDot else { return nil }
        var fingerprint: UInt64 = 0
        var labels = 0
        SuffixFingerprints.forEachSuffix(bytes.extracting(start..<end)) { _, value in
            fingerprint = value
            labels += 1
        }
        return (fingerprint, labels)
    }

    /// The bytes of `range`, copied (for the lines that are not a bare domain).
    private func lineBytes(_ bytes: Span<UInt8>, _ range: Range<Int>) -> [UInt8] {
        let line = bytes.extracting(range)
        var copy = [UInt8](repeating: 0, count: line.count)
        for index in line.indices { copy[index] = line[index] }
        return copy
    }

    @inline(__always)
    private func isSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r")
    }
}
