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
        let form = try parse("reason=r&host=a.example&submit=Send&category=")
        #expect(form == AccessRequestForm(host: "a.example", url: "", category: nil, reason: "r"))
        #expect(try parse("host=a.example&&x&reason=r").host == "a.example")
        #expect(try parse("host=a.example&reason=r&token=abc-_12").token == "abc-_12")
    }

    @Test func reasonIsTrimmedAndNormalized() throws {
        #expect(try parse("host=h&reason=++%0D%0Aline+one%0D%0Aline%09two%0Dthree%0A+").reason == "line one\nline\ttwo\nthree")
        #expect(try parse("host=h&reason=" + String(repeating: "a", count: 499) + "++").reason == String(repeating: "a", count: 499))
        #expect(try parse("host=h&reason=" + String(repeating: "%EA%B0%80", count: 500)).reason == String(repeating: "가", count: 500))
    }

    // The reason is required and at most 500 characters: before, an empty one
    // was taken and a longer one was cut to 500 without a word.
    @Test(arguments: ["host=h", "host=h&reason=", "host=h&reason=+%0D%0A%09+"])
    func aMissingReasonIsRefused(body: String) {
        #expect(code(body) == "form.reason-missing")
    }

    @Test func aReasonOver500CharactersIsRefused() {
        let encoded = String(repeating: "%EA%B0%80", count: 501)
        #expect(encoded.utf8.count <= AccessRequestForm.maximumBodyBytes)
        #expect(code("host=h&reason=" + encoded) == "form.reason-too-long")
        #expect(code("host=h&reason=" + String(repeating: "a", count: 500) + "b") == "form.reason-too-long")
    }

    @Test func bodyOverTheLimitIsRefused() throws {
        let exactly = "host=h&reason=r&x=" + String(repeating: "a", count: AccessRequestForm.maximumBodyBytes - 18)
        #expect(exactly.utf8.count == 8192)
        #expect(try parse(exactly).reason == "r")
        #expect(code(exactly + "a") == "form.too-large")
        // Any collection of bytes, read no further than the limit.
        let endless = repeatElement(UInt8(ascii: "a"), count: Int.max / 2)
        #expect { try AccessRequestForm.parse(endless) } throws: { ($0 as? BlockPageError)?.code == "form.too-large" }
    }

    @Test(arguments: [
        "host=h&reason=%", "host=h&reason=%4", "host=h&reason=%G1", "host=h&reason=%%41", "host=%zz", "host=h&url=%C3%28",
        "host=h&reason=%FF", "host=h&reason=%ED%A0%80", "host=h&reason=a b", "host=h&reason=\u{E9}", "host=h&reason=a%00b",
        "host=h&reason=%1B%5B31m", "host=h%0A&url=u", "host=h&url=u%0D%0Ax", "host=h&category=a%7Fb", "host=a&host=b",
        "host=h&reason=a&reason=b", "host=" + String(repeating: "a", count: 256) + "&reason=r",
        "host=h&reason=r&token=" + String(repeating: "a", count: 129), "host=h&reason=r&token=a%20b",
    ])
    func malformedBodiesAreRefused(body: String) {
        #expect(code(body) == "form.malformed")
    }

    @Test(arguments: ["", "url=u&reason=r", "host=&reason=r", "host=+++&reason=r", "HOST=h&reason=r", "&&&"])
    func missingHostIsRefused(body: String) {
        #expect(code(body) == "form.missing-field")
    }
}
