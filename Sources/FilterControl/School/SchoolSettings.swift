import HallpassConfig
public import SharedStore

/// `school:` in hallpass.yaml: the school's server this machine enrolled
/// with (`filterctl enroll` writes `server` and `fingerprint`, and
/// `bundleKeys` when the server publishes bundles), which gets its audit
/// records and its check-ins. Without `school:` nothing is sent and no
/// record is queued for a server.
///
/// With `bundleKeys`, and no `rules.source`, the rules come from the school's
/// server too (``Configuration/Rules/serverKey``).
public struct SchoolSettings: Sendable, Hashable {
    public var server: SchoolServerURL
    /// The SHA-256 of the server certificate's SubjectPublicKeyInfo: the one key accepted.
    public var fingerprint: ServerFingerprint
    /// The keys the server's bundles are signed with (the enrolment answer's
    /// `bundles.trustedKeys`); empty: the server publishes no bundles.
    public var bundleKeys: [BundlePublicKey] = []
    /// The most bytes of records kept on the machine for the server; past it the oldest go (counted).
    public var queueMaxBytes: Int = 256 << 20
    /// Records older than this (seconds) are dropped unsent (counted).
    public var queueMaxAge: Int = 30 * 86_400

    public init(server: SchoolServerURL, fingerprint: ServerFingerprint) {
        self.server = server
        self.fingerprint = fingerprint
    }

    static let keys = ["server", "fingerprint", "bundleKeys", "queueMaxSize", "queueMaxAge"]

    init(_ node: ConfigNode) throws(ConfigurationError) {
        let fields = try node.mapping(allowed: Self.keys)
        guard let serverNode = fields["server"] else {
            throw node.error("needs 'server' (https://...) and 'fingerprint'; 'filterctl enroll https://SERVER TOKEN' writes both")
        }
        guard let fingerprintNode = fields["fingerprint"] else {
            throw node.error("needs 'fingerprint' (64 hex digits) besides 'server'; 'filterctl enroll https://SERVER TOKEN' writes both")
        }
        let server: SchoolServerURL
        do {
            server = try SchoolServerURL(parsing: try serverNode.string())
        } catch let error as SchoolServerURL.ParseError {
            throw serverNode.error(error.description)
        } catch {
            throw error as! ConfigurationError
        }
        guard let fingerprint = ServerFingerprint(hex: try fingerprintNode.string()) else {
            throw fingerprintNode.error("expected the server's fingerprint: 64 hex digits, as 'hallpass-server fingerprint' prints it")
        }
        self.init(server: server, fingerprint: fingerprint)
        if let keys = fields["bundleKeys"] {
            bundleKeys = try keys.bundlePublicKeys()
        }
        if let size = fields["queueMaxSize"] { queueMaxBytes = try size.byteSize(in: (1 << 20)...(1 << 36)) }
        if let age = fields["queueMaxAge"] { queueMaxAge = try age.duration(minimum: 3600) }
    }

    /// Gives `yaml` (a hallpass.yaml, possibly empty) a `school:` section with
    /// `server`, `fingerprint` and, when given, `bundleKeys`: an existing
    /// top-level `school:` block is replaced whole (its other keys go too),
    /// otherwise the section is added at the end. Everything else, comments
    /// included, stays as it was.
    public static func settingSection(
        in yaml: String, server: SchoolServerURL, fingerprint: ServerFingerprint, bundleKeys: [BundlePublicKey] = []
    ) -> String {
        var section = [
            "school:",
            "  # The school's server (filterctl enroll); records and check-ins go there.",
            "  server: \(server)",
            "  fingerprint: \(fingerprint)",
        ]
        if !bundleKeys.isEmpty {
            section += [
                "  # The server publishes bundles signed with these keys: without rules.source, the rules come from it.",
                "  bundleKeys: [" + bundleKeys.map { "\"\($0)\"" }.joined(separator: ", ") + "]",
            ]
        }
        var lines = yaml.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        func isTopLevel(_ line: String) -> Bool {
            guard let first = line.first else { return false }
            return !first.isWhitespace && first != "#"
        }
        if let start = lines.firstIndex(where: { $0.hasPrefix("school:") }) {
            var end = start + 1
            while end < lines.count, !isTopLevel(lines[end]), lines[end] != "---", lines[end] != "..." { end += 1 }
            // Comments and blank lines right before the next section belong to it.
            while end > start + 1, lines[end - 1].trimmingWhitespace().isEmpty || lines[end - 1].hasPrefix("#") { end -= 1 }
            lines.replaceSubrange(start..<end, with: section)
        } else {
            if let last = lines.last, !last.trimmingWhitespace().isEmpty { lines.append("") }
            lines += section
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
