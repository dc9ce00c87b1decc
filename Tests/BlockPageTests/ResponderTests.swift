@testable import BlockPage
import Foundation
import Testing

/// A backend that explains every host as category `games` and keeps submitted forms.
final class RecordingBackend: BlockPageBackend, @unchecked Sendable {
    var submitted: [(AccessRequestForm, String?)] = []
    /// The code `submit` refuses with; nil: it records.
    var refusal: String?
    var status: AccessRequestStatus?
    let formTokens = RequestFormTokens(secret: Array(repeating: 7, count: 32))

    func explain(host: String, url: String, user: String?) -> BlockedRequest {
        BlockedRequest(host: host, url: url, category: "games", rule: "games: \(host)", reason: "category", user: user, accessRequest: status)
    }

    func submit(_ form: AccessRequestForm, user: String?) -> Result<String, BlockPageError> {
        if let refusal { return .failure(BlockPageError(code: refusal, message: refusal)) }
        submitted.append((form, user))
        return .success("0badc0de")
    }
}

@Suite struct ResponderTests {
    func responder(_ access: RequestAccess? = .builtIn(text: "Ask"), backend: RecordingBackend = RecordingBackend()) throws -> BlockPageResponder {
        let renderer = try BlockPageRenderer(settings: BlockPageSettings(organization: "Lakeside", requestAccess: access))
        return BlockPageResponder(renderer: renderer, backend: backend, ownNames: ["127.0.0.1", "::1", "localhost"])
    }

    func text(_ response: BlockPageResponse) -> String { String(decoding: response.body, as: UTF8.self) }

    @Test func theHostHeaderNamesTheBlockedSite() throws {
        let response = try responder().respond(to: BlockPageRequest(method: "GET", target: "/watch?v=1", host: "games.example"))
        #expect(response.status == 403)
        #expect(text(response).contains("http://games.example/watch?v=1"))
        #expect(text(response).contains("games: games.example"))
    }

    @Test func aDirectVisitTakesTheURLFromTheQuery() throws {
        let page = try responder().respond(
            to: BlockPageRequest(method: "GET", target: "/?url=https%3A%2F%2FWWW.Games.example%3A8443%2Fx", host: "127.0.0.1"))
        #expect(page.status == 403 && text(page).contains("www.games.example"))
        let nothing = try responder().respond(to: BlockPageRequest(method: "GET", target: "/", host: "localhost"))
        #expect(nothing.status == 404)
        let bad = try responder().respond(to: BlockPageRequest(method: "GET", target: "/?url=javascript%3Aalert(1)", host: "::1"))
        #expect(bad.status == 404)
    }

    /// A form as the page gave it to `user`, posted back.
    func post(_ body: String, user: String? = "kim", backend: RecordingBackend = RecordingBackend(), language: String? = nil) throws
        -> BlockPageResponse
    {
        try responder(backend: backend).respond(
            to: BlockPageRequest(
                method: "POST", target: "/request-access", host: "games.example", acceptLanguage: language, body: Array(body.utf8), user: user))
    }

    func token(user: String?, host: String = "games.example") -> String {
        RecordingBackend().formTokens.token(user: user, host: host)
    }

    @Test func theFormIsRecordedWithTheUser() throws {
        let backend = RecordingBackend()
        let page = try responder(backend: backend).respond(to: BlockPageRequest(method: "GET", target: "/", host: "games.example", user: "kim"))
        let marker = "name=\"token\" value=\""
        let start = try #require(text(page).range(of: marker)).upperBound
        let pageToken = String(text(page)[start...].prefix { $0 != "\"" })
        #expect(pageToken == token(user: "kim"))
        let response = try post(
            "host=games.example&url=http%3A%2F%2Fgames.example%2F&category=games&reason=For+class&token=\(pageToken)", backend: backend)
        #expect(response.status == 200 && text(response).contains("0badc0de"))
        #expect(backend.submitted.count == 1 && backend.submitted[0].0.reason == "For class" && backend.submitted[0].1 == "kim")
    }

    // Before the token, any page could post a request in the name of whoever's browser loaded it.
    @Test func aFormWithoutTheRightTokenIsRefused() throws {
        let backend = RecordingBackend()
        for body in [
            "host=games.example&reason=r",  // none: another site's form
            "host=games.example&reason=r&token=\(token(user: "lee"))",  // another local user's page
            "host=games.example&reason=r&token=\(token(user: "kim", host: "other.example"))",  // another host's page
            "host=games.example&reason=r&token=\(RequestFormTokens(secret: Array(repeating: 8, count: 32)).token(user: "kim", host: "games.example"))",  // before a restart
        ] {
            let response = try post(body, backend: backend)
            #expect(response.status == 403)
            #expect(text(response).contains("This form has expired or did not come from this page."))
        }
        #expect(try post("host=games.example&reason=r", backend: backend, language: "ko").text.contains("이 양식은 만료되었거나"))
        #expect(backend.submitted.isEmpty)
    }

    @Test func tokensLastTwoWindows() {
        let tokens = RequestFormTokens(secret: Array(repeating: 1, count: 32))
        let made = Date(timeIntervalSince1970: 1_800_000_000)
        let token = tokens.token(user: "kim", host: "games.example", now: made)
        #expect(tokens.verify(token, user: "kim", host: "Games.Example", now: made))
        #expect(tokens.verify(token, user: "kim", host: "games.example", now: made.addingTimeInterval(3600)))
        #expect(!tokens.verify(token, user: "kim", host: "games.example", now: made.addingTimeInterval(7200)))
        #expect(!tokens.verify(token, user: nil, host: "games.example", now: made))
        #expect(!tokens.verify("", user: "kim", host: "games.example", now: made))
    }

    @Test func aMissingOrLongReasonAndTheLimitsHaveTheirOwnPages() throws {
        let missing = try post("host=games.example&reason=+&token=\(token(user: "kim"))")
        #expect(missing.status == 400 && missing.text.contains("Please say why you need this page."))
        let long = try post("host=games.example&reason=\(String(repeating: "a", count: 501))&token=\(token(user: "kim"))")
        #expect(long.status == 400 && long.text.contains("at most 500 characters"))
        let backend = RecordingBackend()
        let body = "host=games.example&reason=r&token=\(token(user: "kim"))"
        backend.refusal = "requests.user-pending"
        #expect(try post(body, backend: backend).status == 429)
        #expect(try post(body, backend: backend).text.contains("You have too many requests waiting already."))
        backend.refusal = "requests.user-daily"
        #expect(try post(body, backend: backend, language: "ko").text.contains("오늘 보낼 수 있는 요청을 모두 보냈습니다."))
        backend.refusal = "requests.full"
        #expect(try post(body, backend: backend).status == 503)
    }

    @Test func formsAreRefusedWhereTheyDoNotBelong() throws {
        let body = Array("host=games.example&url=x&reason=r&token=\(token(user: nil))".utf8)
        let linkOnly = try responder(.link(text: "Ask", urlTemplate: "https://help.example/?u={url}"))
        #expect(linkOnly.respond(to: BlockPageRequest(method: "POST", target: "/request-access", host: "g.example", body: body)).status == 404)
        let malformed = try responder().respond(
            to: BlockPageRequest(method: "POST", target: "/request-access", host: "g.example", body: Array("host=%zz".utf8)))
        #expect(malformed.status == 400)
        let full = RecordingBackend()
        full.refusal = "requests.full"
        #expect(try responder(backend: full).respond(to: BlockPageRequest(method: "POST", target: "/request-access", host: "g", body: body)).status == 503)
        let put = try responder().respond(to: BlockPageRequest(method: "PUT", target: "/", host: "g.example"))
        #expect(put.status == 405 && put.header(named: "Allow") == "GET, HEAD, POST")
    }

    @Test func hostHeadersLoseTheirPort() {
        #expect(BlockPageHTTPHandler.hostWithoutPort("games.example:8080") == "games.example")
        #expect(BlockPageHTTPHandler.hostWithoutPort("[2001:db8::1]:443") == "2001:db8::1")
        #expect(BlockPageHTTPHandler.hostWithoutPort(" games.example ") == "games.example")
    }
}

@Suite struct LocalCertificateAuthorityTests {
    @Test func aCAIsMadeOnceSignsNamesAndKeepsItsKeyPrivate() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-ca-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let authority = try LocalCertificateAuthority.create(folder: folder, organization: "Lakeside")
        let mode = try FileManager.default.attributesOfItem(atPath: folder + "/ca-key.pem")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(authority.pem.hasPrefix("-----BEGIN CERTIFICATE-----"))
        // A second init would silently untrust every machine: refused without --force.
        #expect(throws: BlockPageError.self) { try LocalCertificateAuthority.create(folder: folder, organization: "Lakeside") }
        let reloaded = try LocalCertificateAuthority(folder: folder)
        #expect(reloaded.certificate == authority.certificate)

        let certificates = try BlockPageCertificates(authority: reloaded)
        let chain = try certificates.certificate(for: "Games.Example").chain
        #expect(chain.count == 2)
        #expect(try certificates.certificate(for: "games.example").chain == chain)  // cached, by lower-cased name
        let leaf = try reloaded.issue(for: "games.example", key: .init())
        #expect(leaf.issuer == reloaded.certificate.subject)
        #expect(reloaded.certificate.publicKey.isValidSignature(leaf.signature, for: leaf))

        // A key that does not belong to the certificate is a clear error.
        try LocalCertificateAuthority.create(folder: folder + "/other", organization: "Other")
        try FileManager.default.removeItem(atPath: folder + "/ca-key.pem")
        try FileManager.default.copyItem(atPath: folder + "/other/ca-key.pem", toPath: folder + "/ca-key.pem")
        do {
            _ = try LocalCertificateAuthority(folder: folder)
            Issue.record("a foreign key was accepted")
        } catch {
            #expect(error.code == "ca.mismatch")
        }
    }
}
