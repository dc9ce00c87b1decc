import Foundation
import HallpassConfig
@testable import SchoolServer
import Testing

/// The console's view models and their rendering, without a server: what
/// each page shows to whom, escaping, the menu per role, the CSRF field in
/// every form, pseudonyms, the strings and the dates.
@Suite struct ConsolePagesTests {
    static let renderer = try! ConsoleRenderer(settings: ConsolePageSettings())
    static let csrf = "csrf-token-of-this-session"
    static let london = ConsoleTime(timeZone: TimeZone(identifier: "Europe/London")!)
    static let t = renderer.strings.table("en")
    /// 2025-11-28T09:00:00Z.
    static let now: Int64 = 1_764_320_400_000

    static func principal(_ role: Role, _ scope: Scope = .school) -> Principal {
        Principal(kind: .person("p-\(role.rawValue)"), role: role, scope: scope)
    }

    static func viewer(_ principal: Principal?, language: String = "en") -> ConsoleViewer {
        ConsoleViewer(principal: principal, csrfToken: principal == nil ? nil : csrf, path: "/console/", language: language)
    }

    static let hostileUser = #"<script>alert("u")</script>'&"#
    static let hostileHost = #""><img src=x onerror=alert(1)>.example"#

    static func record(
        _ sequence: Int64, user: String? = "alice", host: String? = "casino.example", machine: String = "m-aaaaaaaaaaaaaaaaaaaa",
        room: String = "lab2", hostname: String = "lab2-pc07"
    ) -> QueriedRecord {
        QueriedRecord(
            stored: StoredRecord(
                machine: machine, timeMilliseconds: now - 60_000 + sequence,
                record: MachineRecord(
                    sequence: sequence, time: "", uid: 1001, user: user, group: "students", kind: "tls", host: host, url: nil, action: "block",
                    category: "gambling", reason: "category")),
            room: room, hostname: hostname)
    }

    static func recordsHTML(_ records: [QueriedRecord], principal: Principal, names: NameShown = NameShown(pseudonyms: nil)) -> String {
        let (filter, _) = RecordsFilter.parse(ConsoleForm("")!, nowMilliseconds: now, time: london)
        let page = RecordsPage.make(
            filter: filter, problem: nil, page: RecordPage(records: records, next: nil), principal: principal, names: names, time: london, t: t)
        return renderer.render("records", title: "Records", page: page, viewer: viewer(principal), current: .records)
    }

    // MARK: Escaping

    @Test func aHostileUserNameAndHostAreEscapedEverywhere() throws {
        let html = Self.recordsHTML(
            [Self.record(1, user: Self.hostileUser, host: Self.hostileHost, hostname: "<b>pc</b>")], principal: Self.principal(.admin))
        #expect(!html.contains("<script>alert"))
        #expect(!html.contains("<img src=x"))
        #expect(!html.contains("<b>pc</b>"))
        #expect(html.contains("&lt;script&gt;alert(&quot;u&quot;)&lt;/script&gt;&#39;&amp;"))
        #expect(html.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;.example"))
        // In the timeline link the name is percent-encoded, then escaped as an attribute.
        #expect(html.contains("/console/timeline?user=%3Cscript%3Ealert%28%22u%22%29%3C%2Fscript%3E%27%26&amp;since="))

        // A school's name and a person's login as well.
        var settings = ConsolePageSettings()
        settings.schoolName = "<i>Hill</i> & \"Dale\""
        let renderer = try ConsoleRenderer(settings: settings)
        let principal = Principal(kind: .person("<svg onload=x>"), role: .admin, scope: .school)
        let page = renderer.render(
            "message", title: "T", page: ConsoleRenderer.MessagePage(message: "<u>m</u>", back: nil), viewer: Self.viewer(principal),
            current: nil)
        #expect(page.contains("&lt;i&gt;Hill&lt;/i&gt; &amp; &quot;Dale&quot;"))
        #expect(page.contains("&lt;svg onload=x&gt;"))
        #expect(page.contains("&lt;u&gt;m&lt;/u&gt;"))
        #expect(!page.contains("<svg") && !page.contains("<u>") && !page.contains("<i>"))
    }

    @Test func noTemplateWritesAValueUnescaped() {
        for (name, text) in ConsoleTemplates.all {
            for tag in ["{{{", "{{&", "{{=", "{{%"] { #expect(!text.contains(tag), "\(name) has \(tag)") }
            // Every page is inside the layout: one frame, one set of headers and menus.
            if name != "layout" { #expect(text.hasPrefix("{{<layout}}{{$content}}"), "\(name)") }
        }
    }

    // MARK: The layout

    @Test(arguments: Role.personRoles)
    func theMenuShowsWhatTheRoleMayDo(role: Role) {
        let principal = Self.principal(role, role == .teacher ? Scope(rooms: ["lab2"]) : .school)
        let html = Self.renderer.render(
            "dashboard", title: "D",
            page: DashboardPage.make(
                principal: principal, machines: [], publishedVersion: 0, staleAfter: 300, blocks: [], nowMilliseconds: Self.now,
                time: Self.london, t: Self.t),
            viewer: Self.viewer(principal), current: .dashboard)
        for section in ConsoleSection.allCases {
            #expect(html.contains("id=\"nav-\(section.rawValue)\"") == role.may(section.permission), "\(role) \(section)")
        }
        #expect(html.contains(#"<a id="nav-dashboard" href="/console/" aria-current="page">"#))
        #expect(html.contains(#"<strong id="signed-in-as">p-\#(role.rawValue)</strong>"#))
        #expect(html.contains(#"<form method="post" action="/console/sign-out" class="inline">"#))
        #expect(html.contains(#"<form method="post" action="/console/sign-out-everywhere" class="inline">"#))
        #expect(html.contains(##"<a class="skip" href="#main">"##))
        #expect(html.contains(#"<main id="main" tabindex="-1">"#))
        // Teachers: never the policy, people or audit trail.
        if role == .teacher {
            #expect(!html.contains("nav-policy") && !html.contains("nav-people") && !html.contains("nav-audit"))
            #expect(html.contains("rooms lab2; groups none"))
        }
    }

    @Test func aSectionNotConnectedIsNotInTheMenu() throws {
        let renderer = try ConsoleRenderer(settings: ConsolePageSettings(), sections: [.dashboard, .records, .machines, .policy])
        let html = renderer.render(
            "message", title: "T", page: ConsoleRenderer.MessagePage(message: "m", back: nil), viewer: Self.viewer(Self.principal(.admin)),
            current: nil)
        #expect(html.contains("nav-policy"))
        #expect(!html.contains("nav-people") && !html.contains("nav-audit"))
    }

    /// Every form that posts carries the session's CSRF token.
    @Test func everyFormThatPostsCarriesTheCSRFField() throws {
        let admin = Self.principal(.admin)
        let machine = StoredMachine(
            id: "m-aaaaaaaaaaaaaaaaaaaa", publicKey: "k", room: "lab2", hostname: "pc1", version: "1", enrolledAt: 0, revokedAt: nil,
            storedThrough: 0, recordsDropped: 0, checkInAt: nil, lastCheckIn: nil, previousQueueDrops: nil)
        let version = StoredPolicyVersion(version: 2, createdAt: 1, author: "person:a", reason: "r", policy: "policy: { block: [adult] }\n", lists: [])
        let first = StoredPolicyVersion(version: 1, createdAt: 0, author: "person:a", reason: "r", policy: nil, lists: [])
        let person = ConsolePerson(
            login: "dsl", displayName: "D", role: .safeguarding, scope: .school, method: "local", disabled: false, lastSignInAt: nil)
        let pages: [(String, String)] = [
            (
                "machines",
                Self.renderer.render(
                    "machines", title: "M",
                    page: MachinesPage.make(
                        principal: admin, machines: [machine], state: nil, publishedVersion: 0, staleAfter: 300, nowMilliseconds: Self.now,
                        time: Self.london, t: Self.t), viewer: Self.viewer(admin), current: .machines)
            ),
            (
                "policy",
                Self.renderer.render(
                    "policy", title: "P",
                    page: PolicyPage.make(
                        principal: admin, latest: version, published: nil, pending: nil, history: [version, first], typed: .init(),
                        time: Self.london, t: Self.t), viewer: Self.viewer(admin), current: .policy)
            ),
            (
                "people",
                Self.renderer.render(
                    "people", title: "P", page: PeoplePage.make(principal: admin, people: [person], time: Self.london, t: Self.t),
                    viewer: Self.viewer(admin), current: .people)
            ),
            ("records", Self.recordsHTML([Self.record(1)], principal: admin)),
        ]
        for (name, html) in pages {
            let forms = html.components(separatedBy: "<form").dropFirst()
            let posting = forms.filter { $0.hasPrefix(#" method="post""#) }
            #expect(!posting.isEmpty)
            for form in posting {
                let body = form.components(separatedBy: "</form>")[0]
                #expect(body.contains(#"<input type="hidden" name="csrf" value="\#(Self.csrf)">"#), "\(name): \(body.prefix(120))")
            }
        }
        // What each page posts: revoke; save, publish, roll back; people; and sign-out on all.
        #expect(pages[0].1.contains(#"action="/console/machines/m-aaaaaaaaaaaaaaaaaaaa/revoke""#))
        #expect(pages[1].1.contains(#"action="/console/policy""#) && pages[1].1.contains(#"action="/console/policy/publish""#))
        #expect(pages[1].1.contains(#"action="/console/policy/rollback""#))
        #expect(pages[2].1.contains(#"action="/console/people/dsl""#) && pages[2].1.contains(#"action="/console/people""#))
    }

    @Test func theHeadersOfEveryPage() {
        let response = Self.renderer.notFound(Self.viewer(Self.principal(.auditor)))
        #expect(response.status == .notFound)
        let headers = response.headers
        #expect(headers[.contentSecurityPolicy]?.contains("default-src 'self'") == true)
        #expect(headers[.contentSecurityPolicy]?.contains("frame-ancestors 'none'") == true)
        #expect(headers[.contentSecurityPolicy]?.contains("unsafe-inline") == false)
        #expect(headers[.xContentTypeOptions] == "nosniff")
        #expect(headers[.referrerPolicy] == "same-origin")
        #expect(headers[.cacheControl] == "no-store")
        #expect(headers[.contentLanguage] == "en")
    }

    // MARK: Sign-in

    @Test func theSignInPageShowsItsErrorOnlyWhenAsked() {
        func html(error: String?, openID: Bool, next: String?) -> String {
            Self.renderer.render(
                "sign-in", title: "Sign in", page: SignInPage.make(next: next, error: error, openID: openID), viewer: Self.viewer(nil),
                current: nil)
        }
        let plain = html(error: nil, openID: false, next: "/console/records?user=a")
        #expect(!plain.contains("sign-in-error"))
        #expect(!plain.contains("/console/oidc/start"))
        #expect(plain.contains(#"<input type="hidden" name="next" value="/console/records?user=a">"#))
        #expect(plain.contains(#"<label for="login">Login</label>"#) && plain.contains(#"<label for="password">Password</label>"#))
        #expect(!plain.contains("nav-dashboard"))
        #expect(!plain.contains("/console/sign-out"))
        let failed = html(error: "1", openID: true, next: "//evil.example/")
        #expect(failed.contains("The login or the password is not right"))
        // A sign-in through the provider that came back without one says so, in its own words.
        let provider = html(error: "oidc-no-role", openID: true, next: nil)
        #expect(provider.contains("has no role in this console") && !provider.contains("The login or the password"))
        #expect(!html(error: "<script>", openID: true, next: nil).contains("sign-in-error"))
        // With signIn.local off, no password form: only the school's account.
        let providerOnly = Self.renderer.render(
            "sign-in", title: "Sign in", page: SignInPage.make(next: nil, error: nil, openID: true, local: false), viewer: Self.viewer(nil),
            current: nil)
        #expect(!providerOnly.contains("sign-in-form") && !providerOnly.contains("type=\"password\"") && providerOnly.contains("sign-in-oidc"))
        #expect(failed.contains(#"<p class="error" role="alert" id="sign-in-error">"#))
        #expect(failed.contains(#"href="/console/oidc/start?next=%2Fconsole%2F""#))
        #expect(failed.contains("Sign in with the school&#39;s account"))
        // A next that leaves the console is not kept.
        #expect(failed.contains(#"name="next" value="/console/""#))
        #expect(ConsolePaths.localNext("https://evil.example/console") == nil)
        // One rule for every return path (SignInRoutes.localPath): the console's own pages only.
        #expect(ConsolePaths.localNext("/console/../x") == nil)
        #expect(ConsolePaths.localNext("/consolex") == nil)
        #expect(ConsolePaths.localNext("/other") == nil)
    }

    // MARK: Pseudonyms

    @Test func pseudonymsAreStableKeyedAndReplaceNamesEverywhere() {
        let key = [UInt8](repeating: 7, count: 32)
        let pseudonyms = Pseudonyms(key: key)
        let alice = pseudonyms.of("alice")
        #expect(Pseudonyms.isPseudonym(alice))
        #expect(alice == Pseudonyms(key: key).of("alice"))
        #expect(alice != pseudonyms.of("bob"))
        #expect(alice != Pseudonyms(key: [UInt8](repeating: 8, count: 32)).of("alice"))
        #expect(!Pseudonyms.isPseudonym("alice") && !Pseudonyms.isPseudonym("pupil-XYZ") && !Pseudonyms.isPseudonym("pupil-0123456789"))

        let names = NameShown(pseudonyms: pseudonyms)
        let html = Self.recordsHTML([Self.record(1)], principal: Self.principal(.auditor), names: names)
        #expect(!html.contains(">alice<"))
        #expect(html.contains(">\(alice)</a>"))
        #expect(html.contains("/console/timeline?user=\(alice)&amp;"))
        #expect(html.contains(#"id="pseudonyms""#))
        // The CSV has the pseudonym and no uid.
        let exported = names.forExport(Self.record(1))
        #expect(exported.stored.record.user == alice)
        #expect(exported.stored.record.uid == nil)
        #expect(!RecordsCSV.render([exported]).contains("alice"))
        // Names for those who see names.
        #expect(Self.recordsHTML([Self.record(1)], principal: Self.principal(.admin)).contains(">alice</a>"))
    }

    @Test func theAuditTrailShowsATimelinesTargetAsItsPseudonym() {
        let pseudonyms = Pseudonyms(key: [UInt8](repeating: 1, count: 32))
        let page = ConsoleAuditPage(
            events: [
                ConsoleAuditEvent(time: 1_764_320_000, actor: "person:dsl", action: "timeline.open", target: "alice", reason: nil),
                ConsoleAuditEvent(time: 1_764_320_100, actor: "person:it", action: "machine.revoke", target: "m-x", reason: "stolen"),
            ], next: "n1")
        let filter = AuditTrailPage.Filter.parse(ConsoleForm("actor=person%3Adsl")!)
        let model = AuditTrailPage.make(filter: filter, problem: nil, page: page, names: NameShown(pseudonyms: pseudonyms), time: Self.london, t: Self.t)
        #expect(model.rows.map(\.target) == [pseudonyms.of("alice"), "m-x"])
        #expect(model.nextLink == "/console/audit?actor=person%3Adsl&after=n1")
        let plain = AuditTrailPage.make(filter: filter, problem: nil, page: page, names: NameShown(pseudonyms: nil), time: Self.london, t: Self.t)
        #expect(plain.rows[0].target == "alice")
    }

    // MARK: Dashboard, machines, records

    @Test func theDashboardCountsInScope() {
        func machine(_ id: String, room: String, revoked: Bool = false) -> StoredMachine {
            StoredMachine(
                id: id, publicKey: id, room: room, hostname: id, version: "1", enrolledAt: 0, revokedAt: revoked ? 1 : nil, storedThrough: 0,
                recordsDropped: 0, checkInAt: nil, lastCheckIn: nil, previousQueueDrops: nil)
        }
        let machines = [machine("a", room: "lab2"), machine("b", room: "lab2", revoked: true), machine("c", room: "lab3")]
        let blocks = [
            BlockCount(category: "gambling", host: "casino.example", count: 5), BlockCount(category: "games", host: "game.example", count: 7),
            BlockCount(category: "gambling", host: "bet.example", count: 3), BlockCount(category: nil, host: "x.example", count: 1),
        ]
        let teacher = Self.principal(.teacher, Scope(rooms: ["lab2"]))
        let page = DashboardPage.make(
            principal: teacher, machines: machines, publishedVersion: 0, staleAfter: 300, blocks: blocks, nowMilliseconds: Self.now,
            time: Self.london, t: Self.t)
        #expect(page.machineStates.map(\.state) == ["unfiltered", "stale", "behind", "ok", "revoked"])
        #expect(page.machineStates.map(\.count) == [0, 1, 0, 0, 1])
        #expect(page.blocksByCategory.map(\.label) == ["gambling", "games", "(no category)"])
        #expect(page.blocksByCategory.map(\.count) == [8, 7, 1])
        #expect(page.blocksByCategory[0].href == "/console/records?since=2025-11-28&until=2025-11-28&category=gambling&action=block")
        #expect(page.topBlocked.map(\.label) == ["game.example", "casino.example", "bet.example", "x.example"])
        #expect(page.windowText == "From 08:00 to 09:00 (Europe/London).")
        let html = Self.renderer.render("dashboard", title: "D", page: page, viewer: Self.viewer(teacher), current: .dashboard)
        #expect(html.contains(#"id="requests-unavailable""#))
        #expect(html.contains("<th scope=\"col\">State</th>"))
    }

    @Test func recordsFiltersAreCheckedAndLinked() {
        let time = Self.london
        let (defaults, none) = RecordsFilter.parse(ConsoleForm("")!, nowMilliseconds: Self.now, time: time)
        #expect(none == nil)
        #expect(defaults.since == "2025-11-22" && defaults.until == "2025-11-28")
        let (filter, problem) = RecordsFilter.parse(
            ConsoleForm("since=2025-11-01&until=2025-11-02&user=a+b&room=lab2&action=block&kind=dns&category=games")!,
            nowMilliseconds: Self.now, time: time)
        #expect(problem == nil)
        #expect(filter.user == "a b")
        let query = filter.query(time: time, scope: Scope(rooms: ["lab2"]), user: filter.user, limit: 100)
        #expect(query?.since == RecordTime.milliseconds("2025-11-01T00:00:00Z"))
        #expect(query?.until == RecordTime.milliseconds("2025-11-03T00:00:00Z"))
        #expect(query?.kind == "dns" && query?.scope == Scope(rooms: ["lab2"]))
        #expect(
            filter.link("/console/records", after: nil, csv: true)
                == "/console/records?since=2025-11-01&until=2025-11-02&user=a%20b&room=lab2&category=games&kind=dns&action=block&format=csv")
        #expect(RecordsFilter.parse(ConsoleForm("since=2025-11-05&until=2025-11-01")!, nowMilliseconds: Self.now, time: time).1 == .dates)
        #expect(RecordsFilter.parse(ConsoleForm("since=2025-02-30")!, nowMilliseconds: Self.now, time: time).1 == .dates)
        #expect(RecordsFilter.parse(ConsoleForm("machine=pc1")!, nowMilliseconds: Self.now, time: time).1 == .machine)
        #expect(RecordsFilter.parse(ConsoleForm("after=r1.zzz")!, nowMilliseconds: Self.now, time: time).1 == .cursor)
        #expect(RecordsFilter.parse(ConsoleForm("user=" + String(repeating: "a", count: 257))!, nowMilliseconds: Self.now, time: time).1 == .tooLong)
        #expect(RecordsFilter.parse(ConsoleForm("user=a%00b")!, nowMilliseconds: Self.now, time: time).1 == .tooLong)
    }

    @Test func theMachinesPageShowsRevokeOnlyToThoseWhoMay() {
        let checkIn = CheckIn(
            version: "1", rulesVersion: 7, rulesSince: nil, filterData: .running, filterDataRestarts: 2, failMode: .closed, queueDrops: 3,
            recordsWaiting: 0, recordsDropped: 0, users: [])
        let machine = StoredMachine(
            id: "m-aaaaaaaaaaaaaaaaaaaa", publicKey: "k", room: "lab2", hostname: "pc1", version: "1", enrolledAt: 0, revokedAt: nil,
            storedThrough: 0, recordsDropped: 4, checkInAt: Self.now / 1000 - 30, lastCheckIn: checkIn, previousQueueDrops: nil)
        for role in Role.personRoles {
            let page = MachinesPage.make(
                principal: Self.principal(role, role == .teacher ? Scope(rooms: ["lab2"]) : .school), machines: [machine], state: nil,
                publishedVersion: 7, staleAfter: 300, nowMilliseconds: Self.now, time: Self.london, t: Self.t)
            #expect(page.rows.count == 1)
            #expect((page.rows[0].revokeAction != nil) == (role == .admin))
            #expect(page.rows[0].state == "ok" && page.rows[0].restarts == "2" && page.rows[0].queueDrops == "3")
            #expect(page.rows[0].lastCheckIn == "2025-11-28 08:59:30")
        }
        let elsewhere = MachinesPage.make(
            principal: Self.principal(.teacher, Scope(rooms: ["lab3"])), machines: [machine], state: nil, publishedVersion: 7,
            staleAfter: 300, nowMilliseconds: Self.now, time: Self.london, t: Self.t)
        #expect(elsewhere.rows.isEmpty)
    }

    // MARK: Policy

    @Test func thePolicySummaryIsReadFromTheParsedPolicy() throws {
        let yaml = """
            timezone: Europe/London
            groups:
              staff: { unixGroups: [staff] }
              students: { uids: ["10000-19999"] }
            schedules:
              lessons: { days: [mon, tue], times: ["08:30-12:00"] }
            policy:
              block: [adult, gambling, games]
              safeSearch: [google]
              groups:
                staff: { block: [adult, gambling], exam: exempt }
            exam:
              allow: [exams.example.org]
              during: [lessons]
            """
        let summary = try PolicySummary.make(yaml: yaml, t: Self.t)
        #expect(summary.timeZone == "Europe/London")
        #expect(summary.groups.map(\.name) == ["staff", "students"])
        #expect(summary.groups.map(\.blocked) == ["adult, gambling", "adult, gambling, games"])
        #expect(summary.groups[0].exam == "exempt")
        #expect(summary.groups[1].members == "uids 10000-19999")
        #expect(summary.locked == "adult, gambling")
        #expect(summary.safeSearch == "google")
        #expect(summary.schedules.map(\.days) == ["mon, tue"])
        #expect(summary.exam.contains("exams.example.org"))
        #expect(summary.bypass.first { $0.key == "encryptedDNS" }?.value == "block")

        // Read-only for those who may not edit: no form, a read-only textarea.
        let version = StoredPolicyVersion(version: 1, createdAt: 0, author: "person:it", reason: "first", policy: yaml, lists: [])
        for role in [Role.auditor, .safeguarding] {
            let page = PolicyPage.make(
                principal: Self.principal(role), latest: version, published: nil, pending: nil, history: [version], typed: .init(),
                time: Self.london, t: Self.t)
            let html = Self.renderer.render("policy", title: "P", page: page, viewer: Self.viewer(Self.principal(role)), current: .policy)
            #expect(!html.contains(#"action="/console/policy""#))
            #expect(html.contains(#"<textarea id="yaml" rows="24" readonly class="code">"#))
            #expect(html.contains("id=\"locked-categories\">adult, gambling<"))
        }
        // A refusal is shown next to the form with what was typed.
        let refused = PolicyPage.make(
            principal: Self.principal(.admin), latest: version, published: nil, pending: nil, history: [version],
            typed: .init(yaml: "policy: {block: 5}", reason: "why", policyError: "policy.block (line 1): expected a list"), time: Self.london,
            t: Self.t)
        let html = Self.renderer.render("policy", title: "P", page: refused, viewer: Self.viewer(Self.principal(.admin)), current: .policy)
        #expect(html.contains("policy.block (line 1): expected a list"))
        #expect(html.contains(#"aria-describedby="policy-errors">policy: {block: 5}</textarea>"#))
        #expect(html.contains(#"name="reason" required maxlength="1000" value="why""#))
    }

    @Test func aDiffIsShownLineByLine() {
        let diff = PolicyDiff(
            from: 1, to: 2, policy: PolicyDiff.unified("a: 1\n", "a: 2\n", fromLabel: "policy version 1", toLabel: "policy version 2"),
            lists: [PolicyDiff.listChange(category: "games", old: nil, new: ("s", Array("game.example\n".utf8)))])
        let page = PolicyDiffPage.make(diff)
        #expect(page.lines.map(\.kind) == ["file", "file", "hunk", "remove", "add"])
        #expect(page.lists.first?.sample == "+game.example")
    }

    // MARK: Strings, dates and forms

    @Test func koreanIsCompleteAndChosenByTheBrowserOrTheForm() throws {
        let strings = Self.renderer.strings
        #expect(strings.languages == ["en", "ko"])
        let english = strings.table("en")
        let korean = strings.table("ko")
        #expect(Set(korean.keys) == Set(english.keys))
        // Every key English has, Korean says in its own words (but the direction).
        let untranslated = english.keys.filter { korean[$0] == english[$0] && $0 != "direction" }
        #expect(untranslated.isEmpty, "\(untranslated.sorted())")
        #expect(strings.choose(chosen: nil, acceptLanguage: "ko-KR,ko;q=0.9,en;q=0.5") == "ko")
        #expect(strings.choose(chosen: "en", acceptLanguage: "ko") == "en")
        #expect(strings.choose(chosen: "xx", acceptLanguage: "fr") == "en")
        let html = Self.renderer.render(
            "message", title: "T", page: ConsoleRenderer.MessagePage(message: "m", back: nil),
            viewer: Self.viewer(Self.principal(.admin), language: "ko"), current: nil)
        #expect(html.contains(#"<html lang="ko" dir="ltr">"#))
        #expect(html.contains("대시보드"))
        #expect(html.contains(#"<option value="ko" selected>한국어</option>"#))
        // Every `t.` a template reads is a string.
        for (name, text) in ConsoleTemplates.all {
            var rest = Substring(text)
            while let range = rest.range(of: "{{t.") {
                let after = rest[range.upperBound...]
                let key = String(after.prefix { $0.isLetter || $0.isNumber })
                #expect(english[key] != nil, "\(name): t.\(key)")
                rest = after
            }
        }
    }

    @Test func aSchoolsStringsFileReplacesAndAddsWords() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("console-strings-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try "navRecords = Logs\n".write(toFile: folder + "/en.strings", atomically: true, encoding: .utf8)
        try "languageName = Cymraeg\nnavDashboard = Dangosfwrdd\n".write(toFile: folder + "/cy.strings", atomically: true, encoding: .utf8)
        var settings = ConsolePageSettings()
        settings.stringsFolder = folder
        let strings = try ConsoleRenderer(settings: settings).strings
        #expect(strings.languages == ["cy", "en", "ko"])
        #expect(strings.table("en")["navRecords"] == "Logs")
        #expect(strings.table("cy")["navDashboard"] == "Dangosfwrdd")
        #expect(strings.table("cy")["navRecords"] == "Logs")
        #expect(strings.table("ko")["navRecords"] == "기록")

        try "noSuchKey = x\n".write(toFile: folder + "/cy.strings", atomically: true, encoding: .utf8)
        #expect(throws: ServerError.self) { try ConsoleRenderer(settings: settings) }
        do {
            _ = try ConsoleRenderer(settings: settings)
        } catch {
            #expect(error.message.contains("cy.strings, line 1: 'noSuchKey' is not a console string"))
        }
        settings.stringsFolder = nil
        settings.language = "fr"
        #expect(throws: ServerError.self) { try ConsoleRenderer(settings: settings) }
    }

    @Test func daysAreTheServersTimeZones() {
        let time = Self.london
        // British Summer Time: the day starts at 23:00 UTC the day before.
        #expect(time.startOfDay("2025-07-01") == RecordTime.milliseconds("2025-06-30T23:00:00Z"))
        #expect(time.startOfDay("2025-12-01") == RecordTime.milliseconds("2025-12-01T00:00:00Z"))
        // The day the clocks go back is 25 hours long.
        #expect(time.endOfDay("2025-10-26") == RecordTime.milliseconds("2025-10-27T00:00:00Z"))
        #expect(time.startOfDay("2025-10-26") == RecordTime.milliseconds("2025-10-25T23:00:00Z"))
        for bad in ["2025-13-01", "2025-02-29", "25-01-01", "2025-1-01", "2025-01-01T", "", "abcd-ef-gh"] {
            #expect(time.startOfDay(bad) == nil, "\(bad)")
        }
        #expect(time.dateTime(RecordTime.milliseconds("2025-07-01T08:30:05Z")!) == "2025-07-01 09:30:05")
        let seoul = ConsoleTime(timeZone: TimeZone(identifier: "Asia/Seoul")!)
        #expect(seoul.day(Self.now) == "2025-11-28")
        #expect(seoul.clock(Self.now) == "18:00")
    }

    @Test func formsDecodeAsBrowsersSendThem() {
        let form = ConsoleForm("a=1+2&b=%3Cx%3E&c=&d&a=again&%E2%9C%93=%ED%95%9C")
        #expect(form?["a"] == "1 2")
        #expect(form?["b"] == "<x>")
        #expect(form?["c"] == "" && form?.text("c") == nil)
        #expect(form?["d"] == "")
        #expect(form?["✓"] == "한")
        #expect(ConsoleForm("a=%ZZ") == nil)
        #expect(ConsoleForm("a=%FF") == nil)
        #expect(ConsoleForm(Array(repeating: "a=1", count: ConsoleForm.maxPairs + 1).joined(separator: "&")) == nil)
        #expect(ConsoleForm(Array(repeating: "a=1", count: ConsoleForm.maxPairs).joined(separator: "&"))?.pairs.count == ConsoleForm.maxPairs)
        #expect(ConsoleForm.query([("user", "a b&c"), ("none", nil)]) == "?user=a%20b%26c")
        #expect(ConsoleText.fill("{a} and {b} {c}", ["a": "{b}", "b": "2"]) == "{b} and 2 {c}")
    }

    @Test func theConsoleKeysOfServerYAML() throws {
        let configuration = try ServerConfiguration(
            yaml: "console:\n  schoolName: Hillside Academy\n  pseudonyms: [auditor, teacher]\n  language: KO\n  strings: /etc/hallpass/console\n")
        #expect(configuration.consolePages.schoolName == "Hillside Academy")
        #expect(configuration.consolePages.pseudonyms == [.auditor, .teacher])
        #expect(configuration.consolePages.language == "ko")
        #expect(configuration.consolePages.stringsFolder == "/etc/hallpass/console")
        #expect(try ServerConfiguration(yaml: "listen: { port: 1 }").consolePages.pseudonyms == [.auditor])
        #expect(try ServerConfiguration(yaml: "console: { pseudonyms: [] }").consolePages.pseudonyms == [])
        for bad in ["console: { pseudonyms: [metrics] }", "console: { pseudonyms: [pupil] }", "console: { language: 'not a tag' }",
            "console: { strings: relative/path }", "console: { schoolName: '' }", "console: { colour: red }"]
        {
            #expect(throws: ConfigurationError.self, "\(bad)") { try ServerConfiguration(yaml: bad) }
        }
    }

    @Test func theAssetsAreNamedByTheirBytes() {
        let assets = ConsoleAssets.shared
        #expect(assets.stylesheet.name.hasPrefix("console-") && assets.stylesheet.name.hasSuffix(".css"))
        #expect(assets.asset(named: assets.script.name)?.bytes == Array(ConsoleAssets.javascript.utf8))
        #expect(assets.asset(named: "console.css") == nil)
        #expect(ConsoleAssets.css.contains(":focus-visible"))
    }
}
