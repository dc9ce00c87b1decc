@testable import BlockPage
import Testing

@Suite struct StringsFileTests {
    @Test func keysValuesCommentsAndBlankLines() throws {
        let text = "\u{FEFF}# comment\n\n  heading   =  Blocked # not a comment  \r\n\t# indented comment\nhelp=a = b\nerrorOther =\n"
        let entries = try StringsFile.parse(text, file: "x.strings")
        #expect(entries == [
            .init(key: "heading", value: "Blocked # not a comment", line: 3),
            .init(key: "help", value: "a = b", line: 5),
            .init(key: "errorOther", value: "", line: 6),
        ])
    }

    @Test(arguments: [
        ("heading\n", 1, "strings.syntax"), ("# c\nheading: x\n", 2, "strings.syntax"), ("= x", 1, "strings.syntax"),
        ("1heading = x", 1, "strings.syntax"), ("head ing = x", 1, "strings.syntax"), ("heading.x = y", 1, "strings.syntax"),
        ("heading = a\u{7}b", 1, "strings.syntax"), ("heading = a\n\nheading = b", 3, "strings.duplicate-key"),
    ])
    func errorsNameTheLine(text: String, line: Int, code: String) {
        #expect {
            try StringsFile.parse(text, file: "/etc/hallpass/page/strings/en.strings")
        } throws: { error in
            guard let error = error as? BlockPageError else { return false }
            return error.code == code && error.line == line && error.file == "/etc/hallpass/page/strings/en.strings"
                && error.message.hasPrefix("/etc/hallpass/page/strings/en.strings, line \(line): ")
        }
    }

    @Test func builtInLanguagesHaveEveryEnglishKey() throws {
        let english = Set(try StringsFile.parse(BuiltInStrings.english, file: "en").map(\.key))
        #expect(english.count >= 20)
        for (language, text) in BuiltInStrings.byLanguage {
            let keys = try StringsFile.parse(text, file: language).map(\.key)
            #expect(Set(keys) == english, "\(language) must translate every key")
        }
    }

    @Test(arguments: [("ko", "ko"), ("KO", "ko"), ("pt-br", "pt-BR"), ("zh-hant-tw", "zh-Hant-TW"), ("es-419", "es-419")])
    func languageTagsAreCanonical(text: String, expected: String) {
        #expect(LanguageTag.canonical(text) == expected)
    }

    @Test(arguments: ["", "k", "korean", "ko_KR", "ko-", "-ko", "ko-toolongsubtag", "한국"])
    func badLanguageTags(text: String) {
        #expect(LanguageTag.canonical(text) == nil)
    }
}
