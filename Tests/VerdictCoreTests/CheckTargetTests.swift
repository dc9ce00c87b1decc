import Testing
import VerdictCore

@Suite struct CheckTargetTests {
    @Test func hostsAndURLs() throws {
        let plain = try CheckTarget("Example.COM")
        #expect(plain.host?.description == "example.com" && plain.path == nil && plain.port == nil)

        let http = try CheckTarget("http://user:pw@www.example.com:8080/a/b?c=d#frag")
        #expect(http.host?.description == "www.example.com")
        #expect(http.port == 8080)
        #expect(http.path == "/a/b?c=d")

        let https = try CheckTarget("https://example.com/secret")
        #expect(https.port == 443)
        #expect(https.path == nil, "a filter never sees an HTTPS path")

        let query = try CheckTarget("http://example.com?x")
        #expect(query.path == "/?x")

        let bare = try CheckTarget("example.com/path")
        #expect(bare.path == "/path")

        let idn = try CheckTarget("http://bücher.de/")
        #expect(idn.host?.description == "xn--bcher-kva.de")
    }

    @Test func addresses() throws {
        #expect(try CheckTarget("192.0.2.1").address == IPAddress("192.0.2.1"))
        #expect(try CheckTarget("192.0.2.1").host == nil)
        let bracketed = try CheckTarget("https://[2001:db8::1]:8443/x")
        #expect(bracketed.address == IPAddress("2001:db8::1"))
        #expect(bracketed.port == 8443)
        #expect(try CheckTarget("2001:db8::1").address == IPAddress("2001:db8::1"))
    }

    @Test(arguments: ["", "http://", "http://exa mple.com/", "http://example.com:99999/", "[::1", "http://[zz::1]/", "example.com:http"])
    func refusesMalformed(text: String) {
        #expect(throws: CheckTarget.ParseError.self) { try CheckTarget(text) }
    }
}
