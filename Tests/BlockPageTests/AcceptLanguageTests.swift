@testable import BlockPage
import Testing

@Suite struct AcceptLanguageTests {
    let available = ["de-CH", "en", "ko", "pt-BR", "zh-TW"]

    func choose(_ header: String?) -> String {
        AcceptLanguage.choose(header, from: available, default: "en")
    }

    @Test func highestQualityWins() {
        #expect(choose("ko-KR,ko;q=0.9,en;q=0.8") == "ko")
        #expect(choose("en;q=0.5, ko;q=0.6") == "ko")
        #expect(choose("en;q=0.500, ko;q=0.501") == "ko")
        #expect(choose("ko;q=1.000, en") == "ko", "equal qualities keep the header's order")
    }

    @Test func regionFallsBackToTheLanguage() {
        #expect(choose("ko-KR") == "ko")
        #expect(choose("ko-Kore-KR") == "ko")
        #expect(choose("pt-BR") == "pt-BR")
        #expect(choose("PT-br") == "pt-BR", "tags compare without case; the available spelling is returned")
        #expect(choose("pt-PT, ko;q=0.1") == "ko", "a different region is not the same language tag")
        #expect(choose("zh") == "zh-TW", "a bare language finds a regional one")
        #expect(choose("de") == "de-CH")
    }

    @Test func wildcardAndRefusals() {
        #expect(choose("*") == "en")
        #expect(choose("fr, *;q=0.5") == "en")
        #expect(choose("en;q=0, *") == "de-CH", "* skips a refused default")
        #expect(choose("ko;q=0, ko-KR") == "en", "q=0 refuses a language for every range")
        #expect(choose("en;q=0, ko;q=0") == "en", "nothing acceptable: the default")
    }

    @Test func unknownOrMissingGivesTheDefault() {
        #expect(choose(nil) == "en")
        #expect(choose("") == "en")
        #expect(choose("fr-FR, fr;q=0.9") == "en")
        #expect(AcceptLanguage.choose("fr", from: available, default: "ko") == "ko")
    }

    @Test(arguments: [
        ("ko;q=2, en", "en"), ("ko;q=-1", "en"), ("ko;q=0.1234", "en"), ("ko;q=", "en"), ("ko;q", "en"), ("ko;q=1.5", "en"),
        ("ko;q=0.5;q=0.9", "en"), ("k_o, ko-", "en"), ("toolonglanguage, ko", "ko"), ("ko KR", "en"), ("ko-123456789", "en"),
        (",,,;;;===", "en"), ("한국어, ko", "ko"), ("ko;level=1", "ko"), ("  ko  ;  q = 0.7 , en;q=0.6", "ko"), ("ko\u{0}", "en"),
    ])
    func malformedEntriesAreSkipped(header: String, expected: String) {
        #expect(choose(header) == expected)
    }

    @Test func onlyTheFirst32EntriesCount() {
        let filler = Array(repeating: "fr", count: 31)
        #expect(choose((filler + ["ko"]).joined(separator: ",")) == "ko")
        #expect(choose((filler + ["fr", "ko"]).joined(separator: ",")) == "en")
        #expect(AcceptLanguage.parse((filler + ["fr", "ko"]).joined(separator: ",")).count == 32)
    }

    @Test func onlyTheFirst4096BytesCount() {
        let padding = String(repeating: " ", count: 4093)  // "fr," + padding fills the 4096 bytes
        #expect(choose("fr," + padding + "ko") == "en")
        #expect(choose("fr," + String(repeating: " ", count: 4000) + "ko") == "ko")
        // A header of a million entries is read no further than its limits.
        let huge = String(repeating: "xx-yy;q=0.1,", count: 1_000_000) + "ko"
        #expect(AcceptLanguage.parse(huge).count == 32)
        #expect(choose(huge) == "en")
    }
}
