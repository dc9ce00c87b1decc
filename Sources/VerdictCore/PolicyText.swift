/// The policy as filter-data reads it: a small text file that filter-control
/// writes from hallpass.yaml, so the sandboxed process needs no YAML parser.
///
/// ```
/// # hallpass policy (written by filter-control)
/// block all                      # or: block gambling adult
/// allow khanacademy.org          # one entry per line, RulePattern syntax
/// deny games.example.com
/// unknown allow                  # allow | block | ask
/// noName allow                   # allow | block
/// askDefault allow               # allow | block (unknown ask: no answer in time)
/// askTimeout 2000                # milliseconds
/// dnsRewrite 127.0.0.1 ::1 10    # blocked names resolve to these (TTL 10 s); absent: dropped
/// overrideAllow khanacademy.org  # teacher overrides, checked before the lists
/// overrideBlock games.example
/// exam 1767261600                # an exam in force, until (Unix seconds; '-' until stopped)
/// examAllow exams.example.org    # what the exam lets through
/// focus 1767261600               # a live focus or pause in force, until (Unix seconds)
/// focusAllow docs.example.org    # what the focus lets through (none: a pause)
/// locked adult iwf               # categories nothing opens
/// encryptedDNS block             # the bypass keys: block | allow each
/// ech block
/// tunnels block
/// unreadableQUIC block
/// quic allow
/// ssh block
/// proxy 10.0.0.8:3128 [2001:db8::8]:3128   # the school's proxies (absent: none)
/// sshServers 10.0.0.5:22                   # the school's SSH servers (absent: none)
/// safeSearch google youtube-strict   # or: safeSearch none
/// inspectHosts youtube.com =www.google.com   # inspect: (docs/inspection.md); absent: nothing inspected
/// inspectURLs no                 # the bundle's URL entries do not apply (absent: they do)
/// inspectSearchTerms yes
/// inspectVideos allow dQw4w9WgXcQ   # and: inspectVideos block, inspectChannels allow|block
/// inspectYouTubeRestrict strict
/// inspectGoogleDomains school.example
/// inspectMicrosoftTenants 72f988bf-86f1-41af-91ab-2d7cd011db47 school.example
/// neverInspect credit-union.example
/// inspectAnyway dl.google.com
/// ```
/// A file without the bypass lines gets their defaults (every way around
/// the filter blocked, QUIC allowed, no SafeSearch).
public enum PolicyText {
    public struct ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        public var line: Int
        public var reason: String
        public var description: String { "policy line \(line): \(reason)" }
    }

    public static func render(_ policy: Policy) -> String {
        var lines = ["# hallpass policy for filter-data (written by filter-control; edit hallpass.yaml instead)"]
        switch policy.blockedCategories {
        case .all: lines.append("block all")
        case .only(let names): lines.append((["block"] + names.sorted()).joined(separator: " "))
        }
        lines += policy.allow.map { "allow \($0)" }
        lines += policy.deny.map { "deny \($0)" }
        lines.append("unknown \(policy.unknown.rawValue)")
        lines.append("noName \(policy.noName.rawValue)")
        lines.append("askDefault \(policy.askDefault.rawValue)")
        lines.append("askTimeout \(policy.askTimeoutMilliseconds)")
        if let rewrite = policy.dnsRewrite {
            lines.append("dnsRewrite \(rewrite.ipv4) \(rewrite.ipv6) \(rewrite.timeToLive)")
        }
        lines += policy.overrideAllow.map { "overrideAllow \($0)" }
        lines += policy.overrideBlock.map { "overrideBlock \($0)" }
        if let exam = policy.exam {
            lines.append("exam " + (exam.until.map(String.init) ?? "-"))
            lines += exam.allow.map { "examAllow \($0)" }
        }
        if let focus = policy.focus {
            lines.append("focus \(focus.until)")
            lines += focus.allow.map { "focusAllow \($0)" }
        }
        if !policy.locked.isEmpty { lines.append((["locked"] + policy.locked.sorted()).joined(separator: " ")) }
        let bypass = policy.bypass
        lines.append("encryptedDNS \(bypass.encryptedDNS.rawValue)")
        lines.append("ech \(bypass.ech.rawValue)")
        lines.append("tunnels \(bypass.tunnels.rawValue)")
        lines.append("unreadableQUIC \(bypass.unreadableQUIC.rawValue)")
        lines.append("quic \(bypass.quic.rawValue)")
        lines.append("ssh \(bypass.ssh.rawValue)")
        if !bypass.proxies.isEmpty { lines.append((["proxy"] + bypass.proxies.map(\.description)).joined(separator: " ")) }
        if !bypass.sshServers.isEmpty { lines.append((["sshServers"] + bypass.sshServers.map(\.description)).joined(separator: " ")) }
        let engines = SafeSearchEngine.allCases.filter(bypass.safeSearch.contains).map(\.rawValue)
        lines.append("safeSearch " + (engines.isEmpty ? "none" : engines.joined(separator: " ")))
        lines += renderInspection(policy.inspection)
        return lines.joined(separator: "\n") + "\n"
    }

    /// The `inspect` lines: none for a policy that inspects nothing and
    /// changes none of the defaults.
    static func renderInspection(_ inspection: InspectionPolicy) -> [String] {
        var lines: [String] = []
        func list(_ key: String, _ values: [String]) {
            if !values.isEmpty { lines.append(([key] + values).joined(separator: " ")) }
        }
        list("inspectHosts", inspection.hosts.map(\.description))
        if !inspection.urls { lines.append("inspectURLs no") }
        if inspection.searchTerms { lines.append("inspectSearchTerms yes") }
        let youtube = inspection.youtube
        list("inspectVideos allow", youtube.allowVideos.sorted())
        list("inspectVideos block", youtube.blockVideos.sorted())
        list("inspectChannels allow", youtube.allowChannels.sorted())
        list("inspectChannels block", youtube.blockChannels.sorted())
        let headers = inspection.headers
        if let mode = headers.youtubeRestrict { lines.append("inspectYouTubeRestrict \(mode.rawValue)") }
        if let domains = headers.googleAllowedDomains { lines.append((["inspectGoogleDomains"] + domains).joined(separator: " ")) }
        if let tenants = headers.microsoftTenants {
            lines.append((["inspectMicrosoftTenants", tenants.context] + tenants.allow).joined(separator: " "))
        }
        list("neverInspect", inspection.neverInspect.map(\.description))
        list("inspectAnyway", inspection.inspectAnyway)
        return lines
    }

    /// Reads one `inspect...` line into `inspection`; false when `key` is no such line.
    static func parseInspection(_ key: Substring, _ values: ArraySlice<Substring>, into inspection: inout InspectionPolicy, line number: Int)
        throws(ParseError) -> Bool
    {
        func names() throws(ParseError) -> [RulePattern] {
            try values.map { value throws(ParseError) in
                guard let pattern = try? RulePattern(value), case .domain = pattern else {
                    throw ParseError(line: number, reason: "'\(value)' is not a host name pattern")
                }
                return pattern
            }
        }
        func yesNo() throws(ParseError) -> Bool {
            guard values.count == 1, values.first == "yes" || values.first == "no" else {
                throw ParseError(line: number, reason: "expected '\(key) yes|no'")
            }
            return values.first == "yes"
        }
        switch key {
        case "inspectHosts": inspection.hosts = try names()
        case "neverInspect": inspection.neverInspect = try names()
        case "inspectAnyway": inspection.inspectAnyway = values.map { String($0).lowercased() }
        case "inspectURLs": inspection.urls = try yesNo()
        case "inspectSearchTerms": inspection.searchTerms = try yesNo()
        case "inspectVideos", "inspectChannels":
            guard let which = values.first, which == "allow" || which == "block" else {
                throw ParseError(line: number, reason: "expected '\(key) allow|block ID...'")
            }
            let ids = Set(values.dropFirst().map(String.init))
            let valid = key == "inspectVideos" ? ids.allSatisfy(YouTubeID.isVideoID) : ids.allSatisfy { YouTubeID.isChannelID($0) || YouTubeID.handle($0) == $0 }
            guard valid else { throw ParseError(line: number, reason: "'\(key)' names something that is not a YouTube \(key == "inspectVideos" ? "video" : "channel")") }
            switch (key, which) {
            case ("inspectVideos", "allow"): inspection.youtube.allowVideos = ids
            case ("inspectVideos", _): inspection.youtube.blockVideos = ids
            case (_, "allow"): inspection.youtube.allowChannels = ids
            default: inspection.youtube.blockChannels = ids
            }
        case "inspectYouTubeRestrict":
            guard values.count == 1, let mode = RestrictHeaders.YouTubeMode(rawValue: String(values.first!)) else {
                throw ParseError(line: number, reason: "expected 'inspectYouTubeRestrict strict|moderate'")
            }
            inspection.headers.youtubeRestrict = mode
        case "inspectGoogleDomains":
            guard !values.isEmpty else { throw ParseError(line: number, reason: "expected 'inspectGoogleDomains DOMAIN...'") }
            inspection.headers.googleAllowedDomains = values.map(String.init)
        case "inspectMicrosoftTenants":
            guard values.count >= 2, RestrictHeaders.isGUID(values.first!) else {
                throw ParseError(line: number, reason: "expected 'inspectMicrosoftTenants CONTEXT TENANT...'")
            }
            inspection.headers.microsoftTenants = .init(allow: values.dropFirst().map(String.init), context: String(values.first!))
        default:
            return false
        }
        return true
    }

    // Lines and fields are split on scalars, not Characters: a combining mark
    // after a space makes one Character of the two, which would join two fields.

    /// The lines of a policy file (or of a policy set, `PolicySet.parse`).
    static func lines(_ text: String) -> [Substring] {
        text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false).map(Substring.init)
    }

    /// The fields of a line, between spaces, tabs and carriage returns.
    static func fields(_ line: Substring) -> [Substring] {
        line.unicodeScalars.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" }).map(Substring.init)
    }

    public static func parse(_ text: String) throws(ParseError) -> Policy {
        var policy = Policy()
        var sawBlock = false
        for (index, rawLine) in Self.lines(text).enumerated() {
            let number = index + 1
            var line = rawLine
            if let hash = line.unicodeScalars.firstIndex(of: "#") { line = line[..<hash] }
            let fields = Self.fields(line)
            guard let key = fields.first else { continue }
            let values = fields.dropFirst()
            switch key {
            case "block":
                guard !sawBlock else { throw ParseError(line: number, reason: "'block' appears twice") }
                sawBlock = true
                policy.blockedCategories = values == ["all"] ? .all : .only(Set(values.map(String.init)))
            case "allow", "deny", "overrideAllow", "overrideBlock", "examAllow", "focusAllow":
                guard values.count == 1 else { throw ParseError(line: number, reason: "expected '\(key) ENTRY'") }
                let pattern: RulePattern
                do {
                    pattern = try RulePattern(values.first!)
                } catch {
                    throw ParseError(line: number, reason: error.description)
                }
                switch key {
                case "allow": policy.allow.append(pattern)
                case "deny": policy.deny.append(pattern)
                case "overrideAllow": policy.overrideAllow.append(pattern)
                case "overrideBlock": policy.overrideBlock.append(pattern)
                case "focusAllow":
                    guard policy.focus != nil else { throw ParseError(line: number, reason: "'focusAllow' before 'focus'") }
                    policy.focus!.allow.append(pattern)
                default:
                    guard policy.exam != nil else { throw ParseError(line: number, reason: "'examAllow' before 'exam'") }
                    policy.exam!.allow.append(pattern)
                }
            case "exam":
                guard policy.exam == nil else { throw ParseError(line: number, reason: "'exam' appears twice") }
                guard values.count == 1, values.first! == "-" || Int64(values.first!) != nil else {
                    throw ParseError(line: number, reason: "expected 'exam UNTIL' (Unix seconds, or '-')")
                }
                policy.exam = Policy.Exam(allow: [], until: Int64(values.first!))
            case "focus":
                guard policy.focus == nil else { throw ParseError(line: number, reason: "'focus' appears twice") }
                guard values.count == 1, let until = Int64(values.first!) else {
                    throw ParseError(line: number, reason: "expected 'focus UNTIL' (Unix seconds)")
                }
                policy.focus = Policy.Focus(allow: [], until: until)
            case "locked":
                guard policy.locked.isEmpty else { throw ParseError(line: number, reason: "'locked' appears twice") }
                policy.locked = Set(values.map(String.init))
            case "unknown":
                guard values.count == 1, let action = Policy.UnknownAction(rawValue: String(values.first!)) else {
                    throw ParseError(line: number, reason: "expected 'unknown allow|block|ask'")
                }
                policy.unknown = action
            case "noName":
                guard values.count == 1, let action = Policy.NoNameAction(rawValue: String(values.first!)) else {
                    throw ParseError(line: number, reason: "expected 'noName allow|block'")
                }
                policy.noName = action
            case "askDefault":
                guard values.count == 1, let action = Policy.DefaultAction(rawValue: String(values.first!)) else {
                    throw ParseError(line: number, reason: "expected 'askDefault allow|block'")
                }
                policy.askDefault = action
            case "askTimeout":
                guard values.count == 1, let milliseconds = Int(values.first!), (10...60_000).contains(milliseconds) else {
                    throw ParseError(line: number, reason: "expected 'askTimeout MILLISECONDS' (10 to 60000)")
                }
                policy.askTimeoutMilliseconds = milliseconds
            case "dnsRewrite":
                let usage = "expected 'dnsRewrite IPV4 IPV6 TTL' (TTL 0 to 86400 seconds)"
                guard values.count == 3, let ipv4 = IPAddress(String(values[values.startIndex])), ipv4.isIPv4,
                    let ipv6 = IPAddress(String(values[values.startIndex + 1])), !ipv6.isIPv4,
                    let ttl = UInt32(values[values.startIndex + 2]), ttl <= 86_400
                else { throw ParseError(line: number, reason: usage) }
                policy.dnsRewrite = Policy.DNSRewrite(ipv4: ipv4, ipv6: ipv6, timeToLive: ttl)
            case "encryptedDNS", "ech", "tunnels", "unreadableQUIC", "quic", "ssh":
                guard values.count == 1, let action = BypassPolicy.Action(rawValue: String(values.first!)) else {
                    throw ParseError(line: number, reason: "expected '\(key) block|allow'")
                }
                switch key {
                case "encryptedDNS": policy.bypass.encryptedDNS = action
                case "ech": policy.bypass.ech = action
                case "tunnels": policy.bypass.tunnels = action
                case "unreadableQUIC": policy.bypass.unreadableQUIC = action
                case "ssh": policy.bypass.ssh = action
                default: policy.bypass.quic = action
                }
            case "proxy", "sshServers":
                var endpoints: [ProxyEndpoint] = []
                for value in values {
                    guard let endpoint = ProxyEndpoint(value) else {
                        let what = key == "proxy" ? "a proxy" : "an SSH server"
                        throw ParseError(line: number, reason: "'\(value)' is not \(what) (ADDRESS[/LENGTH][:PORT], IPv6 in brackets with a port)")
                    }
                    endpoints.append(endpoint)
                }
                if key == "proxy" { policy.bypass.proxies = endpoints } else { policy.bypass.sshServers = endpoints }
            case "safeSearch":
                var engines: Set<SafeSearchEngine> = []
                if values != ["none"] {
                    for value in values {
                        guard let engine = SafeSearchEngine(rawValue: String(value)) else {
                            let known = SafeSearchEngine.allCases.map(\.rawValue).joined(separator: ", ")
                            throw ParseError(line: number, reason: "'\(value)' is not a SafeSearch engine (\(known), or none)")
                        }
                        engines.insert(engine)
                    }
                }
                policy.bypass.safeSearch = engines
            default:
                guard try parseInspection(key, values, into: &policy.inspection, line: number) else {
                    throw ParseError(line: number, reason: "unknown key '\(key)'")
                }
            }
        }
        return policy
    }
}
