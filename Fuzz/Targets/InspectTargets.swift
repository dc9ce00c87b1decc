// The fuzz target for the decisions on inspected HTTPS requests (issue 32,
// docs/inspection.md): a server name and a request's Host and target, as a
// client chooses them, through InspectionPlan and RequestAnalysis.
import VerdictCore

enum InspectFuzzing {
    /// A plan with everything on: hosts, the YouTube lists, search terms, every header.
    static let plan: InspectionPlan = {
        let hosts = ["youtube.com", "youtu.be", "google.com", "bing.com", "duckduckgo.com", "blocked.test", "*.example.com"].compactMap { try? RulePattern($0) }
        let lists = YouTubeLists(allowVideos: ["dQw4w9WgXcQ"], blockVideos: ["aaaaaaaaaaa"], allowChannels: ["@mathsclass"], blockChannels: ["UCaaaaaaaaaaaaaaaaaaaaaa"])
        let headers = RestrictHeaders(
            youtubeRestrict: .strict, googleAllowedDomains: ["school.example"],
            microsoftTenants: .init(allow: ["school.example"], context: "72f988bf-86f1-41af-91ab-2d7cd011db47"))
        return InspectionPlan(policy: InspectionPolicy(hosts: hosts, youtube: lists, searchTerms: true, headers: headers))
    }()

    /// Hosts the first byte picks from, so the fuzzer reaches each engine's and YouTube's paths
    /// without having to find their names; the last choice takes the Host from the input.
    static let hosts = ["www.youtube.com", "youtu.be", "www.google.com", "www.bing.com", "duckduckgo.com", "blocked.test", "WWW.YouTube.COM.:443"]

    /// Input: a byte choosing the Host (or, at the last choice, a length byte and the Host's bytes), then the request target.
    static func run(_ input: [UInt8]) {
        var splitter = InputSplitter(input)
        let choice = Int(splitter.byte()) % (hosts.count + 1)
        let host = choice < hosts.count ? Array(hosts[choice].utf8) : splitter.take(Int(splitter.byte()))
        let target = splitter.rest()

        _ = plan.choice(serverName: host)
        _ = plan.choice(serverName: target)
        let result = plan.decide(InspectedRequest(method: Array("GET".utf8), host: host, target: target), engine: Engines.engine)
        let analysis = result.analysis

        require(result.searchTerms.count <= RequestAnalysis.maximumSearchTerms, "\(result.searchTerms.count) search terms")
        for term in result.searchTerms {
            require(!term.isEmpty && term.utf8.count <= RequestAnalysis.maximumSearchTermBytes, "a search term of \(term.utf8.count) bytes")
            require(!term.unicodeScalars.contains { $0.properties.generalCategory == .control }, "a control character in a search term")
            require(term.first != " " && term.last != " ", "a search term with spaces around it")
        }
        require(analysis.videos.count <= RequestAnalysis.maximumVideos && analysis.videos.allSatisfy { YouTubeID.isVideoID($0) }, "videos \(analysis.videos)")
        require(analysis.channel.map { YouTubeID.isChannelID($0) || YouTubeID.handle($0) == $0 } ?? true, "channel \(analysis.channel ?? "")")
        if analysis.host == nil { require(result.decision.verdict == .drop, "a request without a host name is not blocked") }
        if result.decision.verdict == .drop { require(result.headers.isEmpty, "headers on a blocked request") }
        require(analysis.url.map { $0.utf8.count <= 2048 } ?? true, "a URL longer than 2048 bytes")
        if result.decision.reason.category == "youtube.blockVideos", let rule = result.decision.reason.rule, YouTubeID.isVideoID(rule) {
            require(rule == "aaaaaaaaaaa", "blocked as a video not on the list")
        }
        if result.decision.reason.category == "youtube.allowVideos" {
            require(!analysis.videos.isEmpty && analysis.videos.allSatisfy { $0 == "dQw4w9WgXcQ" } && !analysis.unreadableVideo, "allowed with \(analysis.videos)")
        }

        // The path the rules see is already normal: read again, it stays the same.
        if let path = analysis.path, let host = analysis.host {
            // Bytes: a combining mark after the slash makes `hasPrefix("/")` false (the first fuzz finding).
            require(path.utf8.first == UInt8(ascii: "/") && path.utf8.count <= RequestAnalysis.maximumPathBytes, "a path of \(path.utf8.count) bytes")
            if path.utf8.count < RequestAnalysis.maximumPathBytes / 4 {
                let again = RequestAnalysis(InspectedRequest(host: host.description, target: path)).path
                require(again == path, "the path \(path) reads again as \(again ?? "nil")")
            }
        }
    }
}
