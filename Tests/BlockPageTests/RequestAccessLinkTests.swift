@testable import BlockPage
import Testing
import VerdictCore

@Suite struct RequestAccessLinkTests {
    func renderer(_ template: String, organization: String = "Example School") throws(BlockPageError) -> BlockPageRenderer {
        try BlockPageRenderer(
            settings: BlockPageSettings(organization: organization, requestAccess: .link(text: "Ask", urlTemplate: template))
        )
    }

    @Test func everyPlaceholderIsFilledAndPercentEncoded() throws {
        let renderer = try renderer(
            "https://help.example/ask?url={url}&host={host}&category={category}&user={user}&org={org}",
            organization: "Ōtsu High & Co/"
        )
        let request = BlockedRequest(
            host: "bücher.example",
            url: "http://a.example/p a?x=1&y=ü#f",
            category: "games/online",
            user: "kim minsu"
        )
        #expect(
            renderer.requestAccessURL(for: request)
                == "https://help.example/ask?url=http%3A%2F%2Fa.example%2Fp%20a%3Fx%3D1%26y%3D%C3%BC%23f"
                + "&host=b%C3%BCcher.example&category=games%2Fonline&user=kim%20minsu&org=%C5%8Ctsu%20High%20%26%20Co%2F"
        )
    }

    @Test func unreservedCharactersStayAsTheyAre() {
        let unreserved = "ABCXYZabcxyz0189-._~"
        #expect(PercentEncoding.encode(unreserved) == unreserved)
        #expect(PercentEncoding.encode("+!*'();:@&=$,/?#[]% \"<>") == "%2B%21%2A%27%28%29%3B%3A%40%26%3D%24%2C%2F%3F%23%5B%5D%25%20%22%3C%3E")
        #expect(PercentEncoding.encode("한") == "%ED%95%9C")
    }

    @Test func missingValuesBecomeEmpty() throws {
        let renderer = try renderer("http://help.example/?c={category}&u={user}")
        #expect(renderer.requestAccessURL(for: BlockedRequest(host: "h", url: "u")) == "http://help.example/?c=&u=")
    }

    @Test(arguments: [
        "javascript:alert(1)//{url}", "JAVASCRIPT:alert(document.cookie)", "data:text/html,<script>", "mailto:it@school.example?body={url}",
        "ftp://files.example/{host}", "{url}", "{host}://x", "http{user}://x.example/", "//help.example/{url}", "https:///path",
        "help.example/?u={url}", "http:help.example",
    ])
    func nonWebURLsAreRefused(template: String) {
        #expect { try renderer(template) } throws: { ($0 as? BlockPageError)?.code == "requestAccess.scheme" }
    }

    @Test(arguments: ["https://x.example/?a={URL}", "https://x.example/?a={name}", "https://x.example/?a={url", "https://x.example/?a=url}", "https://x.example/{}"])
    func unknownOrBrokenPlaceholdersAreRefused(template: String) {
        #expect { try renderer(template) } throws: { error in
            guard let error = error as? BlockPageError else { return false }
            return error.code == "requestAccess.placeholder" && error.message.contains("{url} {host} {category} {user} {org}")
        }
    }

    @Test(arguments: ["https://x.example/a b", " https://x.example/", "https://x.example/\n"])
    func spacesAndControlCharactersAreRefused(template: String) {
        #expect { try renderer(template) } throws: { ($0 as? BlockPageError)?.code == "requestAccess.url" }
    }

    @Test func emptyTextIsRefused() {
        let settings = [
            BlockPageSettings(organization: "x", requestAccess: .link(text: "  ", urlTemplate: "https://x.example/")),
            BlockPageSettings(organization: "x", requestAccess: .builtIn(text: "")),
        ]
        for setting in settings {
            #expect { try BlockPageRenderer(settings: setting) } throws: { ($0 as? BlockPageError)?.code == "requestAccess.text" }
        }
    }

    @Test func acceptsHTTPAndHTTPSInAnyCase() throws {
        for template in ["HTTPS://Help.Example/{url}", "http://192.0.2.1:8080/r?h={host}", "https://[2001:db8::1]/x"] {
            _ = try renderer(template)
        }
    }
}
