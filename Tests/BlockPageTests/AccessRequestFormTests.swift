import BlockPage
import Testing

@Suite struct AccessRequestFormTests {
    func parse(_ body: String) throws(BlockPageError) -> AccessRequestForm {
        try AccessRequestForm.parse(Array(body.utf8))
    }

    func code(_ body: String) -> String? {
        do {
            _ = try parse(body)
            return nil
        } catch {
            return error.code
        }
    }

    @Test func browserFormIsDecoded() throws {
        let form = try parse("host=casino.example&url=http%3A%2F%2Fcasino.example%2Fplay%3Fgame%3D1&category=gambling&reason=%EC%88%98%EC%97%85+%EC%9E%90%EB%A3%8C+100%25")
        #expect(form == AccessRequestForm(host: "casino.example", url: "http://casino.example/play?game=1", category: "gambling", reason: "수업 자료 100%"))
    }

    @Test func optionalFieldsAndUnknownFields() throws {
        let form = try parse("reason=&host=a.example&submit=Send&category=")
        #expect(form == AccessRequestForm(host: "a.example", url: "", category: nil, reason: ""))
        #expect(try parse("host=a.example&&x&").host == "a.example")
    }

    @Test func reasonIsTrimmedNormalizedAndCapped() throws {
        #expect(try parse("host=h&reason=++%0D%0Aline+one%0D%0Aline%09two%0Dthree%0A+").reason == "line one\nline\ttwo\nthree")
        let long = String(repeating: "가", count: 600)
        let encoded = String(repeating: "%EA%B0%80", count: 600)
        #expect(encoded.utf8.count <= AccessRequestForm.maximumBodyBytes)
        let form = try parse("host=h&reason=" + encoded)
        #expect(form.reason == String(long.prefix(500)))
        #expect(try parse("host=h&reason=" + String(repeating: "a", count: 499) + "++b").reason == String(repeating: "a", count: 499))
    }

    @Test func bodyOverTheLimitIsRefused() throws {
        let exactly = "host=h&reason=" + String(repeating: "a", count: AccessRequestForm.maximumBodyBytes - 14)
        #expect(exactly.utf8.count == 8192)
        #expect(try parse(exactly).reason.count == 500)
        #expect(code(exactly + "a") == "form.too-large")
        // Any collection of bytes, read no further than the limit.
        let endless = repeatElement(UInt8(ascii: "a"), count: Int.max / 2)
        #expect { try AccessRequestForm.parse(endless) } throws: { ($0 as? BlockPageError)?.code == "form.too-large" }
    }

    @Test(arguments: [
        "host=h&reason=%", "host=h&reason=%4", "host=h&reason=%G1", "host=h&reason=%%41", "host=%zz", "host=h&url=%C3%28",
        "host=h&reason=%FF", "host=h&reason=%ED%A0%80", "host=h&reason=a b", "host=h&reason=\u{E9}", "host=h&reason=a%00b",
        "host=h&reason=%1B%5B31m", "host=h%0A&url=u", "host=h&url=u%0D%0Ax", "host=h&category=a%7Fb", "host=a&host=b",
        "host=h&reason=a&reason=b", "host=" + String(repeating: "a", count: 256),
    ])
    func malformedBodiesAreRefused(body: String) {
        #expect(code(body) == "form.malformed")
    }

    @Test(arguments: ["", "url=u&reason=r", "host=", "host=+++", "HOST=h", "&&&"])
    func missingHostIsRefused(body: String) {
        #expect(code(body) == "form.missing-field")
    }
}
