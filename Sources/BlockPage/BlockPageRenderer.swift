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
    /// (3 bytes each) next to a 500-character reason of 3-byte characters:
    /// (768 + 255 + 128) × 3 + 500 × 9 + field names < 8192.
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

    /// The block page (status 403).
    public func blockPage(for request: BlockedRequest, acceptLanguage: String?) -> BlockPageResponse {
        var context = requestContext(request)
        if let link {
            context["link"] = ["text": link.text, "url": link.url(for: request, organization: settings.organization)]
        }
        if case .builtIn(let text) = settings.requestAccess {
            var form: [String: Any] = [
                "text": text,
                "action": Self.requestAccessPath,
                "host": request.host.prefix(utf8Bytes: Self.formHostBytes),
                "url": request.url.prefix(utf8Bytes: Self.formURLBytes),
                "reasonMaxLength": AccessRequestForm.maximumReasonLength,
            ]
            if let category = request.category, !category.isEmpty {
                form["category"] = category.prefix(utf8Bytes: Self.formCategoryBytes)
            }
            context["form"] = form
        }
        return render(.block, status: 403, context: context, acceptLanguage: acceptLanguage)
    }

    /// The page after the built-in form was accepted (status 200); `id` is
    /// the number the server gave the request.
    public func requestReceivedPage(id: String, request: BlockedRequest, acceptLanguage: String?) -> BlockPageResponse {
        var context = requestContext(request)
        context["requestId"] = id.prefix(characters: Self.displayedValueCharacters)
        return render(.received, status: 200, context: context, acceptLanguage: acceptLanguage)
    }

    /// A small page for 400, 404, 405, 413 and other errors. A status
    /// outside 400...599 becomes 500.
    public func errorPage(status: Int, acceptLanguage: String?) -> BlockPageResponse {
        let status = (400...599).contains(status) ? status : 500
        let messageKey =
            switch status {
            case 400: "errorBadRequest"
            case 404: "errorNotFound"
            case 405: "errorMethodNotAllowed"
            case 413: "errorTooLarge"
            default: "errorOther"
            }
        let language = chooseLanguage(acceptLanguage)
        let context: [String: Any] = [
            "status": status,
            "message": strings.strings(for: language)[messageKey] ?? "",
        ]
        return render(.error, status: status, context: context, language: language)
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
