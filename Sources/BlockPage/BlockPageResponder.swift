/// One request to the block page, as the server read it.
public struct BlockPageRequest: Sendable {
    public var method: String
    /// The request target (`/path?query`).
    public var target: String
    /// The Host header (or the TLS server name), without a port.
    public var host: String?
    public var acceptLanguage: String?
    public var body: [UInt8]
    /// `http` or `https`, for the blocked URL shown.
    public var scheme: String
    /// The local user of the browser's connection, when it could be found.
    public var user: String?

    public init(
        method: String, target: String, host: String?, acceptLanguage: String? = nil, body: [UInt8] = [], scheme: String = "http",
        user: String? = nil
    ) {
        self.method = method
        self.target = target
        self.host = host
        self.acceptLanguage = acceptLanguage
        self.body = body
        self.scheme = scheme
        self.user = user
    }
}

/// What the block page needs from filter-control.
public protocol BlockPageBackend: Sendable {
    /// Why `host` (and `url`) is blocked: category, rule and reason from the
    /// rules in force, and where this user's request for it stands.
    func explain(host: String, url: String, user: String?) -> BlockedRequest
    /// Records a request for access (its token already checked); returns its
    /// id, or an error to show: `requests.user-pending` and
    /// `requests.user-daily` (the student's limits), `requests.locked` (a
    /// name no request can open), others (the store).
    func submit(_ form: AccessRequestForm, user: String?) -> Result<String, BlockPageError>
    /// The form's CSRF tokens, with a secret that lives as long as filter-control.
    var formTokens: RequestFormTokens { get }
}

/// Routes a request to a page: any GET or HEAD shows the block page for
/// the host the browser asked for; a POST to `/request-access` records a
/// request (with `requestAccess.url: builtin`); anything else gets a small
/// error page. Pure apart from the backend; tested without sockets.
public struct BlockPageResponder: Sendable {
    public let renderer: BlockPageRenderer
    public let backend: any BlockPageBackend
    /// The names and addresses that mean "the block page itself" (a direct
    /// visit): the page then takes the blocked URL from `?url=`.
    public let ownNames: Set<String>

    public init(renderer: BlockPageRenderer, backend: any BlockPageBackend, ownNames: Set<String>) {
        self.renderer = renderer
        self.backend = backend
        self.ownNames = ownNames
    }

    public func respond(to request: BlockPageRequest) -> BlockPageResponse {
        let path = request.target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "/"
        switch request.method {
        case "GET", "HEAD":
            guard let (host, url) = blockedTarget(request) else {
                return renderer.errorPage(status: 404, acceptLanguage: request.acceptLanguage)
            }
            let blocked = backend.explain(host: host, url: url, user: request.user)
            return renderer.blockPage(
                for: blocked, acceptLanguage: request.acceptLanguage, formToken: backend.formTokens.token(user: request.user, host: blocked.host))
        case "POST" where path == BlockPageRenderer.requestAccessPath:
            guard case .builtIn = renderer.settings.requestAccess else {
                return renderer.errorPage(status: 404, acceptLanguage: request.acceptLanguage)
            }
            let form: AccessRequestForm
            do {
                form = try AccessRequestForm.parse(request.body)
            } catch {
                let (status, message): (Int, String?) =
                    switch error.code {
                    case "form.too-large": (413, nil)
                    case "form.reason-missing": (400, "errorReasonMissing")
                    case "form.reason-too-long": (400, "errorReasonTooLong")
                    default: (400, nil)
                    }
                return renderer.errorPage(status: status, acceptLanguage: request.acceptLanguage, message: message)
            }
            // The token is for the owner of this connection and this host: a
            // form posted from another site, or by another local user, is refused.
            guard backend.formTokens.verify(form.token, user: request.user, host: form.host) else {
                return renderer.errorPage(status: 403, acceptLanguage: request.acceptLanguage, message: "errorFormExpired")
            }
            switch backend.submit(form, user: request.user) {
            case .success(let id):
                let shown = BlockedRequest(host: form.host, url: form.url, category: form.category, user: request.user)
                return renderer.requestReceivedPage(id: id, request: shown, acceptLanguage: request.acceptLanguage)
            case .failure(let error):
                let (status, message): (Int, String?) =
                    switch error.code {
                    case "requests.user-pending": (429, "errorTooManyPending")
                    case "requests.user-daily": (429, "errorTooManyToday")
                    case "requests.locked": (403, "errorLocked")
                    default: (503, nil)
                    }
                return renderer.errorPage(status: status, acceptLanguage: request.acceptLanguage, message: message)
            }
        case "POST":
            return renderer.errorPage(status: 404, acceptLanguage: request.acceptLanguage)
        default:
            var response = renderer.errorPage(status: 405, acceptLanguage: request.acceptLanguage)
            response.headers.append((name: "Allow", value: "GET, HEAD, POST"))
            return response
        }
    }

    /// The blocked host and URL: from the Host header when the browser was
    /// sent here by a rewritten DNS answer, from `?url=` on a direct visit.
    func blockedTarget(_ request: BlockPageRequest) -> (host: String, url: String)? {
        let host = request.host?.lowercased()
        if let host, !host.isEmpty, !ownNames.contains(host) {
            let display = host.contains(":") ? "[\(host)]" : host
            return (host, "\(request.scheme)://\(display)\(request.target.hasPrefix("/") ? request.target : "/")")
        }
        guard let query = request.target.split(separator: "?", maxSplits: 1).dropFirst().first else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0] == "url", let url = Self.percentDecoded(parts[1]),
                let blockedHost = Self.host(of: url)
            else { continue }
            return (blockedHost, url)
        }
        return nil
    }

    /// The host of an http(s) URL, lower-cased, without port or brackets.
    static func host(of url: String) -> String? {
        guard let range = url.range(of: "://") else { return nil }
        let scheme = url[..<range.lowerBound].lowercased()
        guard scheme == "http" || scheme == "https" else { return nil }
        var authority = url[range.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if authority.hasPrefix("["), let end = authority.firstIndex(of: "]") {
            let inner = authority[authority.index(after: authority.startIndex)..<end]
            return inner.isEmpty ? nil : inner.lowercased()
        }
        let host = authority.split(separator: ":", maxSplits: 1).first.map(String.init) ?? ""
        return host.isEmpty ? nil : host.lowercased()
    }

    /// `%XX` and `+` decoded as in the form; nil for a bad escape or bytes that are not UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        try? AccessRequestForm.decode(Array(text.utf8)[...], field: "url")
    }
}
