// The one percent-encoding (RFC 3986 section 2.1): the block page's form and `?url=`
// decode with `+` as a space, a rules source's file URL without; request-access
// links encode all but the unreserved characters.
import Testing
import VerdictCore

@Suite struct PercentEncodingTests {
    @Test func escapesOfEitherCaseAndPlusAsTheFormWants() throws {
        #expect(try PercentEncoding.decode(Array("a%20b+c%2Fd%2fe".utf8), plusIsSpace: true) == "a b c/d/e")
        #expect(try PercentEncoding.decode(Array("a%20b+c".utf8), plusIsSpace: false) == "a b+c")
        #expect(try PercentEncoding.decode(Array("%C3%A9t%C3%A9".utf8), plusIsSpace: false) == "été")
        #expect(try PercentEncoding.decode([UInt8](), plusIsSpace: true) == "")
        #expect(try PercentEncoding.decode(Array("%25".utf8)[1...], plusIsSpace: true) == "25", "a slice is read from its own start")
    }

    @Test func brokenEscapesRawBytesAndNonUTF8AreRefusedWithWhere() {
        #expect(throws: PercentEncoding.Failure.badEscape(offset: 1)) { try PercentEncoding.decode(Array("a%2".utf8), plusIsSpace: true) }
        #expect(throws: PercentEncoding.Failure.badEscape(offset: 0)) { try PercentEncoding.decode(Array("%g0".utf8), plusIsSpace: true) }
        #expect(throws: PercentEncoding.Failure.badEscape(offset: 2)) { try PercentEncoding.decode(Array("ab%".utf8), plusIsSpace: false) }
        #expect(throws: PercentEncoding.Failure.rawByte(0x20, offset: 1)) { try PercentEncoding.decode(Array("a b".utf8), plusIsSpace: true) }
        #expect(throws: PercentEncoding.Failure.rawByte(0xC3, offset: 0)) { try PercentEncoding.decode(Array("é".utf8), plusIsSpace: false) }
        #expect(throws: PercentEncoding.Failure.rawByte(0x0A, offset: 0)) { try PercentEncoding.decode([0x0A], plusIsSpace: false) }
        #expect(throws: PercentEncoding.Failure.notUTF8) { try PercentEncoding.decode(Array("%FF%FE".utf8), plusIsSpace: false) }
    }

    @Test func encodingKeepsOnlyUnreservedCharactersAndDecodesBack() throws {
        #expect(PercentEncoding.encode("a b+c/d?e=ü~_.-Z9") == "a%20b%2Bc%2Fd%3Fe%3D%C3%BC~_.-Z9")
        for text in ["", "http://casino.example/play?game=1&x=%", "수업 자료 100%", "line\nbreak"] {
            #expect(try PercentEncoding.decode(PercentEncoding.encode(text).utf8, plusIsSpace: true) == text)
            #expect(try PercentEncoding.decode(PercentEncoding.encode(text).utf8, plusIsSpace: false) == text)
        }
    }
}
