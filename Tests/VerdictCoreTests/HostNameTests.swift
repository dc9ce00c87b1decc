import Testing
@testable import VerdictCore

@Suite struct HostNameTests {
    @Test(arguments: [
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),
        ("example.com...", "example.com"),
        ("_dmarc.Example.org", "_dmarc.example.org"),
        ("bücher.de", "xn--bcher-kva.de"),
        ("BÜCHER.de", "xn--bcher-kva.de"),
        ("münchen.de", "xn--mnchen-3ya.de"),
        ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
        ("例え。テスト", "xn--r8jz45g.xn--zckzah"),
        ("xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("пример.рф", "xn--e1afmkfd.xn--p1ai"),
    ])
    func canonicalForm(input: String, expected: String) throws {
        #expect(try HostName(input).description == expected)
    }

    @Test func wireBytesGiveTheSameFormAsText() throws {
        #expect(try HostName(bytes: Array("WWW.Bücher.DE.".utf8)) == HostName("www.bücher.de"))
    }

    /// The array fast path (kept as it is when canonical) and the general path
    /// agree on every input: same name, or the same error.
    @Test(arguments: [
        "www.example.com", "a", "a.b", "WWW.Example.com", "example.com.", "a..b", ".a", "a.", "_dmarc.x-y.org", "bücher.de",
        "xn--bcher-kva.de", "exa mple.com", "1.2.3.4", String(repeating: "a", count: 63) + ".com", String(repeating: "a", count: 64) + ".com",
        String(repeating: "a.", count: 126) + "a", String(repeating: "a.", count: 127) + "a", "", "\u{0}x.com",
    ])
    func theArrayPathAgreesWithTheGeneralOne(text: String) {
        let bytes = Array(text.utf8)
        let fast = Result { () throws(HostNameError) -> HostName in try HostName(bytes: bytes) }
        let general = Result { () throws(HostNameError) -> HostName in try HostName(bytes: bytes[...]) }
        #expect(fast == general, "\(text)")
    }

    @Test(arguments: [
        ("", HostNameError.empty),
        (".", HostNameError.empty),
        ("a..b", HostNameError.emptyLabel),
        (".example.com", HostNameError.emptyLabel),
        ("exa mple.com", HostNameError.invalidCharacter(" ")),
        ("example.com/path", HostNameError.invalidCharacter("/")),
        ("a☃.com", HostNameError.invalidCharacter("☃")),
    ])
    func refusesInvalidNames(input: String, error: HostNameError) {
        #expect(throws: error) { try HostName(input) }
    }

    @Test func enforcesDNSLengthLimits() throws {
        let label63 = String(repeating: "a", count: 63)
        #expect(try HostName(label63 + ".com").bytes.count == 67)
        #expect(throws: HostNameError.labelTooLong(label: label63 + "a")) { try HostName(label63 + "a.com") }
        let long = Array(repeating: label63, count: 4).joined(separator: ".")  // 255 bytes
        #expect(throws: HostNameError.tooLong(length: 255)) { try HostName(long) }
    }

    @Test func invalidUTF8FromTheWireIsRefused() {
        #expect(throws: HostNameError.self) { try HostName(bytes: [0x61, 0xFF, 0x2E, 0x63]) }
    }

    @Test func punycodeMatchesRFC3492Samples() {
        // RFC 3492 section 7.1, samples (A) and (L).
        let arabic = "\u{0644}\u{064A}\u{0647}\u{0645}\u{0627}\u{0628}\u{062A}\u{0643}\u{0644}\u{0645}\u{0648}\u{0634}\u{0639}\u{0631}\u{0628}\u{064A}\u{061F}"
        #expect(Punycode.encode(Array(arabic.unicodeScalars)).map { String(decoding: $0, as: UTF8.self) } == "egbpdaj6bu4bxfgehfvwxn")
        let japanese = "3\u{5E74}B\u{7D44}\u{91D1}\u{516B}\u{5148}\u{751F}"
        #expect(Punycode.encode(Array(japanese.unicodeScalars)).map { String(decoding: $0, as: UTF8.self) } == "3B-ww4c5e180e575a65lsy2b")
    }
}
