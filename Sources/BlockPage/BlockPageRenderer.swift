import Mustache

/// Turns what was blocked into a complete HTTP response: the block page,
/// the "request received" page and small error pages, in the language the
/// browser prefers. Pure: no I/O after `init`, safe to share between tasks.
public struct BlockPageRenderer: Sendable {
    /// The headers on every response besides `Content-Language`.
    public static let securityHeaders: [(name: String, value: String)] = [
        ("Content-Type", "text/html; charset=utf-8"),
        ("Cache-Control", "no-store"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        (
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        ),
    ]

    /// Where the built-in form posts.
    public static let requestAccessPath = "/request-access"

    /// The longest text shown on a page for a URL, and for each of host,
    /// category, rule, reason and user; longer values end in "…".
    static let displayedURLCharacters = 2048
    static let displayedValueCharacters = 512

    /// The most UTF-8 bytes of each value put in the form's hidden fields,
    /// chosen so that a posted form always fits in
    /// `AccessRequestForm.maximumBodyBytes`, even fully percent-encoded
    /// (3 bytes each) next to a 500-character reason of 3-byte characters
    /// and the 43-character token: (768 + 255 + 128) × 3 + 500 × 9 + 43 +
    /// field names < 8192.
    static let formURLBytes = 768
    static let formHostBytes = AccessRequestForm.maximumHostBytes
    static let formCategoryBytes = 128

    public let settings: BlockPageSettings
    private let strings: LocalizedStrings
    private let templates: [PageKind: MustacheTemplate]
    private let link: RequestAccessLink?
    /// `settings.defaultLanguage` in its usual case (`KO` → `ko`).
    private let defaultLanguage: String

    /// Loads and checks everything now: the request-access settings, the
    /// custom templates and strings if there is a folder, and the default
    /// language. Errors name the file and line.
    public init(settings: BlockPageSettings) throws(BlockPageError) {
        self.settings = settings
        switch settings.requestAccess {
        case .link(let text, let urlTemplate):
            link = try RequestAccessLink(text: text, urlTemplate: urlTemplate, organization: settings.organization)
        case .builtIn(let text):
            guard !text.allSatisfy(\.isWhitespace) else {
                throw BlockPageError(code: "requestAccess.text", message: "blockPage.requestAccess.text is empty; give the form a heading such as \"Ask for access\"")
            }
            link = nil
        case nil:
            link = nil
        }

        let folder = try settings.templateFolder.map { (path) throws(BlockPageError) in try TemplateFolder(path: path) }
        strings = try LocalizedStrings(custom: folder?.strings ?? [])
        var templates: [PageKind: MustacheTemplate] = [:]
        for kind in PageKind.allCases {
            if let custom = folder?.templates[kind] {
                templates[kind] = try PageTemplate.compile(custom.text, file: custom.path)
            } else {
                templates[kind] = kind.builtInTemplate
            }
        }
        self.templates = templates

        defaultLanguage = LanguageTag.canonical(settings.defaultLanguage) ?? settings.defaultLanguage
        guard strings.byLanguage[defaultLanguage] != nil else {
            throw BlockPageError(
                code: "settings.language",
                message: "blockPage.language '\(settings.defaultLanguage)' has no strings; the languages are \(strings.languages.joined(separator: ", "))"
            )
        }
    }

    /// The languages pages can be shown in, sorted.
    public var languages: [String] { strings.languages }

    /// How often a page whose request waits reloads itself, in seconds.
    public static let pendingRefreshSeconds = 2

    /// The block page (status 403). With the built-in form: the form, which
    /// carries `formToken`; or, when `request.accessRequest` says so, where
    /// the student's request stands instead: waiting (the page reloads
    /// itself every `pendingRefreshSeconds`), approved (the page goes on to
    /// the site), or denied (with the message, and the form to ask again).
    /// A request that cannot be made (`offersRequest` false) shows no form.
    public func blockPage(for request: BlockedRequest, acceptLanguage: String?, formToken: String? = nil) -> BlockPageResponse {
        var context = requestContext(request)
        if let link, request.offersRequest {
            context["link"] = ["text": link.text, "url": link.url(for: request, organization: settings.organization)]
        }
        var showsForm = request.offersRequest
        if let status = request.accessRequest {
            var shown: [String: Any] = ["id": status.id.prefix(characters: Self.displayedValueCharacters)]
            if let message = status.message, !message.isEmpty { shown["message"] = message.prefix(characters: Self.displayedValueCharacters) }
            switch status.state {
            case .pending:
                shown["pending"] = true
                context["refresh"] = String(Self.pendingRefreshSeconds)
                showsForm = false
            case .approved:
                shown["approved"] = true
                // Back to the address the student asked for (http(s) only: it is the page's own request).
                if Self.isWebAddress(request.url) {
                    context["refresh"] = "0;url=" + request.url
                    shown["url"] = request.url
                }
                showsForm = false
            case .denied:
                shown["denied"] = true
            }
            context["accessRequest"] = shown
        }
        if case .builtIn(let text) = settings.requestAccess, showsForm {
            var form: [String: Any] = [
                "text": text,
                "action": Self.requestAccessPath,
                "host": request.host.prefix(utf8Bytes: Self.formHostBytes),
                "url": request.url.prefix(utf8Bytes: Self.formURLBytes),
                "reasonMaxLength": AccessRequestForm.maximumReasonLength,
                "token": formToken ?? "",
            ]
            if let category = request.category, !category.isEmpty {
                form["category"] = category.prefix(utf8Bytes: Self.formCategoryBytes)
            }
            context["form"] = form
        }
        return render(.block, status: 403, context: context, acceptLanguage: acceptLanguage)
    }

    /// The page after the built-in form was accepted (status 200); `id` is
    /// the number the server gave the request. It goes back to the blocked
    /// address after `pendingRefreshSeconds`, where the block page shows
    /// how the request stands.
    public func requestReceivedPage(id: String, request: BlockedRequest, acceptLanguage: String?) -> BlockPageResponse {
        var context = requestContext(request)
        context["requestId"] = id.prefix(characters: Self.displayedValueCharacters)
        if Self.isWebAddress(request.url) { context["refresh"] = "\(Self.pendingRefreshSeconds);url=" + request.url }
        return render(.received, status: 200, context: context, acceptLanguage: acceptLanguage)
    }

    /// A small page for 400, 403, 404, 405, 413, 429 and other errors. A
    /// status outside 400...599 becomes 500. `message` is a strings key
    /// that says more than the status (`errorReasonMissing`, ...).
    public func errorPage(status: Int, acceptLanguage: String?, message: String? = nil) -> BlockPageResponse {
        let status = (400...599).contains(status) ? status : 500
        let messageKey =
            message
            ?? {
                switch status {
                case 400: "errorBadRequest"
                case 404: "errorNotFound"
                case 405: "errorMethodNotAllowed"
                case 413: "errorTooLarge"
                default: "errorOther"
                }
            }()
        let language = chooseLanguage(acceptLanguage)
        let table = strings.strings(for: language)
        let context: [String: Any] = [
            "status": status,
            "message": table[messageKey] ?? table["errorOther"] ?? "",
        ]
        return render(.error, status: status, context: context, language: language)
    }

    /// An http:// or https:// address without characters that could end the refresh header's value.
    static func isWebAddress(_ url: String) -> Bool {
        let lowered = url.lowercased()
        return (lowered.hasPrefix("http://") || lowered.hasPrefix("https://"))
            && !url.unicodeScalars.contains { $0.properties.generalCategory == .control || $0 == "\"" || $0 == "'" }
    }

    /// The request-access link for this request; nil when the settings
    /// have no link (no request access, or the built-in form).
    public func requestAccessURL(for request: BlockedRequest) -> String? {
        link?.url(for: request, organization: settings.organization)
    }

    // MARK: Rendering

    private func chooseLanguage(_ acceptLanguage: String?) -> String {
        AcceptLanguage.choose(acceptLanguage, from: languages, default: defaultLanguage)
    }

    /// The request's values, shortened for display; absent and empty
    /// optional values are left out so that `{{#category}}` sections vanish.
    private func requestContext(_ request: BlockedRequest) -> [String: Any] {
        var context: [String: Any] = [
            "host": request.host.prefix(characters: Self.displayedValueCharacters),
            "url": request.url.prefix(characters: Self.displayedURLCharacters),
        ]
        let optional: [(String, String?)] = [
            ("category", request.category), ("rule", request.rule), ("reason", request.reason), ("user", request.user),
        ]
        for (name, value) in optional {
            if let value, !value.isEmpty { context[name] = value.prefix(characters: Self.displayedValueCharacters) }
        }
        if request.inspected { context["inspected"] = true }
        return context
    }

    private func render(_ kind: PageKind, status: Int, context: [String: Any], acceptLanguage: String?) -> BlockPageResponse {
        render(kind, status: status, context: context, language: chooseLanguage(acceptLanguage))
    }

    private func render(_ kind: PageKind, status: Int, context: [String: Any], language: String) -> BlockPageResponse {
        var context = context
        context["lang"] = language
        context["organization"] = settings.organization
        context["t"] = strings.strings(for: language)
        // Every template was compiled in init; the lookup cannot fail.
        let html = templates[kind]?.render(context) ?? ""
        var headers = Self.securityHeaders
        headers.insert(("Content-Language", language), at: 1)
        return BlockPageResponse(status: status, headers: headers, body: Array(html.utf8), language: language)
    }
}

extension String {
    /// At most `limit` characters; a shortened value ends in "…".
    func prefix(characters limit: Int) -> String {
        guard count > limit else { return self }
        return String(prefix(limit - 1)) + "…"
    }

    /// The longest prefix of whole characters with at most `limit` UTF-8 bytes.
    func prefix(utf8Bytes limit: Int) -> String {
        guard utf8.count > limit else { return self }
        var result = ""
        var bytes = 0
        for character in self {
            bytes += character.utf8.count
            guard bytes <= limit else { break }
            result.append(character)
        }
        return result
    }
}
