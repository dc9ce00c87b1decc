import BundleBuilder
public import Foundation
public import Hummingbird
import Logging
import NIOCore
import VerdictCore

/// A change the console made, for the audit trail: `machine.revoke`,
/// `policy.set`, `policy.rollback`, `publish`, `records.export`.
public struct ConsoleChange: Sendable, Hashable {
    public var action: String
    public var target: String?
    public var reason: String?

    public init(action: String, target: String?, reason: String?) {
        self.action = action
        self.target = target
        self.reason = reason
    }
}

/// The console's pages under /console (docs/console.md). Who is asking is
/// the injected `authenticate` middleware's to find (the session's); every
/// route here checks the principal's permission (`Role.may`) and answers a
/// refusal page otherwise, and the records, the timeline, the dashboard and
/// the machines always keep to the principal's scope.
public struct ConsoleRoutes: Sendable {
    /// What the console tells the rest of the server. The audit trail is
    /// kept elsewhere; the lead connects these to it.
    public struct Hooks: Sendable {
        /// A person's timeline was opened (`timeline.open`), with the user's name.
        public var timelineOpened: @Sendable (Principal, String) async throws -> Void
        /// The console changed something, or exported records.
        public var changed: @Sendable (Principal, ConsoleChange) async throws -> Void

        public init(
            timelineOpened: @escaping @Sendable (Principal, String) async throws -> Void = { _, _ in },
            changed: @escaping @Sendable (Principal, ConsoleChange) async throws -> Void = { _, _ in }
        ) {
            self.timelineOpened = timelineOpened
            self.changed = changed
        }
    }

    /// The tables the console shows but does not keep: its people and the
    /// audit trail. A page whose source is nil is not served (and not in the menu).
    public struct Sources: Sendable {
        public var people: (@Sendable () async throws -> [ConsolePerson])?
        public var auditEvents: (@Sendable (ConsoleAuditQuery) async throws -> ConsoleAuditPage)?

        public init(
            people: (@Sendable () async throws -> [ConsolePerson])? = nil,
            auditEvents: (@Sendable (ConsoleAuditQuery) async throws -> ConsoleAuditPage)? = nil
        ) {
            self.people = people
            self.auditEvents = auditEvents
        }
    }

    let storage: any ServerStorage
    let editor: PolicyEditor
    let publisher: Publisher
    let staleAfter: Int
    let clock: @Sendable () -> Int64
    let time: ConsoleTime
    let openID: Bool
    /// `signIn.local`: whether the sign-in page offers the password form.
    let localSignIn: Bool
    let hooks: Hooks
    let sources: Sources
    let renderer: ConsoleRenderer
    let pseudonymRoles: Set<Role>
    let directory: PseudonymDirectory
    /// The rooms' live rules (nil: no rooms pages).
    let roomControl: RoomControl?
    /// Answers access requests (nil: the console lists none and answers none).
    let requestDesk: AccessRequestDesk?
    /// The filtering test's names of the school's own (`filteringTest:`) and the bundles' built-in categories.
    let filteringTestNames: [FilteringTest.Name]
    let filteringTestProtections: [String]
    /// Makes the digests' previews, as it makes the digests it sends.
    let digestService: DigestService

    /// The cookie of the language chosen with the language form (not a secret).
    static let languageCookie = "hallpass-console-language"
    /// The most records one CSV export holds.
    static let maxExport = 10_000

    /// Loads and checks the strings now: a school's translation with a
    /// mistake stops the server at start, naming the file and line.
    public init(
        storage: any ServerStorage, editor: PolicyEditor, publisher: Publisher, configuration: ServerConfiguration,
        clock: @escaping @Sendable () -> Int64, openIDConfigured: Bool = false, timeZone: TimeZone = .current, hooks: Hooks = Hooks(),
        sources: Sources = Sources(), rooms: RoomControl? = nil, requests: (any AccessRequestLive)? = nil
    ) throws {
        self.roomControl = rooms
        self.requestDesk = requests.map { AccessRequestDesk(storage: storage, live: $0, clock: clock) }
        self.storage = storage
        self.filteringTestNames = configuration.filteringTest
        self.filteringTestProtections = configuration.publishing.builtinProtections ? ProtectionLists.categories : []
        self.editor = editor
        self.publisher = publisher
        self.staleAfter = configuration.machines.staleAfter
        self.clock = clock
        self.time = ConsoleTime(timeZone: timeZone)
        self.openID = openIDConfigured
        self.localSignIn = configuration.signIn.local
        self.hooks = hooks
        self.sources = sources
        var sections: Set<ConsoleSection> = [.dashboard, .alerts, .digests, .records, .machines, .policy, .review]
        if sources.people != nil { sections.insert(.people) }
        if sources.auditEvents != nil { sections.insert(.audit) }
        if rooms != nil { sections.insert(.rooms) }
        self.renderer = try ConsoleRenderer(settings: configuration.consolePages, sections: sections)
        self.pseudonymRoles = configuration.consolePages.pseudonyms
        self.directory = PseudonymDirectory(storage: storage)
        self.digestService = DigestService.make(
            configuration: configuration, storage: storage, logger: Logger(label: "hallpass.console"), clock: clock, timeZone: timeZone, wake: {})
    }

    public func add(to router: Router<ServerRequestContext>, authenticate: some RouterMiddleware<ServerRequestContext>) {
        router.get("/") { _, _ in Self.redirect("/console/") }
        // Before signing in: the sign-in page, the language form, the stylesheet and script.
        router.get("/console/sign-in") { request, context in signIn(request, context) }
        router.get("/console/language") { request, _ in language(request) }
        router.get("/console/assets/{name}") { _, context in asset(context) }

        let console = router.group("/console").add(middleware: authenticate)
        console.get { request, context in try await page(request, context, .viewDashboard) { try await dashboard($0, $1) } }
        console.get("records") { request, context in try await page(request, context, .viewRecords) { try await records(request, $0, $1) } }
        console.get("timeline") { request, context in try await page(request, context, .viewTimeline) { try await timeline(request, $0, $1) } }
        console.get("timeline/export") { request, context in
            try await page(request, context, .exportPerson) { try await exportPerson(request, $0, $1) }
        }
        console.get("machines") { request, context in try await page(request, context, .viewMachines) { try await machines(request, $0, $1) } }
        console.post("machines/{id}/revoke") { request, context in
            try await change(request, context, .revokeMachine) { principal, viewer, _ in try await revoke(context, principal, viewer) }
        }
        console.get("policy") { request, context in
            try await page(request, context, .viewPolicy) { try await policyPage($0, $1, typed: .init(), status: .ok) }
        }
        console.get("policy/versions/{version}") { request, context in
            try await page(request, context, .viewPolicy) { try await policyVersion(context, $0, $1) }
        }
        console.get("policy/diff") { request, context in
            try await page(request, context, .viewPolicy) { try await policyDiff(request, $0, $1) }
        }
        console.post("policy") { request, context in
            try await change(request, context, .editPolicy) { try await setPolicy($0, $1, $2) }
        }
        console.post("policy/form") { request, context in
            try await change(request, context, .editPolicy) { try await setPolicyKeys($0, $1, $2) }
        }
        console.post("policy/publish") { request, context in
            try await change(request, context, .editPolicy) { try await publish($0, $1, $2) }
        }
        console.post("policy/rollback") { request, context in
            try await change(request, context, .editPolicy) { try await rollback($0, $1, $2) }
        }
        if let roomControl { addRooms(to: console, control: roomControl) }
        if let requestDesk { addRequests(to: console, desk: requestDesk) }
        addAlerts(to: console)
        addReview(to: console)
        addDigests(to: console)
        if let people = sources.people {
            console.get("people") { request, context in
                try await page(request, context, .viewPeople) { principal, viewer in
                    let t = renderer.table(viewer)
                    return renderer.response(
                        "people", title: t["titlePeople"] ?? "",
                        page: PeoplePage.make(
                            principal: principal, people: try await people(), time: time, t: t,
                            error: ConsoleForm(request.uri.query ?? "")?["error"]),
                        viewer: viewer, current: .people)
                }
            }
            console.post("people") { request, context in
                try await change(request, context, .managePeople) { try await addPerson($0, $2) }
            }
            console.post("people/{login}") { request, context in
                try await change(request, context, .managePeople) { try await changePerson(context, $0, $2) }
            }
        }
        if let events = sources.auditEvents {
            console.get("audit") { request, context in
                try await page(request, context, .viewAudit) { principal, viewer in try await audit(request, principal, viewer, events) }
            }
        }
    }

    // MARK: The frame of every route

    func viewer(_ request: Request, _ context: ServerRequestContext) -> ConsoleViewer {
        let query = ConsoleForm(request.uri.query ?? "")
        let language = renderer.strings.choose(
            chosen: request.cookies[Self.languageCookie]?.value, acceptLanguage: request.headers[.acceptLanguage])
        var path = request.uri.path
        if let text = request.uri.query, !text.isEmpty, text.utf8.count <= 1500 { path += "?" + text }
        return ConsoleViewer(
            principal: context.principal, csrfToken: context.csrfToken, path: path, language: language, done: query?["done"],
            doneVersion: query?["version"])
    }

    /// A page behind `permission`: refused (403, as a page) without it.
    func page(
        _ request: Request, _ context: ServerRequestContext, _ permission: Permission,
        _ body: (Principal, ConsoleViewer) async throws -> Response
    ) async throws -> Response {
        let viewer = viewer(request, context)
        guard let principal = context.principal, principal.may(permission) else { return renderer.refused(viewer) }
        return try await body(principal, viewer)
    }

    /// A form posted to change something: refused without `permission`, and
    /// without the session's CSRF token in the form's `csrf` field (the
    /// session middleware checks it too; a form here always carries it).
    func change(
        _ request: Request, _ context: ServerRequestContext, _ permission: Permission,
        _ body: (Principal, ConsoleViewer, ConsoleForm) async throws -> Response
    ) async throws -> Response {
        var request = request
        let viewer = viewer(request, context)
        guard let principal = context.principal, principal.may(permission) else { return renderer.refused(viewer) }
        let bytes: ByteBuffer
        do {
            bytes = try await request.collectBody(upTo: APILimits.maxBodyBytes)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            return renderer.message(status: .contentTooLarge, titleKey: "titleRefused", messageKey: "errorForm", viewer: viewer)
        }
        guard let form = ConsoleForm(String(buffer: bytes)) else {
            return renderer.message(status: .badRequest, titleKey: "titleRefused", messageKey: "errorForm", viewer: viewer)
        }
        guard let expected = context.csrfToken, let sent = form["csrf"], ConstantTime.equal(expected, sent) else {
            context.logger.warning("refused a console form without its CSRF token", metadata: ["hallpass.console.path": "\(request.uri.path)"])
            return renderer.refused(viewer)
        }
        return try await body(principal, viewer, form)
    }

    static func redirect(_ location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location, .cacheControl: "no-store"])
    }

    var nowMilliseconds: Int64 { clock() * 1000 }

    func names(for principal: Principal) async throws -> NameShown {
        NameShown(pseudonyms: pseudonymRoles.contains(principal.role) ? try await directory.current() : nil)
    }

    // MARK: Before signing in

    func signIn(_ request: Request, _ context: ServerRequestContext) -> Response {
        let viewer = viewer(request, context)
        let query = ConsoleForm(request.uri.query ?? "")
        let t = renderer.table(viewer)
        return renderer.response(
            "sign-in", title: t["titleSignIn"] ?? "",
            page: SignInPage.make(next: query?["next"], error: query?["error"], openID: openID, local: localSignIn), viewer: viewer, current: nil)
    }

    func language(_ request: Request) -> Response {
        let query = ConsoleForm(request.uri.query ?? "")
        let next = ConsolePaths.localNext(query?["next"]) ?? "/console/"
        var response = Self.redirect(next)
        if let asked = query?["lang"], let tag = ConsoleLanguage.canonical(asked), renderer.strings.byLanguage[tag] != nil {
            response.headers[.setCookie] = "\(Self.languageCookie)=\(tag); Path=/console; Max-Age=31536000; Secure; HttpOnly; SameSite=Lax"
        }
        return response
    }

    func asset(_ context: ServerRequestContext) -> Response {
        guard let name = context.parameters.get("name"), let asset = renderer.assets.asset(named: name) else {
            return Response(status: .notFound, headers: [.contentType: "text/plain; charset=utf-8", .xContentTypeOptions: "nosniff"])
        }
        return Response(
            status: .ok,
            headers: [.contentType: asset.contentType, .cacheControl: "public, max-age=31536000, immutable", .xContentTypeOptions: "nosniff"],
            body: .init(byteBuffer: ByteBuffer(bytes: asset.bytes)))
    }

    // MARK: Dashboard, records, timeline, machines

    func dashboard(_ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let now = nowMilliseconds
        let blocks = try await storage.blockCounts(since: now - DashboardPage.window, until: now, scope: principal.scope)
        let t = renderer.table(viewer)
        var page = DashboardPage.make(
            principal: principal, machines: try await storage.machines(), publishedVersion: try await storage.publishedVersion(),
            staleAfter: staleAfter, blocks: blocks, nowMilliseconds: now, time: time, t: t)
        page.requests = try await requestsPanel(principal: principal, room: nil, back: "/console/", t: t)
        if principal.may(.viewAlerts) {
            let count = try await storage.countAlerts(
                AlertQuery(states: [.new], severity: .danger, scope: principal.scope), atMost: DashboardPage.DangerAlerts.cap)
            page.dangerAlerts = .make(count: count, t: t)
        }
        return renderer.response("dashboard", title: t["titleDashboard"] ?? "", page: page, viewer: viewer, current: .dashboard)
    }

    /// The user a filter names, as the storage knows them: for a principal
    /// who sees pseudonyms only a pseudonym is taken (a name typed in would
    /// tell them whose pseudonym it is), and turned back into the name.
    func resolveUser(_ user: String?, names: NameShown) async throws -> (user: String?, problem: String?) {
        guard let user, names.pseudonyms != nil else { return (user, nil) }
        guard Pseudonyms.isPseudonym(user) else { return (nil, "errorPseudonym") }
        switch try await directory.resolve(user, now: clock()) {
        case .user(let name): return (name, nil)
        case .unknown, .ambiguous: return (nil, "errorPseudonym")
        }
    }

    func records(_ request: Request, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        guard let form = ConsoleForm(request.uri.query ?? "") else { return renderer.notFound(viewer) }
        let (filter, problem) = RecordsFilter.parse(form, nowMilliseconds: nowMilliseconds, time: time)
        // A room or group the scope can never match is refused, as the API
        // refuses it (RecordRoutes.checkFilters), not answered with an empty page.
        do {
            try RecordRoutes.checkFilters(RecordQuery(room: filter.room, group: filter.group), within: principal.scope)
        } catch {
            return renderer.refused(viewer, scope: true)
        }
        let names = try await names(for: principal)
        let resolved = try await resolveUser(filter.user, names: names)
        var problemText = problem.map { t[$0.rawValue] ?? $0.rawValue }
        if problemText == nil, let key = resolved.problem { problemText = ConsoleText.fill(t[key] ?? key, ["name": filter.user ?? ""]) }
        if form["format"] == "csv", problemText == nil, var query = filter.query(time: time, scope: principal.scope, user: resolved.user, limit: 1000) {
            var records: [QueriedRecord] = []
            while records.count < Self.maxExport {
                let page = try await storage.queryRecords(query)
                records += page.records.map(names.forExport)
                guard let next = page.next else { break }
                query.after = next
            }
            try await hooks.changed(principal, ConsoleChange(action: "records.export", target: filter.link("/console/records", after: filter.after), reason: nil))
            return Response(
                status: .ok,
                headers: [
                    .contentType: "text/csv; charset=utf-8; header=present",
                    .contentDisposition: "attachment; filename=\"records-\(filter.since)-\(filter.until).csv\"", .cacheControl: "no-store",
                    .xContentTypeOptions: "nosniff",
                ],
                body: .init(byteBuffer: ByteBuffer(string: RecordsCSV.render(Array(records.prefix(Self.maxExport))))))
        }
        var page: RecordPage?
        if problemText == nil, let query = filter.query(time: time, scope: principal.scope, user: resolved.user, limit: RecordsPage.pageSize) {
            page = try await storage.queryRecords(query)
        }
        let model = RecordsPage.make(filter: filter, problem: problemText, page: page, principal: principal, names: names, time: time, t: t)
        return renderer.response(
            "records", status: problemText == nil ? .ok : .badRequest, title: t["titleRecords"] ?? "", page: model, viewer: viewer,
            current: .records)
    }

    func timeline(_ request: Request, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        guard let form = ConsoleForm(request.uri.query ?? "") else { return renderer.notFound(viewer) }
        let (parsed, problem) = RecordsFilter.parse(form, nowMilliseconds: nowMilliseconds, time: time)
        // A timeline is one person's, every room and kind: only the dates and the page.
        let asked = parsed.user
        let filter = RecordsFilter(since: parsed.since, until: parsed.until, user: asked, after: parsed.after)
        let names = try await names(for: principal)
        var problemText = problem.map { t[$0.rawValue] ?? $0.rawValue }
        var user: String?
        if asked == nil {
            problemText = problemText ?? t["errorUserRequired"]
        } else {
            let resolved = try await resolveUser(asked, names: names)
            user = resolved.user
            if problemText == nil, let key = resolved.problem { problemText = ConsoleText.fill(t[key] ?? key, ["name": asked ?? ""]) }
        }
        var page: RecordPage?
        if problemText == nil, let user, let query = filter.query(time: time, scope: principal.scope, user: user, limit: TimelinePage.pageSize) {
            // Each opening is in the audit trail; its next pages are the same opening.
            if filter.after == nil { try await hooks.timelineOpened(principal, user) }
            page = try await storage.queryRecords(query)
        }
        let shown = asked ?? ""
        let model = TimelinePage.make(
            filter: filter, shownUser: shown, problem: problemText, page: page, principal: principal, names: names, time: time, t: t)
        return renderer.response(
            "timeline", status: problemText == nil ? .ok : .badRequest, title: ConsoleText.fill(t["titleTimeline"] ?? "", ["user": shown]),
            page: model, viewer: viewer, current: .records)
    }

    /// One person's export (PersonExport) as a download, for a role that sees
    /// names; in the audit trail (`person.export`) before it is sent.
    func exportPerson(_ request: Request, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        guard !pseudonymRoles.contains(principal.role) else { return renderer.refused(viewer) }
        guard let user = PersonExport.userName(ConsoleForm(request.uri.query ?? "")?["user"], percentEncoded: false) else {
            return renderer.message(status: .badRequest, titleKey: "titleRefused", messageKey: "errorUserRequired", viewer: viewer)
        }
        let now = clock()
        try await hooks.changed(principal, ConsoleChange(action: "person.export", target: user, reason: nil))
        return PersonExportRoutes.response(PersonExport(storage: storage), user: user, principal: principal, now: now)
    }

    func machines(_ request: Request, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        let state = ConsoleForm(request.uri.query ?? "")?["state"].flatMap(MachineState.init(rawValue:))
        let page = MachinesPage.make(
            principal: principal, machines: try await storage.machines(), state: state, publishedVersion: try await storage.publishedVersion(),
            staleAfter: staleAfter, nowMilliseconds: nowMilliseconds, time: time, t: t)
        return renderer.response("machines", title: t["titleMachines"] ?? "", page: page, viewer: viewer, current: .machines)
    }

    func revoke(_ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        guard let id = context.parameters.get("id"), Secrets.isMachineID(id), let machine = try await storage.machine(id: id) else {
            return renderer.notFound(viewer)
        }
        guard principal.scope.contains(room: machine.room) else { return renderer.refused(viewer, scope: true) }
        _ = try await storage.revokeMachine(id: id, now: clock())
        context.logger.notice("revoked a machine from the console", metadata: ["hallpass.machine": "\(id)", "hallpass.author": "\(principal.author)"])
        try await hooks.changed(principal, ConsoleChange(action: "machine.revoke", target: id, reason: nil))
        return Self.redirect("/console/machines?done=revoked")
    }

    // MARK: Policy

    func policyPage(_ principal: Principal, _ viewer: ConsoleViewer, typed: PolicyPage.Typed, status: HTTPResponse.Status) async throws
        -> Response
    {
        let t = renderer.table(viewer)
        let page = PolicyPage.make(
            principal: principal, latest: try await storage.latestPolicyVersion(), published: try await storage.currentPublication(),
            pending: try await storage.pendingPublication(), history: try await storage.policyVersions(before: nil, limit: PolicyPage.historySize),
            typed: typed, time: time, t: t)
        return renderer.response("policy", status: status, title: t["titlePolicy"] ?? "", page: page, viewer: viewer, current: .policy)
    }

    func policyVersion(_ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        guard let text = context.parameters.get("version"), text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let number = Int64(text),
            let version = try await storage.policyVersion(number)
        else { return renderer.notFound(viewer) }
        let t = renderer.table(viewer)
        return renderer.response(
            "policy-version", title: ConsoleText.fill(t["titlePolicyVersion"] ?? "", ["version": String(number)]),
            page: PolicyVersionPage.make(version, time: time, t: t), viewer: viewer, current: .policy)
    }

    func policyDiff(_ request: Request, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let query = ConsoleForm(request.uri.query ?? "")
        guard let from = query?["from"].flatMap({ Int64($0) }), let to = query?["to"].flatMap({ Int64($0) }), from >= 1, to >= 1 else {
            return renderer.notFound(viewer)
        }
        let diff: PolicyDiff
        do {
            diff = try await PolicyDiffer(storage: storage).diff(from: from, to: to)
        } catch let error as PublishingError where error.kind == .notFound {
            return renderer.notFound(viewer)
        }
        let t = renderer.table(viewer)
        return renderer.response(
            "policy-diff", title: ConsoleText.fill(t["titlePolicyDiff"] ?? "", ["from": String(from), "to": String(to)]),
            page: PolicyDiffPage.make(diff), viewer: viewer, current: .policy)
    }

    /// A form's text as the policy file: a browser sends a textarea's lines
    /// ending in CRLF; the policy's lines end in LF.
    static func policyText(_ text: String) -> String {
        text.replacingOccurrences(of: "\r\n", with: "\n")
    }

    func setPolicy(_ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm) async throws -> Response {
        let yaml = Self.policyText(form["yaml"] ?? "")
        let reason = form["reason"]
        do {
            let stored = try await editor.change(
                policy: .set(yaml), lists: [], removing: [], reason: reason, author: principal.author, now: clock())
            try await hooks.changed(principal, ConsoleChange(action: "policy.set", target: "version \(stored.version)", reason: stored.reason))
            return Self.redirect("/console/policy?done=policy-saved&version=\(stored.version)")
        } catch let error as PublishingError {
            // Shown next to the form, with what the person typed kept.
            return try await policyPage(
                principal, viewer, typed: .init(yaml: yaml, reason: reason, policyError: error.message), status: .badRequest)
        }
    }

    /// The policy form: its keys written into the latest policy file
    /// (`PolicyFormEdit`), saved exactly as the YAML form saves a file. A
    /// refusal shows the file as the form would have saved it in the YAML
    /// box, so that the validator's line numbers point into it.
    func setPolicyKeys(_ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm) async throws -> Response {
        let reason = form["reason"]
        let latest = try await storage.latestPolicyVersion()
        var values: PolicyFormValues?
        var yaml: String?
        do {
            let current = try PolicyFormEdit.read(yaml: latest?.policy)
            let posted = PolicyForm.values(form, current: current.values)
            values = posted
            let edited = try PolicyFormEdit.apply(posted, to: latest?.policy)
            yaml = edited
            let stored = try await editor.change(
                policy: .set(edited), lists: [], removing: [], reason: reason, author: principal.author, now: clock())
            try await hooks.changed(principal, ConsoleChange(action: "policy.set", target: "version \(stored.version)", reason: stored.reason))
            return Self.redirect("/console/policy?done=policy-saved&version=\(stored.version)")
        } catch let error as PublishingError {
            return try await policyPage(
                principal, viewer,
                typed: .init(yaml: yaml != latest?.policy ? yaml : nil, formValues: values, formReason: reason, formError: error.message),
                status: .badRequest)
        }
    }

    func publish(_ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm) async throws -> Response {
        do {
            let outcome = try await publisher.publish(reason: form["reason"], policyVersion: nil, author: principal.author, now: clock())
            let publication = outcome.publication
            try await hooks.changed(
                principal, ConsoleChange(action: "publish", target: "bundle \(publication.bundleVersion)", reason: publication.reason))
            let done = publication.state == .published ? "published" : "publish-pending"
            return Self.redirect("/console/policy?done=\(done)&version=\(publication.bundleVersion)")
        } catch let error as PublishingError {
            return try await policyPage(principal, viewer, typed: .init(publishError: error.message), status: .badRequest)
        }
    }

    func rollback(_ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm) async throws -> Response {
        guard let text = form["version"], let number = Int64(text), number >= 1 else {
            return try await policyPage(principal, viewer, typed: .init(rollbackError: renderer.table(viewer)["errorForm"]), status: .badRequest)
        }
        do {
            let stored = try await editor.rollback(to: number, reason: form["reason"], author: principal.author, now: clock())
            try await hooks.changed(
                principal, ConsoleChange(action: "policy.rollback", target: "version \(number) as version \(stored.version)", reason: stored.reason))
            return Self.redirect("/console/policy?done=rolled-back&version=\(stored.version)")
        } catch let error as PublishingError {
            return try await policyPage(principal, viewer, typed: .init(rollbackError: error.message), status: .badRequest)
        }
    }

    // MARK: Audit trail

    func audit(
        _ request: Request, _ principal: Principal, _ viewer: ConsoleViewer,
        _ events: @Sendable (ConsoleAuditQuery) async throws -> ConsoleAuditPage
    ) async throws -> Response {
        let t = renderer.table(viewer)
        let filter = AuditTrailPage.Filter.parse(ConsoleForm(request.uri.query ?? "") ?? ConsoleForm("")!)
        var page: ConsoleAuditPage?
        var problem: String?
        if let query = filter.query(time: time, limit: AuditTrailPage.pageSize) {
            page = try await events(query)
        } else {
            problem = t["errorDates"]
        }
        let model = AuditTrailPage.make(filter: filter, problem: problem, page: page, names: try await names(for: principal), time: time, t: t)
        return renderer.response(
            "audit", status: problem == nil ? .ok : .badRequest, title: t["titleAudit"] ?? "", page: model, viewer: viewer, current: .audit)
    }
}
