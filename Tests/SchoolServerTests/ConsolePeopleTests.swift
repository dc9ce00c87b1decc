import Foundation
import NIOHTTP1
@testable import SchoolServer
import Testing

/// The People page's forms through the real server and its real sessions
/// (the console as `serve` mounts it), on both engines: an admin adds and
/// changes accounts with the checks of `hallpass-server user`, each change
/// in the audit trail under the admin's name; an admin cannot demote or
/// disable themselves; nobody else may post them.
@Suite struct ConsolePeopleTests {
    static let password = "correct horse battery"

    /// Signs `login` in; its cookie header and the CSRF token of its session (read from the People or dashboard page).
    static func signIn(_ server: RunningServer, _ login: String) async throws -> (cookie: (String, String), csrf: String) {
        let answer = try await SessionTests.signIn(server, login: login, password: password)
        #expect(answer.status == 303, "\(answer.text)")
        let setCookie = try #require(answer.header("Set-Cookie"))
        let cookie = ("Cookie", String(setCookie.split(separator: ";")[0]))
        let page = try await server.client.request(.GET, "/console/", headers: [cookie])
        #expect(page.status == 200, "\(page.text.prefix(300))")
        let marker = #"name="csrf" value=""#
        let start = try #require(page.text.range(of: marker)).upperBound
        let csrf = String(page.text[start...].prefix { $0 != "\"" })
        return (cookie, csrf)
    }

    static func post(
        _ server: RunningServer, _ path: String, _ browser: (cookie: (String, String), csrf: String), _ fields: [(String, String)]
    ) async throws -> PinnedHTTPSClient.Answer {
        try await server.client.request(
            .POST, path, headers: [browser.cookie, SessionTests.formType], body: SessionTests.form([("csrf", browser.csrf)] + fields))
    }

    @Test(arguments: Engine.allCases)
    func anAdminAddsAndChangesAccountsAndNobodyElseMay(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            for (login, role) in [("it", Role.admin), ("dora", .safeguarding)] {
                _ = try await ServerAdministration.addPerson(
                    storage: server.storage, login: login, displayName: nil, role: role, scope: .school, password: Self.password,
                    author: "cli:test", now: server.clock.now)
            }
            let admin = try await Self.signIn(server, "it")

            // A teacher without a room or group is refused, and nothing is added.
            let noScope = try await Self.post(server, "/console/people", admin, [("login", "mr.kim"), ("role", "teacher"), ("password", Self.password)])
            #expect(noScope.status == 303 && noScope.header("Location") == "/console/people?error=role")
            #expect(try await server.storage.person(login: "mr.kim") == nil)
            let page = try await server.client.request(.GET, "/console/people?error=role", headers: [admin.cookie])
            #expect(page.text.contains(#"id="people-error""#) && page.text.contains("A teacher needs at least one room or group"))
            // A link cannot put words of its own on the page.
            let forged = try await server.client.request(.GET, "/console/people?error=%3Cb%3Ehi", headers: [admin.cookie])
            #expect(!forged.text.contains("people-error"))

            // With a room: a local account that signs in, and the trail names the admin.
            let added = try await Self.post(
                server, "/console/people", admin,
                [("login", "mr.kim"), ("name", "Mr Kim"), ("role", "teacher"), ("rooms", "lab2, lab3"), ("password", Self.password)])
            #expect(added.header("Location") == "/console/people?done=person-added")
            let kim = try #require(try await server.storage.person(login: "mr.kim"))
            #expect(kim.role == .teacher && kim.scope == Scope(rooms: ["lab2", "lab3"]) && kim.method == .local)
            _ = try await Self.signIn(server, "mr.kim")
            // Without a password: an account of the school's provider, which has no password here.
            _ = try await Self.post(server, "/console/people", admin, [("login", "ms.lee"), ("role", "auditor")])
            #expect(try await server.storage.person(login: "ms.lee")?.method == .oidc)
            #expect(
                try await Self.post(server, "/console/people", admin, [("login", "ms.lee"), ("role", "auditor")]).header("Location")
                    == "/console/people?error=exists")

            // A change: the teacher disabled (the checkbox left out); their sessions end.
            let changed = try await Self.post(server, "/console/people/mr.kim", admin, [("role", "teacher"), ("rooms", "lab2")])
            #expect(changed.header("Location") == "/console/people?done=person-changed")
            let after = try #require(try await server.storage.person(login: "mr.kim"))
            #expect(after.disabledAt != nil && after.scope == Scope(rooms: ["lab2"]))
            #expect(try await server.storage.sessions(login: "mr.kim").isEmpty)
            // The admin's own account: no demotion, no disabling.
            let demoted = try await Self.post(server, "/console/people/it", admin, [("role", "auditor"), ("enabled", "yes")])
            #expect(demoted.header("Location") == "/console/people?error=self")
            #expect(try await server.storage.person(login: "it")?.role == .admin)

            let trail = try await server.storage.auditEvents(AuditQuery(actor: "person:it", limit: 50)).events.map(\.event)
            #expect(trail.filter { $0.action == "person.add" }.compactMap(\.target).sorted() == ["mr.kim", "ms.lee"])
            #expect(trail.contains { $0.action == "person.change" && $0.target == "mr.kim" })

            // The safeguarding lead sees no People page and may not post to it; without the CSRF token not even an admin.
            let dsl = try await Self.signIn(server, "dora")
            #expect(try await server.client.request(.GET, "/console/people", headers: [dsl.cookie]).status == 403)
            let refused = try await Self.post(server, "/console/people", dsl, [("login", "x"), ("role", "admin"), ("password", Self.password)])
            let x = try await server.storage.person(login: "x")
            #expect(refused.status == 403 && x == nil)
            let noToken = try await server.client.request(
                .POST, "/console/people", headers: [admin.cookie, SessionTests.formType],
                body: SessionTests.form([("login", "y"), ("role", "auditor"), ("password", Self.password)]))
            let y = try await server.storage.person(login: "y")
            #expect(noToken.status == 403 && y == nil)
        }
    }

    /// A person's email address (where their alert emails go): given when the
    /// account is added, changed or removed with the row's form, checked as
    /// `hallpass-server user` checks it; an admin may change their own.
    @Test(arguments: Engine.allCases)
    func anAdminGivesAndChangesEmailAddresses(engine: Engine) async throws {
        try await withRunningServer(engine) { server async throws in
            _ = try await ServerAdministration.addPerson(
                storage: server.storage, login: "it", displayName: nil, role: .admin, scope: .school, password: Self.password,
                author: "cli:test", now: server.clock.now)
            let admin = try await Self.signIn(server, "it")

            let added = try await Self.post(
                server, "/console/people", admin,
                [("login", "dora"), ("role", "safeguarding"), ("email", " dora@school.example "), ("password", Self.password)])
            #expect(added.header("Location") == "/console/people?done=person-added")
            #expect(try await server.storage.person(login: "dora")?.email == "dora@school.example")
            let page = try await server.client.request(.GET, "/console/people", headers: [admin.cookie])
            #expect(page.text.contains(#"name="email" type="email" value="dora@school.example""#))

            // A header's worth of text is not an address: refused, nothing added.
            let forged = try await Self.post(
                server, "/console/people", admin,
                [("login", "eve"), ("role", "safeguarding"), ("email", "eve@school.example\r\nBcc: all@school.example"), ("password", Self.password)])
            #expect(forged.header("Location") == "/console/people?error=email")
            #expect(try await server.storage.person(login: "eve") == nil)
            let refusal = try await server.client.request(.GET, "/console/people?error=email", headers: [admin.cookie])
            #expect(refusal.text.contains("An email address is one plain address"))

            // The row's form: changed, then removed (empty); a form without the field keeps it.
            let changed = try await Self.post(
                server, "/console/people/dora", admin, [("role", "safeguarding"), ("email", "dsl@school.example"), ("enabled", "yes")])
            #expect(changed.header("Location") == "/console/people?done=person-changed")
            #expect(try await server.storage.person(login: "dora")?.email == "dsl@school.example")
            _ = try await Self.post(server, "/console/people/dora", admin, [("role", "safeguarding"), ("enabled", "yes"), ("rooms", "lab1")])
            #expect(try await server.storage.person(login: "dora")?.email == "dsl@school.example")
            _ = try await Self.post(server, "/console/people/dora", admin, [("role", "safeguarding"), ("email", ""), ("enabled", "yes"), ("rooms", "lab1")])
            #expect(try await server.storage.person(login: "dora")?.email == nil)
            // Their own address, an admin may change.
            let own = try await Self.post(server, "/console/people/it", admin, [("role", "admin"), ("email", "it@school.example"), ("enabled", "yes")])
            #expect(own.header("Location") == "/console/people?done=person-changed")
            #expect(try await server.storage.person(login: "it")?.email == "it@school.example")
            let trail = try await server.storage.auditEvents(AuditQuery(action: "person.change", limit: 50)).events.compactMap(\.event.detail)
            #expect(trail.contains("email dsl@school.example") && trail.contains("no email"))
        }
    }
}
