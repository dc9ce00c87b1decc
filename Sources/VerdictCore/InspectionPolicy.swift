// The school's `inspect:` keys (docs/inspection.md): which hosts hallpass is
// to inspect and what it does with their requests. `InspectKeys` is what one
// level of the policy file writes (top level, a group); `InspectionPolicy`
// is what a group ends up with; `InspectionPlan` applies it.

/// A YouTube video ID: 11 characters of `A-Z a-z 0-9 - _`.
public enum YouTubeID {
    public static func isVideoID(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 11 && text.utf8.allSatisfy(isIDByte)
    }

    /// A channel ID: `UC` and 22 characters of the same alphabet.
    public static func isChannelID(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 24 && text.hasPrefix("UC") && text.utf8.allSatisfy(isIDByte)
    }

    /// A handle as a channel's address writes it, `@` included: 3 to 100 letters
    /// (of any script), digits, `_`, `-`, `.`. Handles are compared in lower case.
    public static func handle(_ text: some StringProtocol) -> String? {
        guard text.hasPrefix("@") else { return nil }
        let name = text.dropFirst()
        guard (3...100).contains(name.count), name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || $0 == "." }) else {
            return nil
        }
        return "@" + name.lowercased()
    }

    static func isIDByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default: false
        }
    }
}

/// `inspect.youtube`: videos and channels allowed on a blocked YouTube, or
/// blocked on an allowed one. Channels are channel IDs (`UC...`) or handles
/// (`@name`, kept in lower case).
public struct YouTubeLists: Sendable, Hashable {
    public var allowVideos: Set<String>
    public var blockVideos: Set<String>
    public var allowChannels: Set<String>
    public var blockChannels: Set<String>

    public init(allowVideos: Set<String> = [], blockVideos: Set<String> = [], allowChannels: Set<String> = [], blockChannels: Set<String> = []) {
        self.allowVideos = allowVideos
        self.blockVideos = blockVideos
        self.allowChannels = allowChannels
        self.blockChannels = blockChannels
    }

    public var isEmpty: Bool { allowVideos.isEmpty && blockVideos.isEmpty && allowChannels.isEmpty && blockChannels.isEmpty }

    /// Whether anything is allowed on a YouTube the policy blocks (then its player's own requests are too).
    public var allowsAnything: Bool { !allowVideos.isEmpty || !allowChannels.isEmpty }
}

/// `inspect.headers`: the request headers that make a service restrict
/// itself, each added only on the hosts its owner documents.
public struct RestrictHeaders: Sendable, Hashable {
    public enum YouTubeMode: String, Sendable, Hashable, CaseIterable {
        case strict, moderate

        /// The header's value.
        public var headerValue: String { self == .strict ? "Strict" : "Moderate" }
    }

    /// Microsoft's tenant restrictions (v1): the tenants users may sign in
    /// to, and the school's own directory ID.
    public struct MicrosoftTenants: Sendable, Hashable {
        /// Tenant domains (`school.example`, `school.onmicrosoft.com`) or tenant IDs.
        public var allow: [String]
        /// The directory (tenant) ID that sets the restriction, a GUID.
        public var context: String

        public init(allow: [String], context: String) {
            self.allow = allow
            self.context = context
        }
    }

    /// `YouTube-Restrict` (Google's "Manage YouTube content on your network").
    public var youtubeRestrict: YouTubeMode?
    /// `X-GoogApps-Allowed-Domains` (Google Workspace, "Block access to consumer accounts").
    public var googleAllowedDomains: [String]?
    /// `Restrict-Access-To-Tenants` and `Restrict-Access-Context`.
    public var microsoftTenants: MicrosoftTenants?

    public init(youtubeRestrict: YouTubeMode? = nil, googleAllowedDomains: [String]? = nil, microsoftTenants: MicrosoftTenants? = nil) {
        self.youtubeRestrict = youtubeRestrict
        self.googleAllowedDomains = googleAllowedDomains
        self.microsoftTenants = microsoftTenants
    }

    public var isEmpty: Bool { youtubeRestrict == nil && googleAllowedDomains == nil && microsoftTenants == nil }

    /// The hosts YouTube documents for `YouTube-Restrict` (exactly these names).
    public static let youtubeHosts: [String] = ["www.youtube.com", "m.youtube.com", "youtubei.googleapis.com", "youtube.googleapis.com", "www.youtube-nocookie.com"]
    /// Google asks for the header on every request to google.com and the names below it.
    public static let googleHosts = "google.com"
    /// The hosts Microsoft documents for tenant restrictions (exactly these names).
    public static let microsoftHosts: [String] = ["login.microsoftonline.com", "login.microsoft.com", "login.windows.net"]

    /// The host patterns the headers in force are added on: a header rule's
    /// hosts are inspected, because the header only works there.
    public var hostPatterns: [RulePattern] {
        var patterns: [RulePattern] = []
        func exact(_ names: [String]) -> [RulePattern] { names.compactMap { try? HostName($0) }.map { .domain($0, .exact) } }
        if youtubeRestrict != nil { patterns += exact(Self.youtubeHosts) }
        if googleAllowedDomains != nil, let google = try? HostName(Self.googleHosts) { patterns.append(.domain(google, .subtree)) }
        if microsoftTenants != nil { patterns += exact(Self.microsoftHosts) }
        return patterns
    }

    /// The header fields to set on a request to `host`: the proxy removes
    /// any of the same name the client sent, then adds these.
    public func fields(for host: HostName) -> [HeaderField] {
        var fields: [HeaderField] = []
        let name = host.description
        if let youtubeRestrict, Self.youtubeHosts.contains(name) {
            fields.append(HeaderField(name: "YouTube-Restrict", value: youtubeRestrict.headerValue))
        }
        if let googleAllowedDomains, let google = try? HostName(Self.googleHosts), RulePattern.domain(google, .subtree).coversName(host) {
            fields.append(HeaderField(name: "X-GoogApps-Allowed-Domains", value: googleAllowedDomains.joined(separator: ",")))
        }
        if let microsoftTenants, Self.microsoftHosts.contains(name) {
            fields.append(HeaderField(name: "Restrict-Access-To-Tenants", value: microsoftTenants.allow.joined(separator: ",")))
            fields.append(HeaderField(name: "Restrict-Access-Context", value: microsoftTenants.context))
        }
        return fields
    }

    /// A GUID as Microsoft writes a directory ID: 8-4-4-4-12 hex digits.
    public static func isGUID(_ text: some StringProtocol) -> Bool {
        let groups = text.split(separator: "-", omittingEmptySubsequences: false)
        return groups.map(\.count) == [8, 4, 4, 4, 12] && groups.allSatisfy { $0.utf8.allSatisfy { HexDigit.value(of: $0) != nil } }
    }
}

/// A request header field to set.
public struct HeaderField: Sendable, Hashable, CustomStringConvertible {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    public var description: String { name + ": " + value }
}

/// The `inspect:` keys one level of the school's policy file writes; nil
/// means "as the level below says". A group's `inspect:` replaces the top
/// level's key by key: each key it writes replaces the top level's whole
/// value of that key, the keys it leaves out are the top level's.
public struct InspectKeys: Sendable, Hashable {
    public var hosts: [RulePattern]?
    public var urls: Bool?
    public var youtube: YouTubeLists?
    public var searchTerms: Bool?
    public var headers: RestrictHeaders?
    public var neverInspect: [RulePattern]?
    /// Entries of the built-in never-inspect list, each as written there.
    public var inspectAnyway: [String]?

    public init(
        hosts: [RulePattern]? = nil, urls: Bool? = nil, youtube: YouTubeLists? = nil, searchTerms: Bool? = nil, headers: RestrictHeaders? = nil,
        neverInspect: [RulePattern]? = nil, inspectAnyway: [String]? = nil
    ) {
        self.hosts = hosts
        self.urls = urls
        self.youtube = youtube
        self.searchTerms = searchTerms
        self.headers = headers
        self.neverInspect = neverInspect
        self.inspectAnyway = inspectAnyway
    }

    /// `inspect: none`: nothing is inspected (no hosts, no header rules).
    public static let nothing = InspectKeys(hosts: [], headers: RestrictHeaders())

    public var isEmpty: Bool { self == InspectKeys() }

    /// These keys laid over `policy`.
    public func applied(to policy: InspectionPolicy) -> InspectionPolicy {
        var result = policy
        if let hosts { result.hosts = hosts }
        if let urls { result.urls = urls }
        if let youtube { result.youtube = youtube }
        if let searchTerms { result.searchTerms = searchTerms }
        if let headers { result.headers = headers }
        if let neverInspect { result.neverInspect = neverInspect }
        if let inspectAnyway { result.inspectAnyway = inspectAnyway }
        return result
    }
}

/// What one audience's inspection is, once the levels are laid over each other.
public struct InspectionPolicy: Sendable, Hashable {
    /// Host patterns to inspect (names only).
    public var hosts: [RulePattern]
    /// Whether the bundle's URL rules (category `urls` entries) apply on inspected hosts.
    public var urls: Bool
    public var youtube: YouTubeLists
    /// Whether the search term of a search on an inspected host is captured for the record.
    public var searchTerms: Bool
    public var headers: RestrictHeaders
    /// Names the school adds to the built-in never-inspect list.
    public var neverInspect: [RulePattern]
    /// Entries of the built-in list the school removes, each named exactly.
    public var inspectAnyway: [String]

    public init(
        hosts: [RulePattern] = [], urls: Bool = true, youtube: YouTubeLists = YouTubeLists(), searchTerms: Bool = false,
        headers: RestrictHeaders = RestrictHeaders(), neverInspect: [RulePattern] = [], inspectAnyway: [String] = []
    ) {
        self.hosts = hosts
        self.urls = urls
        self.youtube = youtube
        self.searchTerms = searchTerms
        self.headers = headers
        self.neverInspect = neverInspect
        self.inspectAnyway = inspectAnyway
    }

    /// Whether anything at all is to be inspected.
    public var inspectsAnything: Bool { !hosts.isEmpty || !headers.isEmpty }
}
