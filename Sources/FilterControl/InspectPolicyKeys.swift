// The `inspect:` keys of the school's policy file (docs/inspection.md), at
// the top level of `policy:` and in a group's keys (not in `during:`: what
// is inspected does not follow a schedule). Every problem is an error
// naming the key and its line.

import HallpassConfig
import VerdictCore
import Yams

extension InspectKeys {
    static let fieldNames = ["hosts", "urls", "youtube", "searchTerms", "headers", "neverInspect", "inspectAnyway"]

    /// Reads `inspect:`: a mapping of the keys, or `none` (nothing inspected).
    init(_ node: ConfigNode, builtIn: NeverInspectList) throws(ConfigurationError) {
        if case .scalar = node.node, node.node.null == nil {
            guard try node.string() == "none" else {
                throw node.error("expected a mapping of keys (\(Self.fieldNames.joined(separator: ", "))) or 'none'")
            }
            self = .nothing
            return
        }
        self.init()
        let fields = try node.mapping(allowed: Self.fieldNames)
        if let list = fields["hosts"] {
            hosts = try list.list().map { item throws(ConfigurationError) in
                let pattern = try Self.name(item)
                if case .domain(let host, _) = pattern, host.labelCount < 2 {
                    throw item.error("'\(pattern)' is a whole top-level domain; inspection is for a few sites, name them")
                }
                return pattern
            }
        }
        if let value = fields["urls"] { urls = try value.boolean() }
        if let value = fields["searchTerms"] {
            searchTerms = try value.string().lowercased() == "capture" ? true : value.boolean()
        }
        if let value = fields["youtube"] { youtube = try Self.youtube(value) }
        if let value = fields["headers"] { headers = try Self.headers(value) }
        if let list = fields["neverInspect"] { neverInspect = try list.list().map { item throws(ConfigurationError) in try Self.name(item) } }
        if let list = fields["inspectAnyway"] {
            inspectAnyway = try list.list().map { item throws(ConfigurationError) in
                let text = try item.string()
                if let entry = builtIn.entry(named: text) { return entry.text }
                var message = "'\(text)' is not an entry of hallpass's never-inspect list (rules/never-inspect/names); an entry is removed by naming it exactly"
                if let host = try? HostName(text), let covering = builtIn.entries(covering: host).first {
                    message += " (it is covered by the entry '\(covering.text)' of group \(covering.group))"
                }
                throw item.error(message)
            }
        }
    }

    /// A host name pattern: `example.com`, `=www.example.com`, `*.example.org`.
    private static func name(_ node: ConfigNode) throws(ConfigurationError) -> RulePattern {
        let text = try node.string()
        let pattern: RulePattern
        do {
            pattern = try RulePattern(text)
        } catch {
            throw node.error(error.description)
        }
        guard case .domain = pattern else {
            throw node.error("'\(text)' is not a host name pattern (example.com, =www.example.com, *.example.org): addresses and paths are not inspected by name")
        }
        return pattern
    }

    private static func youtube(_ node: ConfigNode) throws(ConfigurationError) -> YouTubeLists {
        let fields = try node.mapping(allowed: ["allowVideos", "blockVideos", "allowChannels", "blockChannels"])
        func videos(_ key: String) throws(ConfigurationError) -> Set<String> {
            Set(try fields[key]?.list().map { item throws(ConfigurationError) in
                let text = try item.string()
                guard YouTubeID.isVideoID(text) else { throw item.error("'\(text)' is not a YouTube video ID (11 characters of A-Z, a-z, 0-9, '-', '_')") }
                return text
            } ?? [])
        }
        func channels(_ key: String) throws(ConfigurationError) -> Set<String> {
            Set(try fields[key]?.list().map { item throws(ConfigurationError) in
                let text = try item.string()
                if YouTubeID.isChannelID(text) { return text }
                if let handle = YouTubeID.handle(text) { return handle }
                throw item.error("'\(text)' is not a YouTube channel: a channel ID (UC and 22 characters) or a handle (@name)")
            } ?? [])
        }
        let lists = YouTubeLists(
            allowVideos: try videos("allowVideos"), blockVideos: try videos("blockVideos"), allowChannels: try channels("allowChannels"),
            blockChannels: try channels("blockChannels"))
        if let both = lists.allowVideos.intersection(lists.blockVideos).sorted().first {
            throw (fields["blockVideos"] ?? node).error("'\(both)' is in both allowVideos and blockVideos")
        }
        if let both = lists.allowChannels.intersection(lists.blockChannels).sorted().first {
            throw (fields["blockChannels"] ?? node).error("'\(both)' is in both allowChannels and blockChannels")
        }
        return lists
    }

    private static func headers(_ node: ConfigNode) throws(ConfigurationError) -> RestrictHeaders {
        let fields = try node.mapping(allowed: ["youtubeRestrict", "googleAllowedDomains", "microsoftTenants"])
        var headers = RestrictHeaders()
        if let value = fields["youtubeRestrict"] { headers.youtubeRestrict = try value.choice(RestrictHeaders.YouTubeMode.self) }
        if let list = fields["googleAllowedDomains"] {
            let domains = try list.list().map { item throws(ConfigurationError) in try domain(item) }
            guard !domains.isEmpty else { throw list.error("name the school's Google Workspace domains, e.g. [school.example]") }
            headers.googleAllowedDomains = domains
        }
        if let value = fields["microsoftTenants"] {
            let tenant = try value.mapping(allowed: ["allow", "context"])
            guard let allow = tenant["allow"], let context = tenant["context"] else {
                throw value.error("needs allow (the tenants users may sign in to) and context (the school's directory ID)")
            }
            let tenants = try allow.list().map { item throws(ConfigurationError) in try domain(item) }
            guard !tenants.isEmpty else { throw allow.error("name at least one tenant, e.g. [school.example, school.onmicrosoft.com]") }
            let id = try context.string().lowercased()
            guard RestrictHeaders.isGUID(id) else { throw context.error("'\(id)' is not a directory ID (a GUID like 72f988bf-86f1-41af-91ab-2d7cd011db47)") }
            headers.microsoftTenants = RestrictHeaders.MicrosoftTenants(allow: tenants, context: id)
        }
        return headers
    }

    /// A domain (or a tenant ID) for a header's value: a host name, written canonically.
    private static func domain(_ node: ConfigNode) throws(ConfigurationError) -> String {
        let text = try node.string()
        do {
            return try HostName(text).description
        } catch {
            throw node.error("'\(text)' is not a domain: \(error)")
        }
    }
}

extension SchoolPolicy {
    /// The checks that need a level's keys laid over the top level's: a
    /// `hosts` entry the never-inspect list covers whole has no effect, and a
    /// header rule whose hosts are never inspected cannot work. Both are
    /// mistakes a school wants to hear about before publishing.
    static func checkInspection(
        _ policy: InspectionPolicy, level: InspectKeys, node: ConfigNode, builtIn: NeverInspectList
    ) throws(ConfigurationError) {
        guard case .mapping = node.node else { return }  // `inspect: none`
        let plan = InspectionPlan(policy: policy, builtIn: builtIn)
        if level.hosts != nil, let hostsNode = try node.mapping(allowed: InspectKeys.fieldNames)["hosts"] {
            for (item, pattern) in zip(try hostsNode.list(), policy.hosts) {
                guard case .domain(let host, let kind) = pattern, kind != .subdomainsOnly else { continue }
                if case .splice(.neverInspect(let entry, let group)) = plan.choice(for: host) {
                    throw item.error(
                        "'\(pattern)' is never inspected (entry '\(entry)' of \(group == InspectionPlan.schoolGroup ? "neverInspect" : "hallpass's list, group \(group)"))"
                            + (group == InspectionPlan.schoolGroup ? "" : "; name the entry under inspectAnyway to inspect it"))
                }
            }
        }
        guard let headersNode = try node.mapping(allowed: InspectKeys.fieldNames)["headers"] else { return }
        let headers = policy.headers
        var needed: [(String, String)] = []
        if headers.youtubeRestrict != nil { needed += RestrictHeaders.youtubeHosts.map { ("youtubeRestrict", $0) } }
        if headers.googleAllowedDomains != nil { needed.append(("googleAllowedDomains", "accounts.google.com")) }
        if headers.microsoftTenants != nil { needed += RestrictHeaders.microsoftHosts.map { ("microsoftTenants", $0) } }
        for (key, name) in needed {
            guard let host = try? HostName(name), case .splice(.neverInspect(let entry, let group)) = plan.choice(for: host) else { continue }
            throw headersNode.error("\(key) cannot work: \(name) is never inspected (entry '\(entry)', \(group))")
        }
    }
}
