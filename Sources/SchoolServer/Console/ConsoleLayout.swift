import Foundation
import Hummingbird
import Mustache
import NIOCore

/// The parts of the console the menu links to, each behind one permission.
enum ConsoleSection: String, Sendable, CaseIterable {
    case dashboard, alerts, digests, records, machines, rooms, policy, people, audit, review

    var permission: Permission {
        switch self {
        case .dashboard: .viewDashboard
        case .alerts: .viewAlerts
        case .digests: .viewDigests
        case .records: .viewRecords
        case .machines: .viewMachines
        case .rooms: .controlRoom
        case .policy: .viewPolicy
        case .people: .viewPeople
        case .audit: .viewAudit
        case .review: .viewReview
        }
    }

    var path: String { self == .dashboard ? "/console/" : "/console/\(rawValue)" }

    var labelKey: String { "nav" + rawValue.prefix(1).uppercased() + rawValue.dropFirst() }
}

/// Who asks for a page and how it is to be shown: what the layout needs
/// from the request, apart from the request (for the view-model tests).
struct ConsoleViewer: Sendable {
    /// nil on the sign-in page.
    var principal: Principal?
    var csrfToken: String?
    /// The page's path and query, for the language form to come back to.
    var path: String
    var language: String
    /// `done=` of a redirect after a change, and its `version=`.
    var done: String? = nil
    var doneVersion: String? = nil
}

/// Every page's frame: the header with the school's name, the menu of what
/// the principal may do, who is signed in, the sign-out form, the language form.
struct LayoutModel {
    struct NavItem {
        let id: String
        let label: String
        let href: String
        let current: Bool
    }

    struct LanguageOption {
        let code: String
        let name: String
        let selected: Bool
    }

    let schoolName: String
    let stylesheet: String
    let script: String
    let signedIn: Bool
    let nav: [NavItem]
    let person: String
    let roleLabel: String
    let csrf: String?
    let flash: String?
    let path: String
    let languages: [LanguageOption]
}

/// What a template renders: the page's values under `page`, the layout's
/// under `layout`, the strings under `t`.
struct ConsoleView<Page> {
    let lang: String
    let title: String
    let t: [String: String]
    let layout: LayoutModel
    let page: Page
}

/// Renders the console's pages (ConsoleTemplates) in the viewer's language,
/// and answers them with the console's headers.
struct ConsoleRenderer: Sendable {
    let settings: ConsolePageSettings
    let strings: ConsoleStrings
    let assets: ConsoleAssets
    /// The sections this server serves (people and the audit trail only once
    /// their tables are connected).
    let sections: Set<ConsoleSection>

    init(settings: ConsolePageSettings, sections: Set<ConsoleSection> = Set(ConsoleSection.allCases)) throws(ServerError) {
        self.settings = settings
        self.strings = try ConsoleStrings(folder: settings.stringsFolder, defaultLanguage: settings.language)
        self.assets = .shared
        self.sections = sections
    }

    /// The headers of every page (docs/console.md, "Security headers"): only
    /// the console's own script and stylesheet, no framing, no caching, no
    /// guessing of types, no address sent to other sites.
    static let pageHeaders: [(HTTPFields.Element.Name, String)] = [
        (.contentType, "text/html; charset=utf-8"),
        (.contentSecurityPolicy, "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"),
        (.xContentTypeOptions, "nosniff"),
        (.referrerPolicy, "same-origin"),
        (.cacheControl, "no-store"),
        (HTTPFields.Element.Name("X-Frame-Options")!, "DENY"),
    ]

    func table(_ viewer: ConsoleViewer) -> [String: String] { strings.table(viewer.language) }

    func layout(_ viewer: ConsoleViewer, current: ConsoleSection?) -> LayoutModel {
        let t = table(viewer)
        var nav: [LayoutModel.NavItem] = []
        if let principal = viewer.principal {
            for section in ConsoleSection.allCases where sections.contains(section) && principal.may(section.permission) {
                nav.append(.init(id: section.rawValue, label: t[section.labelKey] ?? section.rawValue, href: section.path, current: section == current))
            }
        }
        let person: String
        switch viewer.principal?.kind {
        case .person(let login): person = login
        case .token(let id): person = "token " + id
        case .command(let user): person = user
        case nil: person = ""
        }
        let languages = strings.languages.map { code in
            LayoutModel.LanguageOption(code: code, name: strings.table(code)["languageName"] ?? code, selected: code == viewer.language)
        }
        return LayoutModel(
            schoolName: settings.schoolName, stylesheet: ConsoleAssets.path + assets.stylesheet.name,
            script: ConsoleAssets.path + assets.script.name, signedIn: viewer.principal != nil, nav: nav, person: person,
            roleLabel: viewer.principal.map { Self.roleLabel($0.role, t) } ?? "", csrf: viewer.csrfToken, flash: flash(viewer, t),
            path: viewer.path, languages: languages)
    }

    static func roleLabel(_ role: Role, _ t: [String: String]) -> String {
        t["role" + role.rawValue.prefix(1).uppercased() + role.rawValue.dropFirst()] ?? role.rawValue
    }

    /// The sentence for a redirect's `done=`: only the ones the console
    /// sends, so a link cannot put words of its own on the page.
    func flash(_ viewer: ConsoleViewer, _ t: [String: String]) -> String? {
        let keys = [
            "revoked": "flashRevoked", "policy-saved": "flashPolicySaved", "published": "flashPublished",
            "publish-pending": "flashPublishPending", "rolled-back": "flashRolledBack", "person-added": "flashPersonAdded",
            "person-changed": "flashPersonChanged", "rule-added": "flashRuleAdded", "rules-ended": "flashRulesEnded",
            "request-approved": "flashRequestApproved", "request-denied": "flashRequestDenied",
            "alert-acknowledge": "flashAlertAcknowledge", "alert-escalate": "flashAlertEscalate", "alert-close": "flashAlertClose",
            "review-recorded": "flashReviewRecorded", "filtering-test-started": "flashFilteringTestStarted",
        ]
        guard let done = viewer.done, let key = keys[done], let text = t[key] else { return nil }
        let version = viewer.doneVersion.flatMap { Int64($0) }.map { String($0) } ?? ""
        return ConsoleText.fill(text, ["version": version])
    }

    func render<Page>(_ template: String, title: String, page: Page, viewer: ConsoleViewer, current: ConsoleSection?) -> String {
        let view = ConsoleView(lang: viewer.language, title: title, t: table(viewer), layout: layout(viewer, current: current), page: page)
        guard let html = ConsoleTemplates.library.render(view, withTemplate: template) else {
            fatalError("the console has no template \(template)")
        }
        return html
    }

    func response<Page>(
        _ template: String, status: HTTPResponse.Status = .ok, title: String, page: Page, viewer: ConsoleViewer, current: ConsoleSection?
    ) -> Response {
        let html = render(template, title: title, page: page, viewer: viewer, current: current)
        var headers = HTTPFields()
        for (name, value) in Self.pageHeaders { headers[name] = value }
        headers[.contentLanguage] = viewer.language
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    struct MessagePage {
        let message: String
        let back: String?
    }

    /// A refusal (403), or a page that is not there (404), as a page with the layout.
    func message(status: HTTPResponse.Status, titleKey: String, messageKey: String, viewer: ConsoleViewer) -> Response {
        let t = table(viewer)
        let back = viewer.principal.map { $0.may(.viewDashboard) } == true ? "/console/" : nil
        return response(
            "message", status: status, title: t[titleKey] ?? "", page: MessagePage(message: t[messageKey] ?? "", back: back), viewer: viewer,
            current: nil)
    }

    func refused(_ viewer: ConsoleViewer, scope: Bool = false) -> Response {
        message(status: .forbidden, titleKey: "titleRefused", messageKey: scope ? "refusedScope" : "refused", viewer: viewer)
    }

    func notFound(_ viewer: ConsoleViewer) -> Response {
        message(status: .notFound, titleKey: "titleNotFound", messageKey: "notFound", viewer: viewer)
    }
}

extension HTTPFields.Element.Name {
    static let referrerPolicy = HTTPFields.Element.Name("Referrer-Policy")!
}
