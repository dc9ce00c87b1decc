import Foundation
import Hummingbird
import Logging
import NIOHTTP1
@testable import SchoolServer
import SharedStore
import Synchronization
import Testing

/// Who is asking, as the tests say it: the session middleware's stand-in.
/// `X-Test-Role` (and `X-Test-Rooms`, `X-Test-Groups`, comma-separated)
/// make the principal; without them there is none. The CSRF token is fixed.
struct TestPrincipalMiddleware: RouterMiddleware {
    typealias Context = ServerRequestContext
    static let csrf = "csrf-of-the-test-session"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        if let text = request.headers[HTTPFields.Element.Name("X-Test-Role")!], let role = Role(rawValue: text) {
            func list(_ name: String) -> [String] {
                request.headers[HTTPFields.Element.Name(name)!].map { $0.split(separator: ",").map(String.init) } ?? []
            }
            context.principal = Principal(
                kind: .person("t-\(role.rawValue)"), role: role, scope: Scope(rooms: list("X-Test-Rooms"), groups: list("X-Test-Groups")))
            context.csrfToken = Self.csrf
        }
        return try await next(request, context)
    }
}

/// What the console told the rest of the server.
final class HookLog: Sendable {
    private let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

struct ConsoleServer: Sendable {
    let server: RunningServer
    let hooks: HookLog

    var storage: SQLStorage { server.storage }

    static func headers(_ role: Role?, rooms: [String] = [], groups: [String] = []) -> [(String, String)] {
        guard let role else { return [] }
        var headers = [("X-Test-Role", role.rawValue)]
        if !rooms.isEmpty { headers.append(("X-Test-Rooms", rooms.joined(separator: ","))) }
        if !groups.isEmpty { headers.append(("X-Test-Groups", groups.joined(separator: ","))) }
        return headers
    }

    func get(_ path: String, as role: Role?, rooms: [String] = [], groups: [String] = [], headers: [(String, String)] = []) async throws
        -> PinnedHTTPSClient.Answer
    {
        try await server.client.request(.GET, path, headers: Self.headers(role, rooms: rooms, groups: groups) + headers)
    }

    /// Posts a form with `fields` (the session's CSRF token first, unless `csrf` is false).
    func post(
        _ path: String, as role: Role?, rooms: [String] = [], _ fields: [(String, String)] = [], csrf: Bool = true
    ) async throws -> PinnedHTTPSClient.Answer {
        let all = (csrf ? [("csrf", TestPrincipalMiddleware.csrf)] : []) + fields
        let body = all.map { ConsoleForm.encode($0.0) + "=" + ConsoleForm.encode($0.1) }.joined(separator: "&")
        return try await server.client.request(
            .POST, path, headers: Self.headers(role, rooms: rooms) + [("Content-Type", "application/x-www-form-urlencoded")],
            body: Array(body.utf8))
    }
}

/// A running server with the console's routes behind the tests' middleware,
/// that publishes (a signing key in its state folder), with people and an
/// audit trail of the tests' own; the server's time zone is Europe/London.
func withConsoleServer(
    _ engine: Engine, live: LiveChannel = LiveChannel(key: LiveKey(signing: BundleSigningKey()), recheck: .seconds(3600)),
    pseudonyms: Set<Role>? = nil, delivery: (@Sendable (any ServerStorage) -> AlertDeliveryService)? = nil,
    _ body: @Sendable (ConsoleServer) async throws -> Void
) async throws {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-console-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: folder) }
    let hooks = HookLog()
    let people = [
        ConsolePerson(login: "it", displayName: "I. T.", role: .admin, scope: .school, method: "local", disabled: false, lastSignInAt: 1_764_300_000),
        ConsolePerson(
            login: "mr.kim", displayName: "<b>Kim</b>", role: .teacher, scope: Scope(rooms: ["lab2"]), method: "oidc", disabled: true,
            lastSignInAt: nil),
    ]
    // The console of the test's own, behind a middleware that takes the principal from the request's headers.
    try await withRunningServer(engine, console: false, configure: { configuration in
        configuration.stateDirectoryOverride = folder + "/state"
        if let pseudonyms { configuration.consolePages.pseudonyms = pseudonyms }
        _ = try? ServerAdministration.makeSigningKey(configuration: configuration)
    }, moreRoutes: { router, publisher, configuration, storage, clock in
        let control = RoomControl(
            storage: storage, live: live,
            published: PublishedLivePolicy(storage: storage, storePath: publisher.folder.path(BundleManifest.storeFileName)),
            metrics: ServerMetrics(), clock: { clock.now })
        let routes = try ConsoleRoutes(
            storage: storage, editor: PolicyEditor(storage: storage, configuration: configuration), publisher: publisher,
            configuration: configuration, clock: { clock.now }, openIDConfigured: true, timeZone: TimeZone(identifier: "Europe/London")!,
            hooks: .init(
                timelineOpened: { principal, user in hooks.add("timeline.open \(principal.author) \(user)") },
                changed: { principal, change in hooks.add("\(change.action) \(principal.author) \(change.target ?? "-") \(change.reason ?? "-")") }),
            sources: .init(
                people: { people },
                auditEvents: { query in
                    ConsoleAuditPage(
                        events: [
                            ConsoleAuditEvent(time: 1_764_320_000, actor: "person:dsl", action: "timeline.open", target: "alice", reason: nil)
                        ].filter { query.actor == nil || $0.actor == query.actor }, next: nil)
                }),
            rooms: control, requests: LiveAccessRequests(control: control))
        routes.add(to: router, authenticate: TestPrincipalMiddleware())
    }, delivery: delivery) { server async throws in
        try await body(ConsoleServer(server: server, hooks: hooks))
    }
}

@Suite struct ConsoleRoutesTests {
    /// Every page, and the permission it needs.
    static let pages: [(String, Permission)] = [
        ("/console/", .viewDashboard), ("/console/records", .viewRecords), ("/console/timeline?user=alice", .viewTimeline),
        ("/console/machines", .viewMachines), ("/console/policy", .viewPolicy), ("/console/people", .viewPeople),
        ("/console/audit", .viewAudit),
    ]

    @Test(arguments: Engine.allCases)
    func eachPageForEachRole(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            for role in Role.allCases {
                let rooms = role == .teacher ? ["lab2"] : []
                for (path, permission) in Self.pages {
                    let answer = try await console.get(path, as: role, rooms: rooms)
                    // An auditor sees pseudonyms, and so may not look a person up by name (400, said on the page).
                    let expected = !role.may(permission) ? 403 : role == .auditor && path.contains("user=alice") ? 400 : 200
                    #expect(answer.status == expected, "\(role) \(path): \(answer.text.prefix(300))")
                    // Pages and refusals alike are HTML with the console's headers.
                    #expect(answer.header("Content-Type") == "text/html; charset=utf-8", "\(path)")
                    #expect(answer.header("Content-Security-Policy")?.hasPrefix("default-src 'self'") == true)
                    #expect(answer.header("X-Content-Type-Options") == "nosniff")
                    #expect(answer.header("Referrer-Policy") == "same-origin")
                    #expect(answer.header("Cache-Control") == "no-store")
                    if !role.may(permission) { #expect(answer.text.contains("Your role does not allow this page")) }
                }
            }
            // No principal: refused (the session middleware sends a browser to sign in first).
            #expect(try await console.get("/console/records", as: nil).status == 403)
            // The refusal is a page, not the API's JSON.
            let refused = try await console.get("/console/policy", as: .teacher, rooms: ["lab2"])
            #expect(refused.text.hasPrefix("<!doctype html>"))
        }
    }

    @Test(arguments: Engine.allCases)
    func beforeSigningIn(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let root = try await console.get("/", as: nil)
            #expect(root.status == 303)
            #expect(root.header("Location") == "/console/")
            let signIn = try await console.get("/console/sign-in?next=%2Fconsole%2Frecords&error=1", as: nil)
            #expect(signIn.status == 200)
            #expect(signIn.text.contains(#"id="sign-in-error""#))
            #expect(signIn.text.contains(#"name="next" value="/console/records""#))
            #expect(signIn.text.contains(#"href="/console/oidc/start?next="#))
            #expect(!signIn.text.contains("sign-in-error") == false)
            #expect(!(try await console.get("/console/sign-in", as: nil)).text.contains("sign-in-error"))

            // The stylesheet and script the pages name, kept a year; nothing else there.
            let assets = ConsoleAssets.shared
            #expect(signIn.text.contains("/console/assets/\(assets.stylesheet.name)"))
            let css = try await console.get("/console/assets/\(assets.stylesheet.name)", as: nil)
            #expect(css.status == 200)
            #expect(css.header("Content-Type") == "text/css; charset=utf-8")
            #expect(css.header("Cache-Control") == "public, max-age=31536000, immutable")
            #expect(css.header("X-Content-Type-Options") == "nosniff")
            #expect(try await console.get("/console/assets/\(assets.script.name)", as: nil).status == 200)
            #expect(try await console.get("/console/assets/other.js", as: nil).status == 404)

            // The language form: a cookie, and back to the page (only a page of the console).
            let korean = try await console.get("/console/language?lang=ko&next=%2Fconsole%2Fmachines", as: nil)
            #expect(korean.status == 303)
            #expect(korean.header("Location") == "/console/machines")
            #expect(korean.header("Set-Cookie")?.hasPrefix("hallpass-console-language=ko; Path=/console;") == true)
            let away = try await console.get("/console/language?lang=ko&next=https%3A%2F%2Fevil.example%2F", as: nil)
            #expect(away.header("Location") == "/console/")
            let page = try await console.get("/console/", as: .admin, headers: [("Cookie", "hallpass-console-language=ko")])
            #expect(page.text.contains(#"<html lang="ko""#))
            #expect(page.header("Content-Language") == "ko")
            let browser = try await console.get("/console/", as: .admin, headers: [("Accept-Language", "ko-KR,ko;q=0.9")])
            #expect(browser.text.contains("대시보드"))
        }
    }

    @Test(arguments: Engine.allCases)
    func recordsTimelineAndExportKeepToTheScope(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let server = console.server
            let lab2 = try await server.enrol(TestMachine(), room: "lab2")
            let lab3 = try await server.enrol(TestMachine(), room: "lab3")
            #expect(try await server.post("/api/v1/machine/records", APITests.recordsBody(1...3), signedBy: lab2).status == 200)
            let bob = APITests.recordsBody(1...2).replacingOccurrences(of: #""user":"alice""#, with: #""user":"bob""#)
                .replacingOccurrences(of: #""group":"students""#, with: #""group":"staff""#)
            #expect(try await server.post("/api/v1/machine/records", bob, signedBy: lab3).status == 200)

            let all = try await console.get("/console/records?since=2025-11-28&until=2025-11-28", as: .admin)
            #expect(all.status == 200, "\(all.text.prefix(500))")
            #expect(all.text.components(separatedBy: "<tr>").count - 2 == 5)
            #expect(all.text.contains(">alice</a>") && all.text.contains(">bob</a>"))
            #expect(all.text.contains("Days in the server&#39;s time zone, Europe/London"))
            #expect(all.text.contains("2025-11-28 08:00:01"))

            // A teacher of lab2 sees lab2's records only, whatever the filter asks.
            let teacher = try await console.get("/console/records?since=2025-11-28&until=2025-11-28", as: .teacher, rooms: ["lab2"])
            #expect(teacher.text.contains(">alice</a>") && !teacher.text.contains(">bob</a>"))
            // Another room, asked for by name, is refused as the API refuses it, not shown empty.
            let asked = try await console.get("/console/records?since=2025-11-28&until=2025-11-28&room=lab3", as: .teacher, rooms: ["lab2"])
            #expect(asked.status == 403 && !asked.text.contains(">bob</a>"))
            let askedCSV = try await console.get(
                "/console/records?since=2025-11-28&until=2025-11-28&room=lab3&format=csv", as: .teacher, rooms: ["lab2"])
            #expect(askedCSV.status == 403)
            let byGroup = try await console.get("/console/records?since=2025-11-28&until=2025-11-28", as: .teacher, groups: ["staff"])
            #expect(byGroup.text.contains(">bob</a>") && !byGroup.text.contains(">alice</a>"))

            // Paging with the query's cursor.
            let filtered = try await console.get("/console/records?since=2025-11-28&until=2025-11-28&user=alice&action=block", as: .admin)
            #expect(filtered.text.components(separatedBy: "<tr>").count - 2 == 3)
            #expect(!filtered.text.contains("next-page") && !filtered.text.contains(#"<nav class="pages""#))

            // A bad filter: said on the page, nothing queried.
            let bad = try await console.get("/console/records?since=2025-11-30&until=2025-11-01", as: .admin)
            #expect(bad.status == 400)
            #expect(bad.text.contains(#"id="filter-error""#))

            // CSV: the same query, safe for spreadsheets, in the audit trail.
            let csv = try await console.get("/console/records?since=2025-11-28&until=2025-11-28&format=csv", as: .teacher, rooms: ["lab2"])
            #expect(csv.status == 200)
            #expect(csv.header("Content-Type") == "text/csv; charset=utf-8; header=present")
            #expect(csv.header("Content-Disposition") == #"attachment; filename="records-2025-11-28-2025-11-28.csv""#)
            let lines = csv.text.split(separator: "\r\n")
            #expect(lines.count == 4)
            #expect(lines[0].hasPrefix("time,machine,room"))
            // ",bob," as a CSV field: a random machine id can hold the letters "bob".
            #expect(!csv.text.contains(",bob,"))
            #expect(console.hooks.all.contains { $0.hasPrefix("records.export person:t-teacher /console/records?since=2025-11-28") })

            // The timeline: one person's, in scope, and each opening in the audit trail.
            let timeline = try await console.get("/console/timeline?user=alice&since=2025-11-28&until=2025-11-28", as: .safeguarding)
            #expect(timeline.status == 200)
            #expect(timeline.text.contains("<h1>Timeline of alice</h1>"))
            #expect(timeline.text.components(separatedBy: "<tr>").count - 2 == 3)
            #expect(console.hooks.all.contains("timeline.open person:t-safeguarding alice"))
            let outside = try await console.get("/console/timeline?user=bob&since=2025-11-28&until=2025-11-28", as: .teacher, rooms: ["lab2"])
            #expect(outside.text.contains(#"id="no-records""#))
            let noUser = try await console.get("/console/timeline", as: .admin)
            #expect(noUser.status == 400)
            #expect(noUser.text.contains("Give the user whose timeline to show."))
            // 101 records of one machine: a page of 100, and the next page's link carries the cursor.
            let many = try await server.enrol(TestMachine(), room: "lab4")
            #expect(try await server.post("/api/v1/machine/records", APITests.recordsBody(1...101), signedBy: many).status == 200)
            let first = try await console.get("/console/records?since=2025-11-28&until=2025-11-28&room=lab4", as: .admin)
            #expect(first.text.components(separatedBy: "<tr>").count - 2 == 100)
            let marker = #"<a href="/console/records?since=2025-11-28&amp;until=2025-11-28&amp;room=lab4&amp;after="#
            #expect(first.text.contains(marker))
            let next = try #require(first.text.components(separatedBy: marker).dropFirst().first?.split(separator: "\"").first)
            let second = try await console.get("/console/records?since=2025-11-28&until=2025-11-28&room=lab4&after=\(next)", as: .admin)
            #expect(second.text.components(separatedBy: "<tr>").count - 2 == 1)
            #expect(!second.text.contains("next-page") && second.text.contains(">First page</a>"))
        }
    }

    @Test(arguments: Engine.allCases)
    func pseudonymsForTheRolesThatSeeThem(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let server = console.server
            let machine = try await server.enrol(TestMachine(), room: "lab2")
            #expect(try await server.post("/api/v1/machine/records", APITests.recordsBody(1...2), signedBy: machine).status == 200)
            let pseudonym = Pseudonyms(key: try await console.storage.pseudonymKey()).of("alice")

            let page = try await console.get("/console/records?since=2025-11-28&until=2025-11-28", as: .auditor)
            #expect(page.text.contains(">\(pseudonym)</a>"))
            #expect(!page.text.contains("alice"))
            // Searching by the pseudonym finds the person; by the name, no one (a name typed in
            // would tell whose pseudonym it is).
            let found = try await console.get("/console/records?since=2025-11-28&until=2025-11-28&user=\(pseudonym)", as: .auditor)
            #expect(found.text.components(separatedBy: "<tr>").count - 2 == 2)
            let byName = try await console.get("/console/records?since=2025-11-28&until=2025-11-28&user=alice", as: .auditor)
            #expect(byName.status == 400)
            #expect(!byName.text.contains("<td class=\"nowrap\"><time"))
            let csv = try await console.get("/console/records?since=2025-11-28&until=2025-11-28&format=csv", as: .auditor)
            #expect(csv.text.contains(pseudonym) && !csv.text.contains("alice") && !csv.text.contains("1001"))
            let timeline = try await console.get("/console/timeline?user=\(pseudonym)&since=2025-11-28&until=2025-11-28", as: .auditor)
            #expect(timeline.text.contains("<h1>Timeline of \(pseudonym)</h1>"))
            #expect(console.hooks.all.contains("timeline.open person:t-auditor alice"))
            // The audit trail does not give the name away either.
            let audit = try await console.get("/console/audit", as: .auditor)
            #expect(audit.text.contains(pseudonym) && !audit.text.contains(">alice<"))
            // Others see names.
            #expect(try await console.get("/console/records?since=2025-11-28&until=2025-11-28", as: .safeguarding).text.contains(">alice</a>"))
        }
    }

    @Test(arguments: Engine.allCases)
    func revokingAMachine(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let machine = try await console.server.enrol(TestMachine(), room: "lab2")
            let path = "/console/machines/\(machine.id)/revoke"
            let page = try await console.get("/console/machines", as: .admin)
            #expect(page.text.contains(#"action="\#(path)""#))
            #expect(!(try await console.get("/console/machines", as: .auditor)).text.contains("/revoke"))
            let teacherPage = try await console.get("/console/machines", as: .teacher, rooms: ["lab3"])
            #expect(teacherPage.text.contains(#"id="no-machines""#))

            // Refused: without the CSRF token, by a role that may not, outside the scope.
            #expect(try await console.post(path, as: .admin, csrf: false).status == 403)
            #expect(try await console.post(path, as: .admin, [("csrf", "wrong")], csrf: false).status == 403)
            #expect(try await console.post(path, as: .auditor).status == 403)
            #expect(try await console.post(path, as: .teacher, rooms: ["lab2"]).status == 403)
            #expect(try await console.post(path, as: .admin, rooms: ["lab3"]).status == 403)
            #expect(try await console.storage.machine(id: machine.id)?.revokedAt == nil)
            #expect(try await console.post("/console/machines/m-aaaaaaaaaaaaaaaaaaaa/revoke", as: .admin).status == 404)

            let done = try await console.post(path, as: .admin)
            #expect(done.status == 303)
            #expect(done.header("Location") == "/console/machines?done=revoked")
            #expect(try await console.storage.machine(id: machine.id)?.revokedAt != nil)
            #expect(console.hooks.all.contains("machine.revoke person:t-admin \(machine.id) -"))
            let after = try await console.get("/console/machines?done=revoked&state=revoked", as: .admin)
            #expect(after.text.contains(#"id="flash">The machine&#39;s enrolment is revoked."#))
            #expect(after.text.contains(#"<span class="state state-revoked">Revoked</span>"#))
            #expect(!after.text.contains(#"action="\#(path)""#))
        }
    }

    @Test(arguments: Engine.allCases)
    func thePolicyIsEditedPublishedAndRolledBack(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let empty = try await console.get("/console/policy", as: .admin)
            #expect(empty.text.contains(#"id="policy-none""#))

            // Refused, and what was typed kept next to the refusal.
            let badYAML = "policy:\n  block: 5\n"
            let refused = try await console.post("/console/policy", as: .admin, [("yaml", badYAML), ("reason", "try")])
            #expect(refused.status == 400)
            #expect(refused.text.contains(#"id="policy-errors""#))
            #expect(refused.text.contains("policy.block"))
            #expect(refused.text.contains(">policy:\n  block: 5\n</textarea>"))
            #expect(refused.text.contains(#"value="try""#))
            let noReason = try await console.post("/console/policy", as: .admin, [("yaml", "policy: { block: [adult] }\r\n")])
            #expect(noReason.status == 400)
            #expect(noReason.text.contains("every change needs a reason"))
            #expect(try await console.storage.latestPolicyVersion() == nil)
            // Not for a role that may only read, nor without the token.
            #expect(try await console.post("/console/policy", as: .auditor, [("yaml", "policy: {}"), ("reason", "r")]).status == 403)
            #expect(try await console.post("/console/policy", as: .admin, [("yaml", "policy: {}"), ("reason", "r")], csrf: false).status == 403)

            let first = try await console.post("/console/policy", as: .admin, [("yaml", "policy:\r\n  block: [adult]\r\n"), ("reason", "start")])
            #expect(first.status == 303)
            #expect(first.header("Location") == "/console/policy?done=policy-saved&version=1")
            #expect(try await console.storage.latestPolicyVersion()?.policy == "policy:\n  block: [adult]\n")
            #expect(try await console.storage.latestPolicyVersion()?.author == "person:t-admin")
            let second = try await console.post(
                "/console/policy", as: .admin, [("yaml", "policy:\n  block: [adult, games]\n"), ("reason", "games in lessons")])
            #expect(second.header("Location") == "/console/policy?done=policy-saved&version=2")

            let page = try await console.get("/console/policy?done=policy-saved&version=2", as: .admin)
            #expect(page.text.contains("Policy version 2 is saved."))
            #expect(page.text.contains(#"id="locked-categories">adult, games<"#))
            #expect(page.text.contains(#"href="/console/policy/diff?from=1&amp;to=2""#))
            let auditor = try await console.get("/console/policy", as: .auditor)
            #expect(auditor.text.contains("readonly") && !auditor.text.contains(#"action="/console/policy/publish""#))

            let diff = try await console.get("/console/policy/diff?from=1&to=2", as: .safeguarding)
            #expect(diff.status == 200)
            #expect(diff.text.contains(#"<span class="remove">-  block: [adult]</span>"#))
            #expect(diff.text.contains(#"<span class="add">+  block: [adult, games]</span>"#))
            #expect(try await console.get("/console/policy/diff?from=1&to=9", as: .admin).status == 404)
            let version = try await console.get("/console/policy/versions/1", as: .auditor)
            #expect(version.text.contains(#"<pre class="code" id="version-yaml">policy:"#))
            #expect(try await console.get("/console/policy/versions/7", as: .admin).status == 404)

            let published = try await console.post("/console/policy/publish", as: .admin, [("reason", "term starts")])
            #expect(published.status == 303, "\(published.text.prefix(400))")
            #expect(published.header("Location") == "/console/policy?done=published&version=1")
            #expect(try await console.storage.currentPublication()?.policyVersion == 2)
            #expect(try await console.post("/console/policy/publish", as: .admin, []).status == 400)

            let rolled = try await console.post("/console/policy/rollback", as: .admin, [("version", "1"), ("reason", "too strict")])
            #expect(rolled.header("Location") == "/console/policy?done=rolled-back&version=3")
            #expect(try await console.storage.latestPolicyVersion()?.policy == "policy:\n  block: [adult]\n")
            let unknown = try await console.post("/console/policy/rollback", as: .admin, [("version", "9"), ("reason", "r")])
            #expect(unknown.status == 400)
            #expect(unknown.text.contains(#"id="rollback-error""#))
            #expect(
                console.hooks.all.filter { !$0.hasPrefix("records") } == [
                    "policy.set person:t-admin version 1 start", "policy.set person:t-admin version 2 games in lessons",
                    "publish person:t-admin bundle 1 term starts", "policy.rollback person:t-admin version 1 as version 3 too strict",
                ])
        }
    }

    @Test(arguments: Engine.allCases)
    func thePolicyIsEditedAsAForm(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let start =
                "groups:\n  year7: { unixGroups: [year7] }\npolicy:\n  block: [adult]\n  unknown: allow\n  groups:\n    year7: { unknown: block }\n"
            #expect(try await console.post("/console/policy", as: .admin, [("yaml", start), ("reason", "start")]).status == 303)
            let page = try await console.get("/console/policy", as: .admin)
            #expect(page.text.contains(#"action="/console/policy/form""#))
            #expect(page.text.contains(#"<legend>Group year7 (policy.groups.year7)</legend>"#))
            #expect(page.text.contains(#"name="policy.block" value="adult" checked"#))
            #expect(!(try await console.get("/console/policy", as: .auditor)).text.contains(#"action="/console/policy/form""#))

            let fields: [(String, String)] = [
                ("policy.shown", "1"), ("policy.block", "adult"), ("policy.block", "games"), ("policy.unknown", "allow"),
                ("policy.groups.year7.shown", "1"), ("policy.groups.year7.blockFrom", "inherit"), ("policy.groups.year7.unknown", "ask"),
                ("policy.groups.year7.safeSearchFrom", "own"), ("policy.groups.year7.safeSearch", "google"),
            ]
            // Refused without a reason, without the token, for a teacher; nothing stored.
            let noReason = try await console.post("/console/policy/form", as: .admin, fields)
            #expect(noReason.status == 400)
            #expect(noReason.text.contains(#"id="policy-form-errors""#) && noReason.text.contains("every change needs a reason"))
            #expect(noReason.text.contains(#"name="policy.block" value="games" checked"#))
            #expect(try await console.post("/console/policy/form", as: .admin, fields + [("reason", "r")], csrf: false).status == 403)
            #expect(try await console.post("/console/policy/form", as: .teacher, rooms: ["lab2"], fields + [("reason", "r")]).status == 403)
            #expect(try await console.storage.latestPolicyVersion()?.version == 1)

            // Two SafeSearch levels of YouTube at once: the validator's refusal, naming the key and line.
            let youtube = [("policy.groups.year7.safeSearch", "youtube-strict"), ("policy.groups.year7.safeSearch", "youtube-moderate")]
            let both = try await console.post("/console/policy/form", as: .admin, fields + youtube + [("reason", "both")])
            #expect(both.status == 400)
            #expect(both.text.contains("choose one of youtube-strict and youtube-moderate"))
            #expect(both.text.contains("policy.groups.year7.safeSearch") && both.text.contains("line"))
            #expect(both.text.contains(#"name="policy.groups.year7.safeSearch" value="youtube-moderate" checked"#))
            #expect(both.text.contains(#"value="both""#))
            #expect(try await console.storage.latestPolicyVersion()?.version == 1)

            let saved = try await console.post("/console/policy/form", as: .admin, fields + [("reason", "games in lessons")])
            #expect(saved.status == 303, "\(saved.text.prefix(600))")
            #expect(saved.header("Location") == "/console/policy?done=policy-saved&version=2")
            let latest = try await console.storage.latestPolicyVersion()
            #expect(latest?.reason == "games in lessons")
            // Only the keys changed; the file's lists and mappings keep their style.
            #expect(
                latest?.policy
                    == "groups:\n  year7: {unixGroups: [year7]}\npolicy:\n  block: [adult, games]\n  unknown: allow\n  groups:\n"
                    + "    year7: {unknown: ask, safeSearch: [google]}\n")
            #expect(console.hooks.all.filter { $0.hasPrefix("policy.set") }.last == "policy.set person:t-admin version 2 games in lessons")
        }
    }

    @Test(arguments: Engine.allCases)
    func theDashboardCountsTheLastHourInScope(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let server = console.server
            let lab2 = try await server.enrol(TestMachine(), room: "lab2")
            let lab3 = try await server.enrol(TestMachine(), room: "lab3")
            // 08:00 on the server's clock of 09:00: in the last hour.
            #expect(try await server.post("/api/v1/machine/records", APITests.recordsBody(1...3), signedBy: lab2).status == 200)
            let other = APITests.recordsBody(1...2).replacingOccurrences(of: "casino.example", with: "<b>bet</b>.example")
                .replacingOccurrences(of: #""group":"students""#, with: #""group":"staff""#)
            #expect(try await server.post("/api/v1/machine/records", other, signedBy: lab3).status == 200)

            let admin = try await console.get("/console/", as: .admin)
            #expect(admin.status == 200)
            #expect(admin.text.contains(#"<tr><th scope="row" class="wrap">casino.example</th><td class="number">3</td></tr>"#))
            #expect(admin.text.contains("&lt;b&gt;bet&lt;/b&gt;.example") && !admin.text.contains("<b>bet"))
            #expect(admin.text.contains(">gambling</a></th><td class=\"number\">5</td>"))
            // Two machines enrolled, never checked in: stale.
            #expect(admin.text.contains(#"<span class="state state-stale">Stale</span></a></th><td class="number">2</td>"#))
            #expect(admin.text.contains("From 08:00 to 09:00 (Europe/London)."))
            let teacher = try await console.get("/console/", as: .teacher, rooms: ["lab2"])
            #expect(teacher.text.contains(">gambling</a></th><td class=\"number\">3</td>"))
            #expect(!teacher.text.contains("bet"))
            #expect(teacher.text.contains(#"<span class="state state-stale">Stale</span></a></th><td class="number">1</td>"#))
        }
    }

    @Test(arguments: [Engine.sqlite])
    func peopleAndTheAuditTrail(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let admin = try await console.get("/console/people", as: .admin)
            #expect(admin.status == 200)
            #expect(admin.text.contains("&lt;b&gt;Kim&lt;/b&gt;"))
            #expect(admin.text.contains(#"action="/console/people/mr.kim""#))
            #expect(admin.text.contains(#"id="add-person""#))
            let auditor = try await console.get("/console/people", as: .auditor)
            #expect(auditor.status == 200)
            #expect(!auditor.text.contains("add-person") && !auditor.text.contains(#"method="post" action="/console/people"#))
            let audit = try await console.get("/console/audit?actor=person%3Adsl", as: .safeguarding)
            #expect(audit.text.contains("timeline.open") && audit.text.contains(">alice<"))
            #expect(try await console.get("/console/audit?actor=nobody", as: .admin).text.contains(#"id="no-events""#))
            #expect(try await console.get("/console/audit?since=yesterday", as: .admin).status == 400)
        }
    }
}
