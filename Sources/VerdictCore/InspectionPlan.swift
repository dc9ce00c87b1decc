// One audience's inspection, ready to answer the proxy's two questions:
// at a connection's start, inspect this name or splice it; and for each
// request on an inspected connection, allow or block, with the search term,
// the video and the headers to add. Pure and immutable, like VerdictEngine:
// build one per (policy, audience) and share it.

/// Whether a connection to a name is inspected, and why not.
public enum HostChoice: Sendable, Hashable, CustomStringConvertible {
    case inspect
    case splice(SpliceReason)

    public var isInspect: Bool { self == .inspect }

    public var description: String {
        switch self {
        case .inspect: "inspect"
        case .splice(let reason): "splice (\(reason))"
        }
    }
}

public enum SpliceReason: Sendable, Hashable, CustomStringConvertible {
    /// No `inspect.hosts` entry and no header rule names it.
    case notInspected
    /// A never-inspect entry covers it: `group` is the built-in list's group, or `school` for `inspect.neverInspect`.
    case neverInspect(entry: String, group: String)
    /// The server name is not a host name (or is an address).
    case notAName

    public var description: String {
        switch self {
        case .notInspected: "not inspected"
        case .neverInspect(let entry, let group): "never inspected: \(entry) (\(group))"
        case .notAName: "not a host name"
        }
    }
}

/// The decision on one inspected request, and what goes with it.
public struct InspectedDecision: Sendable, Hashable {
    /// Allow or block (or ask, with `unknown: ask`), with the reason, as every decision has.
    public var decision: Decision
    public var analysis: RequestAnalysis
    /// The search terms, when `inspect.searchTerms` captures them (empty otherwise).
    public var searchTerms: [String]
    /// The header fields to set on the request when it goes on (empty when it is blocked).
    public var headers: [HeaderField]
}

public struct InspectionPlan: Sendable {
    public let policy: InspectionPolicy
    private let hosts: [RulePattern]
    private let headerHosts: [RulePattern]
    /// The built-in list less `inspectAnyway`, then the school's own entries.
    private let neverInspect: [NeverInspectList.Entry]

    /// The group `neverInspect` entries of the school's own are reported under.
    public static let schoolGroup = "school"

    /// `builtIn` is hallpass's list; `inspectAnyway` names that are not in it are ignored here (the policy file refuses them).
    public init(policy: InspectionPolicy, builtIn: NeverInspectList = .builtIn) {
        self.policy = policy
        self.hosts = policy.hosts.filter { if case .domain = $0 { true } else { false } }
        self.headerHosts = policy.headers.hostPatterns
        let removed = Set(policy.inspectAnyway.map { $0.lowercased() })
        self.neverInspect = builtIn.entries.filter { !removed.contains($0.text) }
            + policy.neverInspect.map { NeverInspectList.Entry(text: $0.description, pattern: $0, group: Self.schoolGroup) }
    }

    /// Whether anything is inspected at all (the proxy and the kernel redirect are needed).
    public var inspectsAnything: Bool { !hosts.isEmpty || !headerHosts.isEmpty }

    /// The names whose subtrees hold every name some plan of `policies`
    /// inspects, for the interception CA's name constraints (an X.509 dNSName
    /// constraint permits a name and every name below it): each `hosts` entry
    /// and each header rule's host by its name (`=www.google.com` and
    /// `*.example.org` become www.google.com and example.org, a little wider
    /// than the entry), sorted, each once, none below another of the list.
    public static func constraintNames(_ policies: some Sequence<InspectionPolicy>) -> [String] {
        var names = Set<String>()
        for policy in policies where policy.inspectsAnything {
            for pattern in policy.hosts + policy.headers.hostPatterns {
                if case .domain(let host, _) = pattern { names.insert(host.description) }
            }
        }
        return names.sorted().filter { name in !names.contains { name.hasSuffix("." + $0) } }
    }

    /// Inspect or splice a connection whose ClientHello names `serverName` (bytes as sent).
    public func choice(serverName: some Collection<UInt8>) -> HostChoice {
        guard serverName.count <= 1024, let host = try? HostName(bytes: serverName) else { return .splice(.notAName) }
        return choice(for: host)
    }

    /// Never-inspect wins over `inspect.hosts`; a header rule's host is
    /// inspected, and inspected anyway when only the built-in identity
    /// providers' entries cover it (the headers work only there).
    public func choice(for host: HostName) -> HostChoice {
        if host.isIPv4Literal { return .splice(.notAName) }
        let headerRule = headerHosts.contains { $0.coversName(host) }
        for entry in neverInspect where entry.pattern.coversName(host) {
            if headerRule, entry.group == NeverInspectList.identityGroup { continue }
            return .splice(.neverInspect(entry: entry.text, group: entry.group))
        }
        if headerRule || hosts.contains(where: { $0.coversName(host) }) { return .inspect }
        return .splice(.notInspected)
    }

    /// A name this plan inspects that a server certificate with these
    /// subject alternative DNS names is valid for, matched as browsers match
    /// them (RFC 6125 section 6.4.3, as Chrome and Firefox apply it: a `*`
    /// only as the whole leftmost label, standing for exactly one label, and
    /// never directly over a name of one label, `*.com`); nil when it covers
    /// none. The proxy refuses to splice to a server whose certificate covers
    /// an inspected name: the browser would send that name's requests over
    /// the spliced connection (HTTP/2 coalescing, domain fronting).
    ///
    /// A wildcard covers an inspected name when an `inspect.hosts` entry or a
    /// header rule's host is one label below its base (`*.google.com` covers
    /// `=www.google.com`), or covers the names one label below it wholesale
    /// (`youtube.com` and `*.youtube.com` entries for `*.youtube.com`); the
    /// never-inspect list still applies, to a name of that level no entry
    /// names (`certificateCheckLabel`).
    public func inspectedName(coveredBy certificateNames: some Sequence<String>) -> String? {
        for written in certificateNames {
            var name = written.lowercased()
            if name.hasSuffix(".") { name.removeLast() }
            guard name.hasPrefix("*.") else {
                if let host = try? HostName(name), choice(for: host).isInspect { return host.description }
                continue
            }
            let base = String(name.dropFirst(2))
            guard base.contains("."), let baseHost = try? HostName(base) else { continue }
            for candidate in namesOneLabelBelow(baseHost.description) {
                if let host = try? HostName(candidate), choice(for: host).isInspect { return candidate }
            }
        }
        return nil
    }

    /// The label of a name no list names, for what a wildcard covers wholesale (`inspectedName(coveredBy:)`).
    public static let certificateCheckLabel = "hallpass-certificate-check"

    /// Names one label below `base` that some inspecting pattern may cover:
    /// a pattern's own name at that level, and a name no list names when a
    /// pattern covers every name of that level.
    private func namesOneLabelBelow(_ base: String) -> [String] {
        var names: [String] = []
        for pattern in hosts + headerHosts {
            guard case .domain(let host, let kind) = pattern else { continue }
            let name = host.description
            if kind != .subdomainsOnly, name.hasSuffix("." + base), !name.dropLast(base.count + 1).contains(".") { names.append(name) }
            if kind != .exact, base == name || base.hasSuffix("." + name) { names.append(Self.certificateCheckLabel + "." + base) }
        }
        return names
    }

    /// The decision on a request of an inspected connection.
    ///
    /// The engine decides first, with the request's path (the policy's lists,
    /// the teachers' overrides, the exam, the categories, URL rules among them
    /// unless `inspect.urls` is false). Then, on YouTube's hosts, the
    /// `inspect.youtube` lists, as the most specific entries of the school's
    /// lists: they change a decision of the lists, the categories or the
    /// unknown-name default, never one of an exam, a teacher's override or a
    /// bypass rule. A video or channel on a block list blocks; on an allow list
    /// it opens a blocked YouTube for that page (and the player's own
    /// requests), when every video the request names is on it.
    public func decide<Rules: RuleSource>(_ request: InspectedRequest, engine: VerdictEngine<Rules>) -> InspectedDecision {
        let analysis = RequestAnalysis(request)
        let terms = policy.searchTerms ? analysis.searchTerms : []
        guard let host = analysis.host else {
            let decision = Decision(.drop, Reason(source: .inspectBlock, category: "request", rule: "the Host is not a host name"))
            return InspectedDecision(decision: decision, analysis: analysis, searchTerms: terms, headers: [])
        }
        let facts = FlowFacts(
            host: host, nameSource: .inspectedRequest, path: analysis.path ?? "/", destination: request.destination, destinationPort: 443,
            transport: .tcp, uid: request.uid)
        var decision = engine.decide(facts, categoryURLRules: policy.urls)
        if analysis.isYouTube, !policy.youtube.isEmpty, let changed = youtubeDecision(analysis, over: decision) { decision = changed }
        let headers = decision.verdict == .drop ? [] : policy.headers.fields(for: host)
        return InspectedDecision(decision: decision, analysis: analysis, searchTerms: terms, headers: headers)
    }

    /// The `inspect.youtube` lists over the engine's decision; nil: it stands.
    private func youtubeDecision(_ analysis: RequestAnalysis, over decision: Decision) -> Decision? {
        switch decision.reason.source {
        case .exam, .examList, .focus, .focusList, .overrideAllow, .overrideBlock, .bypass, .unknownUser, .awaitingName: return nil
        default: break
        }
        let lists = policy.youtube
        if let video = analysis.videos.first(where: lists.blockVideos.contains) {
            return Decision(.drop, Reason(source: .inspectBlock, category: "youtube.blockVideos", rule: video))
        }
        if analysis.unreadableVideo, analysis.videos.count >= RequestAnalysis.maximumVideos, !lists.blockVideos.isEmpty {
            return Decision(.drop, Reason(source: .inspectBlock, category: "youtube.blockVideos", rule: "more than \(RequestAnalysis.maximumVideos) videos in one request"))
        }
        if let channel = analysis.channel, lists.blockChannels.contains(channel) {
            return Decision(.drop, Reason(source: .inspectBlock, category: "youtube.blockChannels", rule: channel))
        }
        guard decision.verdict != .allow else { return nil }
        if !analysis.videos.isEmpty, !analysis.unreadableVideo, analysis.videos.allSatisfy(lists.allowVideos.contains) {
            return Decision(.allow, Reason(source: .inspectAllow, category: "youtube.allowVideos", rule: analysis.videos.joined(separator: ",")))
        }
        if let channel = analysis.channel, analysis.videos.isEmpty, !analysis.unreadableVideo, lists.allowChannels.contains(channel) {
            return Decision(.allow, Reason(source: .inspectAllow, category: "youtube.allowChannels", rule: channel))
        }
        if let prefix = analysis.playerResource, lists.allowsAnything {
            return Decision(.allow, Reason(source: .inspectAllow, category: "youtube.player", rule: prefix))
        }
        return nil
    }
}

extension SchoolPolicy {
    /// The inspection `audience` gets: the top level's `inspect:` keys, then
    /// its group's (system flows: the `systemUsers` group's, if any).
    public func inspection(for audience: Audience) -> InspectionPolicy {
        var result = topLevel.inspect.applied(to: InspectionPolicy())
        let name: String? =
            switch audience {
            case .group(let name): name
            case .ungrouped, .person: nil
            case .system: systemUsers
            }
        if let name, let group = groups.first(where: { $0.name == name }) { result = group.policy.inspect.applied(to: result) }
        return result
    }

    /// The plan for `audience`.
    public func inspectionPlan(for audience: Audience, builtIn: NeverInspectList = .builtIn) -> InspectionPlan {
        InspectionPlan(policy: inspection(for: audience), builtIn: builtIn)
    }
}
