import Foundation
import Hummingbird
import NIOHTTP1
@testable import SchoolServer
import Testing

/// The console's sign-in and sessions through the real server over HTTPS,
/// on both engines: the cookie, CSRF and Origin, the idle timeout and the
/// absolute lifetime on the test clock, lockout, the per-address limit,
/// sign-out (everywhere), and a disabled person. A probe route behind
/// `ConsoleSessionMiddleware` stands for the console's pages.
@Suite struct SessionTests {
    static let password = "correct horse battery"

    /// `GET` and `POST /console/probe`: who is signed in, and the session's CSRF token.
    static let probe: @Sendable (Router<ServerRequestContext>, Sessions) -> Void = { router, sessions in
        let group = router.group("/console").add(middleware: ConsoleSessionMiddleware(sessions: sessions))
        let answer: @Sendable (Request, ServerRequestContext) async throws -> String = { _, context in
            "\(context.principal?.author ?? "-") \(context.principal?.role.rawValue ?? "-") \(context.csrfToken ?? "-")"
        }
        group.get("probe", use: answer)
        group.post("probe", use: answer)
    }

    /// A server with the probe and a teacher `alice` of lab2.
    static func withServer(
        _ engine: Engine, configure: @escaping (inout ServerConfiguration) -> Void = { _ in }, _ body: @Sendable (RunningServer) async throws -> Void
    ) async throws {
        try await withRunningServer(engine, configure: configure, addRoutes: probe) { server async throws in
            _ = try await ServerAdministration.addPerson(
                storage: server.storage, login: "alice", displayName: "Alice", role: .teacher, scope: Scope(rooms: ["lab2"]), password: password,
                author: "cli:test", now: server.clock.now)
            try await body(server)
        }
    }

    /// A signed-in browser: its cookie and the session's CSRF token.
    struct Browser: Sendable {
        let cookie: String
        let csrf: String
        var header: (String, String) { ("Cookie", "\(Sessions.cookieName)=\(cookie)") }
    }

    static func form(_ fields: [(String, String)]) -> [UInt8] {
        Array(fields.map { "\($0.0)=\(FormFields.encode($0.1))" }.joined(separator: "&").utf8)
    }

    static let formType = ("Content-Type", "application/x-www-form-urlencoded")

    static func signIn(
        _ server: RunningServer, login: String = "alice", password: String = password, next: String? = nil, extra: [(String, String)] = []
    ) async throws -> PinnedHTTPSClient.Answer {
        var fields = [("login", login), ("password", password)]
        if let next { fields.append(("next", next)) }
        return try await server.client.request(.POST, "/console/sign-in", headers: [formType] + extra, body: form(fields))
    }

    /// Signs in and reads the CSRF token from the probe.
    static func browser(_ server: RunningServer) async throws -> Browser {
        let answer = try await signIn(server)
        #expect(answer.status == 303, "\(answer.text)")
        let setCookie = try #require(answer.header("Set-Cookie"))
        let value = String(setCookie.split(separator: ";")[0].dropFirst(Sessions.cookieName.count + 1))
        let probe = try await server.client.request(.GET, "/console/probe", headers: [("Cookie", "\(Sessions.cookieName)=\(value)")])
        #expect(probe.status == 200)
        return Browser(cookie: value, csrf: String(probe.text.split(separator: " ").last ?? ""))
    }

    static func probe(_ server: RunningServer, _ browser: Browser) async throws -> Int {
        try await server.client.request(.GET, "/console/probe", headers: [browser.header]).status
    }

    @Test(arguments: Engine.allCases)
    func aSignInGivesAStrictCookieAndGoesOnlyToAConsolePath(engine: Engine) async throws {
        try await Self.withServer(engine) { server async throws in
            let answer = try await Self.signIn(server, next: "/console/records?user=bob&since=2025-11-28T00:00:00Z")
            #expect(answer.status == 303)
            #expect(answer.header("Location") == "/console/records?user=bob&since=2025-11-28T00:00:00Z")
            let cookie = try #require(answer.header("Set-Cookie"))
            let attributes = Set(cookie.split(separator: ";").dropFirst().map { $0.trimmingCharacters(in: .whitespaces) })
            #expect(attributes == ["Path=/", "Secure", "HttpOnly", "SameSite=Strict"])
            #expect(cookie.hasPrefix("__Host-hallpass-session="))
            let value = String(cookie.split(separator: ";")[0].dropFirst(Sessions.cookieName.count + 1))
            #expect(Secrets.isWellFormedSecret(value))
            // Only the hash is stored.
            let sessions = try await server.storage.sessions(login: "alice")
            #expect(sessions.map(\.hash) == [Secrets.hash(value)])

            let probe = try await server.client.request(.GET, "/console/probe", headers: [("Cookie", "\(Sessions.cookieName)=\(value)")])
            #expect(probe.status == 200)
            #expect(probe.text.hasPrefix("person:alice teacher "))

            // Anywhere else is the console's start page.
            for next in ["https://evil.example/", "//evil.example/console/", "/console/../api/v1/records", "/elsewhere", "/console\\@evil"] {
                #expect(try await Self.signIn(server, next: next).header("Location") == "/console/", "\(next)")
            }
            // A new session at every sign-in.
            #expect(try await server.storage.sessions(login: "alice").count == 6)

            // No session: a GET goes to the sign-in page and back; a POST is refused.
            let signedOut = try await server.client.request(.GET, "/console/probe?x=1")
            #expect(signedOut.status == 303)
            #expect(signedOut.header("Location") == "/console/sign-in?next=/console/probe%3Fx%3D1")
            let stranger = try await server.client.request(
                .GET, "/console/probe", headers: [("Cookie", "\(Sessions.cookieName)=\(Secrets.newSecret())")])
            #expect(stranger.status == 303)
            #expect(try await server.client.request(.POST, "/console/probe", headers: [Self.formType], body: Self.form([("csrf", "x")])).status == 403)

            let events = try await server.storage.auditEvents(AuditQuery(action: "sign-in")).events
            #expect(events.count == 6)
            #expect(events.allSatisfy { $0.event.actor == "person:alice" })
        }
    }

    @Test(arguments: Engine.allCases)
    func aPostNeedsItsSessionsCSRFTokenAndOrigin(engine: Engine) async throws {
        try await Self.withServer(engine) { server async throws in
            let browser = try await Self.browser(server)
            #expect(Secrets.isWellFormedSecret(browser.csrf))
            func post(_ headers: [(String, String)], _ fields: [(String, String)]) async throws -> PinnedHTTPSClient.Answer {
                try await server.client.request(.POST, "/console/probe", headers: [browser.header, Self.formType] + headers, body: Self.form(fields))
            }
            // Without the token, with a wrong one, with another session's.
            let missing = try await post([], [("reason", "x")])
            #expect(missing.status == 403)
            #expect(missing.header("Hallpass-Refusal") == "csrf")
            #expect(missing.text.contains("security token"))
            #expect(try await post([], [("csrf", Secrets.newSecret())]).status == 403)
            #expect(try await post([], [("csrf", browser.csrf + "x")]).status == 403)
            let other = try await Self.browser(server)
            #expect(try await post([], [("csrf", other.csrf)]).status == 403)
            // With it: in the form, or in the header.
            #expect(try await post([], [("reason", "x"), ("csrf", browser.csrf)]).status == 200)
            #expect(try await post([("X-CSRF-Token", browser.csrf)], []).status == 200)
            // From another origin, even with the token; from its own, accepted.
            let foreign = try await post([("Origin", "https://evil.example")], [("csrf", browser.csrf)])
            #expect(foreign.status == 403)
            #expect(foreign.header("Hallpass-Refusal") == "origin")
            #expect(try await post([("Origin", "null")], [("csrf", browser.csrf)]).status == 403)
            #expect(try await post([("Origin", "https://127.0.0.1:\(server.client.port)")], [("csrf", browser.csrf)]).status == 200)
            // A sign-in posted from another site's page is refused too.
            #expect(try await Self.signIn(server, extra: [("Origin", "https://evil.example")]).status == 403)
        }
    }

    @Test(arguments: Engine.allCases)
    func aSessionEndsWhenIdleAndAtItsLifetime(engine: Engine) async throws {
        try await Self.withServer(engine, configure: { $0.console.sessionLifetime = 2 * 3600 }) { server async throws in
            let browser = try await Self.browser(server)
            // Used every 29 minutes: it lasts.
            for _ in 0..<3 {
                server.clock.advance(29 * 60)
                #expect(try await Self.probe(server, browser) == 200)
            }
            // Unused for 30 minutes: it ended, and is gone.
            server.clock.advance(30 * 60)
            #expect(try await Self.probe(server, browser) == 303)
            #expect(try await server.storage.sessions(login: "alice").isEmpty)

            // Used every 20 minutes, it still ends 2 h after the sign-in.
            let second = try await Self.browser(server)
            for _ in 0..<5 {
                server.clock.advance(20 * 60)
                #expect(try await Self.probe(server, second) == 200)
            }
            server.clock.advance(20 * 60)
            #expect(try await Self.probe(server, second) == 303)
        }
    }

    @Test(arguments: Engine.allCases)
    func failedSignInsLockTheAccountWithTheSameAnswer(engine: Engine) async throws {
        try await Self.withServer(engine) { server async throws in
            let unknown = try await Self.signIn(server, login: "nobody", next: "/console/records")
            #expect(unknown.status == 303)
            #expect(unknown.header("Location") == "/console/sign-in?error=1&next=/console/records")
            #expect(unknown.header("Set-Cookie") == nil)
            for _ in 1...5 {
                let wrong = try await Self.signIn(server, password: "wrong password!", next: "/console/records")
                // The same answer as for an account that does not exist.
                #expect(wrong.status == unknown.status)
                #expect(wrong.header("Location") == unknown.header("Location"))
                #expect(wrong.text == unknown.text)
                #expect(wrong.header("Set-Cookie") == nil)
            }
            // Locked: the right password is refused, with the same answer.
            let locked = try await Self.signIn(server, next: "/console/records")
            #expect(locked.header("Location") == unknown.header("Location"))
            #expect(locked.header("Set-Cookie") == nil)
            #expect(try await server.storage.sessions(login: "alice").isEmpty)
            server.clock.advance(14 * 60)
            #expect(try await Self.signIn(server).header("Set-Cookie") == nil)
            // After 15 minutes it opens again.
            server.clock.advance(61)
            let opened = try await Self.signIn(server)
            #expect(opened.header("Location") == "/console/")
            #expect(opened.header("Set-Cookie") != nil)

            let failed = try await server.storage.auditEvents(AuditQuery(action: "sign-in.failed")).events
            #expect(failed.count == 6)
            #expect(failed.allSatisfy { $0.event.actor == "address:127.0.0.1" })
            #expect(failed.first?.event.detail?.contains("locked") == true)
            #expect(try await server.storage.auditEvents(AuditQuery(action: "sign-in.locked")).events.count == 2)
            // Never the password in the trail.
            let all = try await server.storage.auditEvents(AuditQuery(limit: 1000)).events
            #expect(!all.contains { "\($0)".contains(Self.password) || "\($0)".contains("wrong password") })
        }
    }

    @Test(arguments: Engine.allCases)
    func oneAddressMaySignInOnlySoOftenAMinute(engine: Engine) async throws {
        try await Self.withServer(engine, configure: { $0.console.signInRate = 3 }) { server async throws in
            for _ in 1...3 { #expect(try await Self.signIn(server, password: "wrong password!").status == 303) }
            let refused = try await Self.signIn(server)
            #expect(refused.status == 429)
            #expect(refused.header("Retry-After") == "60")
            #expect(refused.header("Set-Cookie") == nil)
            server.clock.advance(60)
            #expect(try await Self.signIn(server).header("Set-Cookie") != nil)
        }
    }

    @Test(arguments: Engine.allCases)
    func signOutEndsTheSessionAndSignOutEverywhereTheOthers(engine: Engine) async throws {
        try await Self.withServer(engine) { server async throws in
            let laptop = try await Self.browser(server)
            let phone = try await Self.browser(server)
            let library = try await Self.browser(server)
            // Sign-out needs the CSRF token like any other post.
            #expect(try await server.client.request(.POST, "/console/sign-out", headers: [laptop.header]).status == 403)
            let out = try await server.client.request(
                .POST, "/console/sign-out", headers: [laptop.header, Self.formType], body: Self.form([("csrf", laptop.csrf)]))
            #expect(out.status == 303)
            #expect(out.header("Location") == "/console/sign-in")
            #expect(out.header("Set-Cookie")?.contains("Max-Age=0") == true)
            #expect(try await Self.probe(server, laptop) == 303)
            #expect(try await Self.probe(server, phone) == 200)

            let everywhere = try await server.client.request(
                .POST, "/console/sign-out-everywhere", headers: [phone.header, ("X-CSRF-Token", phone.csrf)])
            #expect(everywhere.status == 303)
            #expect(try await Self.probe(server, phone) == 303)
            #expect(try await Self.probe(server, library) == 303)
            #expect(try await server.storage.auditEvents(AuditQuery(action: "sign-out")).events.count == 1)
            let ended = try await server.storage.auditEvents(AuditQuery(action: "session.sign-out-everywhere")).events
            #expect(ended.map(\.event.target) == ["alice"])
            #expect(ended.first?.event.detail == "2 sessions")
        }
    }

    @Test(arguments: Engine.allCases)
    func aDisabledOrRemovedPersonsSessionStopsWorking(engine: Engine) async throws {
        try await Self.withServer(engine) { server async throws in
            // Disabled in the storage alone: the middleware reads the person at each request.
            let browser = try await Self.browser(server)
            var alice = try #require(try await server.storage.person(login: "alice"))
            alice.disabledAt = server.clock.now
            #expect(try await server.storage.updatePerson(alice))
            #expect(try await Self.probe(server, browser) == 303)
            #expect(try await Self.signIn(server).header("Set-Cookie") == nil)

            // Enabled again, signed in, disabled by the command: the session is gone.
            _ = try await ServerAdministration.changePerson(
                storage: server.storage, login: "alice", .init(disabled: false), author: "cli:test", now: server.clock.now)
            let second = try await Self.browser(server)
            // A role changed takes effect at the next request.
            _ = try await ServerAdministration.changePerson(
                storage: server.storage, login: "alice", .init(role: .auditor, scope: .school), author: "cli:test", now: server.clock.now)
            let probe = try await server.client.request(.GET, "/console/probe", headers: [second.header])
            #expect(probe.text.hasPrefix("person:alice auditor "))
            _ = try await ServerAdministration.changePerson(
                storage: server.storage, login: "alice", .init(disabled: true), author: "cli:test", now: server.clock.now)
            #expect(try await server.storage.sessions(login: "alice").isEmpty)
            #expect(try await Self.probe(server, second) == 303)

            _ = try await ServerAdministration.changePerson(
                storage: server.storage, login: "alice", .init(disabled: false), author: "cli:test", now: server.clock.now)
            let third = try await Self.browser(server)
            try await ServerAdministration.removePerson(storage: server.storage, login: "alice", author: "cli:test", now: server.clock.now)
            #expect(try await Self.probe(server, third) == 303)
        }
    }
}
