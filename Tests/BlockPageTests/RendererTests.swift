@testable import BlockPage
import Foundation
import Testing
import VerdictCore

@Suite struct RendererTests {
    let renderer: BlockPageRenderer

    init() throws {
        renderer = try BlockPageRenderer(settings: BlockPageSettings(organization: "Example School"))
    }

    @Test func englishBlockPageShowsWhatWasBlocked() {
        let response = renderer.blockPage(for: casinoRequest, acceptLanguage: "en-US,en;q=0.9")
        let html = response.text
        #expect(response.status == 403)
        #expect(response.language == "en")
        #expect(html.hasPrefix("<!doctype html>"))
        #expect(html.contains("<html lang=\"en\" dir=\"ltr\">"))
        #expect(html.contains("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"))
        #expect(html.contains("<h1>This page is blocked</h1>"))
        #expect(html.elementText(id: "organization") == "Example School")
        #expect(html.elementText(id: "blocked-host") == "casino.example")
        #expect(html.elementText(id: "blocked-url") == "http://casino.example/play?game=1")
        #expect(html.elementText(id: "blocked-category") == "gambling")
        #expect(html.elementText(id: "blocked-rule") == "gambling: casino.example")
        #expect(html.elementText(id: "blocked-reason") == "category")
        #expect(html.hasSuffix("</html>\n"))
    }

    @Test func koreanChosenFromAcceptLanguage() {
        let response = renderer.blockPage(for: casinoRequest, acceptLanguage: "ko-KR,ko;q=0.9,en;q=0.8")
        #expect(response.language == "ko")
        #expect(response.header(named: "Content-Language") == "ko")
        #expect(response.text.contains("<html lang=\"ko\""))
        #expect(response.text.contains("<h1>이 페이지는 차단되었습니다</h1>"))
        #expect(response.text.contains("<dt>분류</dt>"))
    }

    @Test(arguments: [
        ("fr", "en"), ("fr-FR,de;q=0.5", "en"), (";;;,,,q=", "en"), ("ko;q=abc", "en"), ("*", "en"),
        ("", "en"), ("ko;q=0", "en"), ("en;q=0.1, ko;q=0.2", "ko"), ("KO", "ko"),
    ])
    func languageFromHeader(header: String, expected: String) {
        #expect(renderer.blockPage(for: casinoRequest, acceptLanguage: header).language == expected)
    }

    @Test func missingHeaderGivesConfiguredDefault() throws {
        #expect(renderer.blockPage(for: casinoRequest, acceptLanguage: nil).language == "en")
        let korean = try BlockPageRenderer(settings: BlockPageSettings(organization: "학교", defaultLanguage: "KO"))
        #expect(korean.blockPage(for: casinoRequest, acceptLanguage: nil).language == "ko")
        #expect(korean.blockPage(for: casinoRequest, acceptLanguage: "fr").language == "ko")
        #expect(korean.errorPage(status: 404, acceptLanguage: nil).text.contains("<h1>이 주소에는 페이지가 없습니다.</h1>"))
    }

    @Test func unknownDefaultLanguageIsRefused() {
        #expect {
            try BlockPageRenderer(settings: BlockPageSettings(organization: "x", defaultLanguage: "fr"))
        } throws: { ($0 as? BlockPageError)?.code == "settings.language" }
    }

    @Test func languagesAreSorted() {
        #expect(renderer.languages == ["en", "ko"])
    }

    @Test func everyResponseCarriesTheSecurityHeaders() {
        let responses = [
            renderer.blockPage(for: casinoRequest, acceptLanguage: "ko"),
            renderer.requestReceivedPage(id: "42", request: casinoRequest, acceptLanguage: nil),
            renderer.errorPage(status: 405, acceptLanguage: "en"),
        ]
        for response in responses {
            #expect(response.header(named: "content-type") == "text/html; charset=utf-8")
            #expect(response.header(named: "Content-Language") == response.language)
            #expect(response.header(named: "Cache-Control") == "no-store")
            #expect(response.header(named: "Referrer-Policy") == "no-referrer")
            #expect(response.header(named: "X-Content-Type-Options") == "nosniff")
            #expect(response.header(named: "X-Frame-Options") == "DENY")
            #expect(
                response.header(named: "Content-Security-Policy")
                    == "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
            )
            #expect(response.headers.count == 7)
            #expect(!response.text.lowercased().contains("<script"))
            #expect(!response.text.contains("src="), "no external resources")
            #expect(!response.text.contains("<link"), "no external resources")
        }
    }

    @Test func reflectedValuesAreEscapedInTextAndAttributes() throws {
        let hostile = BlockedRequest(
            host: "<script>alert(1)</script>.example",
            url: "http://x.example/\"><script>alert('u')</script>&a=1",
            category: "<script>c</script>'\"",
            rule: "r & <b>",
            reason: "<img src=x onerror=alert(1)>",
            user: "\"><script>"
        )
        let settings = [
            BlockPageSettings(organization: "<script>org</script>"),
            BlockPageSettings(organization: "O'Brien & \"Sons\"", requestAccess: .builtIn(text: "<script>ask</script>")),
            BlockPageSettings(organization: "x", requestAccess: .link(text: "Ask <script>", urlTemplate: "https://help.example/?u={user}&h={host}")),
        ]
        for setting in settings {
            let renderer = try BlockPageRenderer(settings: setting)
            for html in [
                renderer.blockPage(for: hostile, acceptLanguage: "en").text,
                renderer.requestReceivedPage(id: "<script>1</script>", request: hostile, acceptLanguage: "ko").text,
            ] {
                #expect(!html.lowercased().contains("<script"))
                #expect(!html.contains("<img"))
                #expect(!html.contains("<b>"))
                for raw in [hostile.host, hostile.url, hostile.category!, hostile.reason!, "\"><script>"] {
                    #expect(!html.contains(raw))
                }
            }
        }
        let form = try BlockPageRenderer(settings: settings[1]).blockPage(for: hostile, acceptLanguage: nil).text
        #expect(form.elementText(id: "blocked-host") == "&lt;script&gt;alert(1)&lt;/script&gt;.example")
        #expect(form.elementText(id: "blocked-category") == "&lt;script&gt;c&lt;/script&gt;&#39;&quot;")
        #expect(form.elementText(id: "blocked-rule") == "r &amp; &lt;b&gt;")
        #expect(form.contains("value=\"http://x.example/&quot;&gt;&lt;script&gt;alert(&#39;u&#39;)&lt;/script&gt;&amp;a=1\""))
        #expect(form.contains("O&#39;Brien &amp; &quot;Sons&quot;"))
    }

    @Test func noRequestAccessMeansNoLinkAndNoForm() {
        let html = renderer.blockPage(for: casinoRequest, acceptLanguage: nil).text
        #expect(!html.contains("request-access"))
        #expect(!html.contains("<form"))
        #expect(!html.contains("<a "))
        #expect(renderer.requestAccessURL(for: casinoRequest) == nil)
    }

    @Test func linkIsShownWithItsText() throws {
        let renderer = try BlockPageRenderer(
            settings: BlockPageSettings(
                organization: "Example School",
                requestAccess: .link(text: "Ask for access", urlTemplate: "https://help.example.org/unblock?url={url}&cat={category}")
            )
        )
        let html = renderer.blockPage(for: casinoRequest, acceptLanguage: nil).text
        let expectedURL = "https://help.example.org/unblock?url=http%3A%2F%2Fcasino.example%2Fplay%3Fgame%3D1&cat=gambling"
        #expect(renderer.requestAccessURL(for: casinoRequest) == expectedURL)
        #expect(html.contains("id=\"request-access\" href=\"\(expectedURL.replacingOccurrences(of: "&", with: "&amp;"))\""))
        #expect(html.elementText(id: "request-access") == "Ask for access")
        #expect(!html.contains("<form"))
    }

    @Test func builtInFormCarriesTheRequest() throws {
        let renderer = try BlockPageRenderer(
            settings: BlockPageSettings(organization: "Example School", requestAccess: .builtIn(text: "Ask for access"))
        )
        let html = renderer.blockPage(for: casinoRequest, acceptLanguage: nil, formToken: "t0k-en").text
        #expect(html.contains("<form method=\"post\" action=\"/request-access\" id=\"request-access-form\">"))
        #expect(html.contains("<input type=\"hidden\" name=\"token\" value=\"t0k-en\">"))
        #expect(html.contains("<input type=\"hidden\" name=\"host\" value=\"casino.example\">"))
        #expect(html.contains("<input type=\"hidden\" name=\"url\" value=\"http://casino.example/play?game=1\">"))
        #expect(html.contains("<input type=\"hidden\" name=\"category\" value=\"gambling\">"))
        #expect(html.contains("<textarea id=\"reason\" name=\"reason\" required minlength=\"1\" maxlength=\"500\""))
        #expect(html.contains("<button type=\"submit\">Send request</button>"))
        #expect(html.contains("<h2>Ask for access</h2>"))
        #expect(!html.contains("id=\"request-access\""))
        #expect(renderer.requestAccessURL(for: casinoRequest) == nil)

        let uncategorized = renderer.blockPage(for: BlockedRequest(host: "a.example", url: "http://a.example/"), acceptLanguage: nil).text
        #expect(!uncategorized.contains("name=\"category\""))
        #expect(!uncategorized.contains("blocked-category"))
        #expect(!uncategorized.contains("blocked-rule"))
    }

    @Test func formFromTheLongestRequestStillFitsTheBodyLimit() throws {
        let renderer = try BlockPageRenderer(settings: BlockPageSettings(organization: "x", requestAccess: .builtIn(text: "Ask")))
        let huge = BlockedRequest(
            host: String(repeating: "호", count: 2000),
            url: "http://x.example/" + String(repeating: "경", count: 5000),
            category: String(repeating: "분", count: 1000)
        )
        let html = renderer.blockPage(for: huge, acceptLanguage: nil, formToken: RequestFormTokens.random().token(user: "u", host: "h")).text
        var body: [String] = []
        for name in ["host", "url", "category", "token"] {
            let marker = "name=\"\(name)\" value=\""
            let start = try #require(html.range(of: marker)).upperBound
            let value = String(html[start...].prefix { $0 != "\"" })
            body.append(name + "=" + PercentEncoding.encode(value))
        }
        body.append("reason=" + PercentEncoding.encode(String(repeating: "이", count: 500)))
        let encoded = Array(body.joined(separator: "&").utf8)
        #expect(encoded.count <= AccessRequestForm.maximumBodyBytes)
        let form = try AccessRequestForm.parse(encoded)
        #expect(form.host.count == 85, "255 bytes of 3-byte characters")
        #expect(form.reason.count == 500)
        #expect(html.elementText(id: "blocked-url")?.hasSuffix("…") == true)
    }

    @Test func aWaitingRequestRefreshesThePageAndHidesTheForm() throws {
        let renderer = try BlockPageRenderer(settings: BlockPageSettings(organization: "x", requestAccess: .builtIn(text: "Ask")))
        var request = casinoRequest
        request.accessRequest = AccessRequestStatus(id: "0badc0de", state: .pending)
        let waiting = renderer.blockPage(for: request, acceptLanguage: nil, formToken: "t").text
        #expect(waiting.contains("<meta http-equiv=\"refresh\" content=\"2\">"))
        #expect(waiting.elementText(id: "request-pending")?.contains("waiting for a teacher") == true)
        #expect(!waiting.contains("<form"))
        #expect(!waiting.contains("<script"))

        request.accessRequest = AccessRequestStatus(id: "0badc0de", state: .approved, message: "for the project")
        let approved = renderer.blockPage(for: request, acceptLanguage: "ko").text
        #expect(approved.contains("<meta http-equiv=\"refresh\" content=\"0;url=http://casino.example/play?game=1\">"))
        #expect(approved.contains("id=\"request-open\" href=\"http://casino.example/play?game=1\""))
        #expect(approved.elementText(id: "request-message") == "for the project")
        #expect(approved.contains("요청이 승인되었습니다") && !approved.contains("<form"))

        request.accessRequest = AccessRequestStatus(id: "0badc0de", state: .denied, message: "<b>not</b> now")
        let denied = renderer.blockPage(for: request, acceptLanguage: nil, formToken: "t").text
        #expect(denied.elementText(id: "request-message") == "&lt;b&gt;not&lt;/b&gt; now")
        #expect(denied.contains("<form") && !denied.contains("http-equiv=\"refresh\""), "denied: the student may ask again")

        // An address that is not the web's is never put in the refresh.
        request.url = "javascript:alert(1)"
        request.accessRequest = AccessRequestStatus(id: "0badc0de", state: .approved)
        #expect(!renderer.blockPage(for: request, acceptLanguage: nil).text.contains("http-equiv"))
    }

    @Test func aNameNoRequestCanOpenOffersNoForm() throws {
        let renderer = try BlockPageRenderer(settings: BlockPageSettings(organization: "x", requestAccess: .builtIn(text: "Ask")))
        var request = casinoRequest
        request.offersRequest = false
        #expect(!renderer.blockPage(for: request, acceptLanguage: nil, formToken: "t").text.contains("<form"))
    }

    @Test func requestReceivedPage() {
        let response = renderer.requestReceivedPage(id: "R-17", request: casinoRequest, acceptLanguage: "ko")
        #expect(response.status == 200)
        #expect(response.text.contains("<h1>요청을 보냈습니다</h1>"))
        #expect(response.text.elementText(id: "request-id") == "R-17")
        #expect(response.text.contains("<meta http-equiv=\"refresh\" content=\"2;url=http://casino.example/play?game=1\">"))
        #expect(response.text.elementText(id: "blocked-host") == "casino.example")
    }

    @Test(arguments: [
        (400, "The request could not be understood."), (404, "There is no page here."),
        (405, "This kind of request is not allowed here."), (413, "The request was too large."),
        (500, "Something went wrong. Please try again later."),
    ])
    func errorPages(status: Int, message: String) {
        let response = renderer.errorPage(status: status, acceptLanguage: "en")
        #expect(response.status == status)
        #expect(response.text.contains("<h1>\(message)</h1>"))
        #expect(response.text.elementText(id: "error-status") == "\(status)")
    }

    @Test func errorStatusOutsideTheErrorRangeBecomes500() {
        #expect(renderer.errorPage(status: 200, acceptLanguage: nil).status == 500)
        #expect(renderer.errorPage(status: 99, acceptLanguage: nil).status == 500)
        #expect(renderer.errorPage(status: 413, acceptLanguage: "ko").text.contains("요청이 너무 큽니다."))
    }
}
