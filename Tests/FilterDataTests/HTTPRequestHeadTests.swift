import Testing
@testable import FilterData
import HallpassWire
import HallpassIPC

@Suite struct HTTPRequestHeadTests {
    func request(_ text: String) -> HTTPRequestHead? {
        if case .request(let head) = HTTPRequestHeadParser.parse(Array(text.utf8)) { return head }
        return nil
    }

    func isMalformed(_ text: String) -> Bool {
        if case .malformed = HTTPRequestHeadParser.parse(Array(text.utf8)) { return true }
        return false
    }

    @Test func originFormWithHost() throws {
        let head = try #require(request("GET /a/b?c=d HTTP/1.1\r\nUser-Agent: x\r\nhOsT:  WWW.Example.com:8080 \r\n\r\n"))
        #expect(head.method == .get)
        #expect(head.targetForm == .origin)
        #expect(head.host == Array("www.example.com".utf8))
        #expect(head.port == 8080)
        #expect(head.path == Array("/a/b?c=d".utf8))
    }

    @Test func absoluteFormHostWins() throws {
        let head = try #require(request("GET http://user:pw@Proxy.Example:3128/x HTTP/1.1\r\nHost: other.example\r\n\r\n"))
        #expect(head.targetForm == .absolute)
        #expect(head.host == Array("proxy.example".utf8))
        #expect(head.port == 3128)
        #expect(head.path == Array("/x".utf8))
        let bare = try #require(request("GET http://h.example HTTP/1.0\r\n\r\n"))
        #expect(bare.path == Array("/".utf8))
    }

    @Test func connectAuthorityForm() throws {
        let head = try #require(request("CONNECT apache.org:443 HTTP/1.1\r\nHost: apache.org:443\r\n\r\n"))
        #expect(head.targetForm == .authority)
        #expect(head.host == Array("apache.org".utf8))
        #expect(head.port == 443)
        #expect(head.path == nil)
    }

    @Test func ipLiterals() throws {
        let v6 = try #require(request("GET / HTTP/1.1\r\nHost: [2001:DB8::1]:80\r\n\r\n"))
        #expect(v6.host == Array("2001:db8::1".utf8))
        #expect(v6.port == 80)
        let v4 = try #require(request("GET / HTTP/1.1\r\nHost: 45.58.148.2\r\n\r\n"))
        #expect(v4.host == Array("45.58.148.2".utf8))
    }

    @Test func bareLFAndWhitespaceRuns() throws {
        let head = try #require(request("POST   /form   HTTP/1.1\nHost: lf.example\n\n"))
        #expect(head.method == .post)
        #expect(head.host == Array("lf.example".utf8))
        #expect(head.path == Array("/form".utf8))
    }

    @Test func asteriskAndNoHost() throws {
        let head = try #require(request("OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n"))
        #expect(head.targetForm == .asterisk)
        let old = try #require(request("GET / HTTP/1.0\r\n\r\n"))
        #expect(old.host == nil)
    }

    @Test func notHTTPAndNeedMoreData() {
        #expect(HTTPRequestHeadParser.parse([22, 3, 1, 0, 200, 1]) == .notHTTP)
        #expect(HTTPRequestHeadParser.parse(Array("SSH-2.0-OpenSSH".utf8)) == .notHTTP)
        #expect(HTTPRequestHeadParser.parse(Array("GETX / HTTP/1.1".utf8)) == .notHTTP)
        #expect(HTTPRequestHeadParser.parse(Array("PROP".utf8)) == .needMoreData)
        #expect(HTTPRequestHeadParser.parse([]) == .needMoreData)
        let full = Array("GET /index.html HTTP/1.1\r\nHost: split.example\r\nAccept: */*\r\n\r\n".utf8)
        for length in 0..<full.count {
            #expect(HTTPRequestHeadParser.parse(Array(full.prefix(length))) == .needMoreData, "prefix \(length)")
        }
    }

    @Test func malformedRequests() {
        #expect(isMalformed("GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"))
        #expect(isMalformed("GET / HTTP/1.1\r\nHost : a.example\r\n\r\n"))
        #expect(isMalformed("GET / HTTP/2.0\r\nHost: a.example\r\n\r\n"))
        #expect(isMalformed("GET / HTTP/1.1\r\nHost: a example\r\n\r\n"))
        #expect(isMalformed("GET foo HTTP/1.1\r\nHost: a.example\r\n\r\n"))
        #expect(isMalformed("GET / HTTP/1.1\r\nHost: a.example\r\n folded\r\n\r\n"))
        #expect(isMalformed("GET / HTTP/1.1\r\nHost: a.example:99999\r\n\r\n"))
        // Too long a head.
        let long = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 20_000)
        #expect(isMalformed(long))
    }

    @Test func randomFlipsNeverCrash() {
        let full = Array("GET http://[::1]:8080/x HTTP/1.1\r\nHost: h.example:80\r\nX: y\r\n\r\n".utf8)
        forEachMutation(of: full, rounds: 3000) { _ = HTTPRequestHeadParser.parse($0) }
    }

    @Test func realCaptures() throws {
        guard TestData.isAvailable else { return }
        let split = try NameExtractor.run(TestData.bytes("ndpi/pcap/http-lines-split.pcap"))
        #expect(split.byKind["http_request_host"] == ["toni.lan"])
        let tlsOn80 = try NameExtractor.run(TestData.bytes("ndpi/pcap/tls_port_80.pcapng"))
        #expect(tlsOn80.byKind["http_request_host"] == nil)
    }
}
