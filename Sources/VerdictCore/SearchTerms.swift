// The search term of a search engine's results page, read from its URL: what
// a person typed into Google, Bing, DuckDuckGo, YouTube, Yahoo or Ecosia, or
// into a site's own `/search?q=`. The safeguarding rules' `searchTerms:`
// match it (docs/school-policy.md, "Safeguarding"). A machine sees a URL only
// for plain HTTP and, with `inspect:`, for the requests it inspects; for
// every other flow there is no term to read.
//
// The engines inspection already knows are read by inspection's own code
// (`RequestAnalysis`), so that a term reads the same in an inspected
// request's record and in an alert; only the forms it does not read (Yahoo's
// `p`, Ecosia, any site's `/search?q=`) are added here, with its helpers.

public enum SearchTerms {
    /// A term is cut to this many UTF-8 bytes (at a character's end).
    public static let maximumBytes = 200

    /// The term of the search URL `host` + `pathAndQuery` (`/search?q=...`),
    /// percent- and plus-decoded, runs of spaces made one, at most
    /// `maximumBytes`; nil when the URL is no search page or names no term.
    public static func extract(host: String, pathAndQuery: String) -> String? {
        let analysis = RequestAnalysis(InspectedRequest(host: host, target: pathAndQuery))
        if analysis.searchEngine != nil {
            // An engine inspection knows: its own key only (YouTube's `search_query`, the others' `q`).
            return analysis.searchTerms.first.map(bounded)
        }
        guard let name = analysis.host?.description, let parts = RequestAnalysis.pathAndQuery(Array(pathAndQuery.utf8)[...]),
            let rawQuery = parts.1
        else { return nil }
        let segments = RequestAnalysis.segments(RequestAnalysis.normalizedPath(parts.0)).map { $0.lowercased() }
        let last = segments.last(where: { !$0.isEmpty }) ?? ""
        let key: String
        if (name == "search.yahoo.com" || name.hasSuffix(".search.yahoo.com")) && last == "search" {
            key = "p"
        } else if last == "search" {
            // Ecosia (`www.ecosia.org/search?q=`) and any site's own search page.
            key = "q"
        } else {
            return nil
        }
        var term: String? = nil
        RequestAnalysis.forEachValue(of: key, in: rawQuery) { value in
            guard term == nil else { return }
            let text = RequestAnalysis.searchTerm(value)
            if !text.isEmpty { term = text }
        }
        return term.map(bounded)
    }

    /// The term of a URL as records carry it: `http://host/path?query`
    /// (`https://` for an inspected request), or `host/path?query`.
    public static func extract(url: String) -> String? {
        var rest = Substring(url)
        for scheme in ["http://", "https://"] where rest.count >= scheme.count && rest.prefix(scheme.count).lowercased() == scheme {
            rest = rest.dropFirst(scheme.count)
            break
        }
        let end = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let host = rest[..<end]
        guard !host.isEmpty else { return nil }
        var target = String(rest[end...])
        if target.isEmpty { return nil }
        if target.hasPrefix("?") { target = "/" + target }
        return extract(host: String(host), pathAndQuery: target)
    }

    static func bounded(_ term: String) -> String {
        RequestAnalysis.prefix(term, bytes: maximumBytes)
    }
}
