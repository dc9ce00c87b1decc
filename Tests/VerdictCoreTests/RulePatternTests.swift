import Testing
import VerdictCore

@Suite struct RulePatternTests {
    @Test func writtenForms() throws {
        #expect(try RulePattern("example.com") == .domain(HostName("example.com"), .subtree))
        #expect(try RulePattern(".Example.com") == .domain(HostName("example.com"), .subtree))
        #expect(try RulePattern("=www.example.com") == .domain(HostName("www.example.com"), .exact))
        #expect(try RulePattern("*.example.com") == .domain(HostName("example.com"), .subdomainsOnly))
        #expect(try RulePattern("192.0.2.7") == .network(IPNetwork("192.0.2.7")!))
        #expect(try RulePattern("10.0.0.0/8") == .network(IPNetwork("10.0.0.0/8")!))
        #expect(try RulePattern("[2001:db8::]/32") == .network(IPNetwork("2001:db8::/32")!))
        #expect(try RulePattern("example.com/Path/x") == .urlPrefix(HostName("example.com"), path: "/path/x"))
        #expect(try RulePattern("example.com/") == .domain(HostName("example.com"), .subtree))
        #expect(try RulePattern("192.0.2.7/mp3") == .urlPrefix(HostName("192.0.2.7"), path: "/mp3"))
        #expect(try RulePattern("192.0.2.7/42", urlList: true) == .urlPrefix(HostName("192.0.2.7"), path: "/42"))
        #expect(try RulePattern("shop.example/a/type:b") == .urlPrefix(HostName("shop.example"), path: "/a/type:b"))
    }

    /// Entries are written one to a line in filter-data's policy text, where `#` starts a comment.
    /// Fails on the code before: a URL prefix's path was never checked, and these parsed.
    @Test(arguments: [
        "example.com/x\r\nunknown allow", "a.example/x\naudience person 4", "example.com/#", "example.com/a b", "example.com/a\tb",
        "example.com/a\u{7f}", "example.com/a\u{0}b", "example.com/a#b", "#example.com", "192.0.2.7/a\nb", "exa mple.com",
    ])
    func spacesControlCharactersAndHashAreRefused(text: String) {
        #expect(throws: RulePattern.ParseError.self) { try RulePattern(text) }
        #expect(throws: RulePattern.ParseError.self) { try RulePattern(text, urlList: true) }
    }

    @Test func theRefusalNamesTheEntryWithItsControlCharactersEscaped() throws {
        #expect(throws: RulePattern.ParseError.badCharacter("example.com/x\\r\\nunknown\\u{7F}allow")) {
            try RulePattern("example.com/x\r\nunknown\u{7f}allow")
        }
        // Spaces around an entry are still trimmed, and a policy's own '# comment' never reaches the parser.
        #expect(try RulePattern(" example.com/a\r\n") == .urlPrefix(HostName("example.com"), path: "/a"))
        #expect(throws: PolicyText.ParseError.self) { try PolicyText.parse("block all\nallow example.com/a\u{7f}\n") }
    }

    @Test func descriptionsRoundTrip() throws {
        for text in ["example.com", "=www.example.com", "*.example.com", "10.0.0.0/8", "2001:db8::/32", "example.com/path"] {
            #expect(try RulePattern(text).description == text)
            #expect(try RulePattern(RulePattern(text).description) == RulePattern(text))
        }
    }

    /// An IPv4 address with a trailing dot is the address (as a browser reads `http://192.0.2.7./`),
    /// so that it reads the same after it is written back without the dot.
    @Test func anIPv4AddressWithATrailingDotIsTheAddress() throws {
        #expect(try RulePattern("192.0.2.7.") == RulePattern("192.0.2.7"))
        #expect(try RulePattern("192.0.2.7./24") == RulePattern("192.0.2.7/24"))
        #expect(try RulePattern("192.0.2.7./path") == RulePattern("192.0.2.7/path"))
        for text in ["192.0.2.7.", "192.0.2.7./path"] {
            let pattern = try RulePattern(text)
            #expect(try RulePattern(pattern.description) == pattern)
        }
        #expect(try RulePattern("example.com.") == RulePattern("example.com"))
    }

    /// A leading dot is no marker at all, also before an address: `.192.0.2.7/24` is the network,
    /// not a URL prefix on a host named 192.0.2.7 that would read back as the network. An
    /// address-shaped name that would not read back as itself (`=192.0.2.7/11` is written
    /// `192.0.2.7/11`, a network of two million) is refused, never widened.
    @Test func addressShapedEntriesReadBackAsThemselvesOrAreRefused() throws {
        #expect(try RulePattern(".192.0.2.7") == RulePattern("192.0.2.7"))
        #expect(try RulePattern(".192.0.2.7/24") == RulePattern("192.0.2.7/24"))
        #expect(try RulePattern(".2001:db8::1") == RulePattern("2001:db8::1"))
        #expect(try RulePattern(".bücher.example") == RulePattern("bücher.example"))
        #expect(try RulePattern("192.0.2.7../Path") == .urlPrefix(HostName("192.0.2.7"), path: "/path"))
        #expect(try RulePattern("=192.0.2.7") == .domain(HostName("192.0.2.7"), .exact))
        for text in [".192.0.2.7", ".192.0.2.7/24", ".192.0.2.7/path", ".example.com/path", "192.0.2.7../Path", "=192.0.2.7", "*.192.0.2.7",
                     "=192.0.2.7/path"] {
            let pattern = try RulePattern(text)
            #expect(try RulePattern(pattern.description) == pattern, "\(text)")
        }
        for text in ["192.0.2.7..", "=192.0.2.7/11", "*.192.0.2.7/11", "192.0.2.7../11", ".=example.com", ".*.example.com", ".[2001:db8::1]"] {
            #expect(throws: RulePattern.ParseError.self, "\(text)") { try RulePattern(text) }
        }
    }

    @Test(arguments: ["", "   ", "1.2.3.4/33", "bad host", "host:port", "[::1", "a..b", "/", "////path", "/example.com", ".", "..example.com"])
    func refusesMalformed(text: String) {
        #expect(throws: RulePattern.ParseError.self) { try RulePattern(text) }
    }
}
