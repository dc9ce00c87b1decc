/// What the block page offers a person who wants a blocked page opened.
public enum RequestAccess: Sendable, Equatable {
    /// A link with `text` to a URL built from `urlTemplate`. The placeholders
    /// `{url}` `{host}` `{category}` `{user}` `{org}` are filled in, each
    /// percent-encoded (only RFC 3986 unreserved characters stay as they are).
    /// The template must start with `http://` or `https://`.
    case link(text: String, urlTemplate: String)
    /// A short form on the page itself (a reason of 1 to 500 characters and
    /// a CSRF token) that posts to `/request-access`; `text` is its heading.
    case builtIn(text: String)
}

/// The block page's settings, from the `blockPage` section of the
/// configuration. Checked once by `BlockPageRenderer.init`.
public struct BlockPageSettings: Sendable {
    /// The name shown on every page (`blockPage.organization`).
    public var organization: String
    /// nil: the page offers no link and no form.
    public var requestAccess: RequestAccess?
    /// A folder with custom `block.mustache`, `received.mustache`,
    /// `error.mustache` and `strings/<lang>.strings`; nil: built-in only.
    public var templateFolder: String?
    /// The language used when the browser's Accept-Language names none that
    /// the page has (`blockPage.language`).
    public var defaultLanguage: String

    public init(
        organization: String,
        requestAccess: RequestAccess? = nil,
        templateFolder: String? = nil,
        defaultLanguage: String = "en"
    ) {
        self.organization = organization
        self.requestAccess = requestAccess
        self.templateFolder = templateFolder
        self.defaultLanguage = defaultLanguage
    }
}

/// What was blocked, as the block page server learned it from the browser
/// and from the decision. All values are raw text; the renderer escapes them.
public struct BlockedRequest: Sendable, Equatable {
    /// The host as the browser asked for it (Host header or SNI).
    public var host: String
    /// The full URL, e.g. `http://blocked.example/path?q=1`, or `https://host/` for HTTPS.
    public var url: String
    /// The category that blocked it, if any.
    public var category: String?
    /// The matching rule, e.g. `gambling: casino.example` or `policy.deny: x`.
    public var rule: String?
    /// A short reason, e.g. `category`, `local deny list`, `unknown name`.
    public var reason: String?
    /// The local user name, when known.
    public var user: String?
    /// This user's latest request for this host, when the page is to show it.
    public var accessRequest: AccessRequestStatus?
    /// false: the form is not offered (a name in a locked category, which
    /// no request can open).
    public var offersRequest: Bool
    /// The request was read by the inspection proxy: the page says the site is inspected and why.
    public var inspected: Bool

    public init(
        host: String,
        url: String,
        category: String? = nil,
        rule: String? = nil,
        reason: String? = nil,
        user: String? = nil,
        accessRequest: AccessRequestStatus? = nil,
        offersRequest: Bool = true,
        inspected: Bool = false
    ) {
        self.host = host
        self.url = url
        self.category = category
        self.rule = rule
        self.reason = reason
        self.user = user
        self.accessRequest = accessRequest
        self.offersRequest = offersRequest
        self.inspected = inspected
    }
}

/// Where a student's request for the blocked host stands, as the block
/// page shows it: waiting (the page refreshes itself), approved (the page
/// goes on to the site) or denied (with the teacher's message).
public struct AccessRequestStatus: Sendable, Equatable {
    public enum State: String, Sendable, Equatable {
        case pending, approved, denied
    }

    public var id: String
    public var state: State
    /// The message the person who decided left, if any.
    public var message: String?

    public init(id: String, state: State, message: String? = nil) {
        self.id = id
        self.state = state
        self.message = message
    }
}

/// A complete HTTP response for the server to write: status, headers and an
/// HTML body. Framing headers (`Content-Length`, `Connection`, `Date`) and
/// `Allow` on a 405 are the server's to add.
public struct BlockPageResponse: Sendable {
    /// 403 for the block page, 200 for "request received", 4xx/5xx for error pages.
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// The language the page was rendered in, e.g. `en`, `ko`.
    public var language: String

    public init(status: Int, headers: [(name: String, value: String)], body: [UInt8], language: String) {
        self.status = status
        self.headers = headers
        self.body = body
        self.language = language
    }

    /// The value of the first header with this name (compared case-insensitively).
    public func header(named name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}
