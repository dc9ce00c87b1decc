import BlockPage
import Foundation
import Testing

@Suite struct TemplateFolderTests {
    func renderer(_ folder: TemporaryFolder, requestAccess: RequestAccess? = nil) throws(BlockPageError) -> BlockPageRenderer {
        try BlockPageRenderer(settings: BlockPageSettings(organization: "Example School", requestAccess: requestAccess, templateFolder: folder.path))
    }

    /// The error `init` throws for this folder.
    func loadError(_ folder: TemporaryFolder) -> BlockPageError? {
        do {
            _ = try renderer(folder)
            return nil
        } catch {
            return error
        }
    }

    @Test func customTemplateAndStringsReplaceTheBuiltInOnes() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try folder.write(
            "block.mustache",
            """
            <!doctype html><html lang="{{lang}}"><title>{{t.title}}</title>
            <h1>{{t.heading}}</h1><p id="blocked-host">{{host}}</p>{{#category}}<p id="blocked-category">{{category}}</p>{{/category}}
            {{#link}}<a id="request-access" href="{{link.url}}">{{link.text}}</a>{{/link}}<p id="who">{{user}}</p></html>
            """
        )
        try folder.write("strings/en.strings", "# School wording\nheading = Not available at school\n")
        try folder.write("strings/ko.strings", "heading = 학교에서는 볼 수 없는 페이지입니다\n")
        try folder.write("strings/fr.strings", "heading = Cette page est bloquée\ntitle = Page bloquée\n")
        try folder.write("README.txt", "ignored")
        try folder.write("strings/notes.md", "ignored")

        let renderer = try renderer(folder, requestAccess: .link(text: "Ask", urlTemplate: "https://help.example/?h={host}"))
        #expect(renderer.languages == ["en", "fr", "ko"])

        let english = renderer.blockPage(for: casinoRequest, acceptLanguage: "en").text
        #expect(english.contains("<h1>Not available at school</h1>"))
        #expect(english.contains("<title>Page blocked</title>"), "keys the file leaves out keep their built-in value")
        #expect(english.elementText(id: "request-access") == "Ask")
        #expect(english.elementText(id: "who") == "student1")
        #expect(english.contains("href=\"https://help.example/?h=casino.example\""))
        #expect(!english.contains("blocked-rule"), "the custom template decides what is shown")

        let french = renderer.blockPage(for: casinoRequest, acceptLanguage: "fr-CA,fr;q=0.9")
        #expect(french.language == "fr")
        #expect(french.header(named: "Content-Language") == "fr")
        #expect(french.text.contains("<html lang=\"fr\"><title>Page bloquée</title>"))
        #expect(french.text.contains("<h1>Cette page est bloquée</h1>"))
        // A key French leaves out comes from (the school's) English.
        #expect(renderer.errorPage(status: 404, acceptLanguage: "fr").text.contains("<h1>There is no page here.</h1>"))

        let korean = renderer.blockPage(for: casinoRequest, acceptLanguage: "ko").text
        #expect(korean.contains("<h1>학교에서는 볼 수 없는 페이지입니다</h1>"))
        #expect(korean.contains("<title>차단된 페이지</title>"))

        // Templates the folder does not replace stay built in.
        #expect(renderer.requestReceivedPage(id: "1", request: casinoRequest, acceptLanguage: "fr").text.contains("id=\"request-id\""))
    }

    @Test func customTemplatesEscapeToo() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try folder.write("error.mustache", "<p title=\"{{message}}\">{{status}}</p>")
        try folder.write("received.mustache", "<a href=\"/x?id={{requestId}}\" title='{{host}}'>{{url}}</a>")
        try folder.write("strings/en.strings", "errorNotFound = \"quoted\" <b>&</b>\n")
        let renderer = try renderer(folder)
        #expect(renderer.errorPage(status: 404, acceptLanguage: nil).text == "<p title=\"&quot;quoted&quot; &lt;b&gt;&amp;&lt;/b&gt;\">404</p>")
        let hostile = BlockedRequest(host: "a' onmouseover='x", url: "<script>")
        #expect(
            renderer.requestReceivedPage(id: "\"><script>", request: hostile, acceptLanguage: nil).text
                == "<a href=\"/x?id=&quot;&gt;&lt;script&gt;\" title='a&#39; onmouseover=&#39;x'>&lt;script&gt;</a>"
        )
    }

    @Test func missingFolderIsRefused() {
        let settings = BlockPageSettings(organization: "x", templateFolder: "/nonexistent/hallpass-templates")
        #expect { try BlockPageRenderer(settings: settings) } throws: { error in
            guard let error = error as? BlockPageError else { return false }
            return error.code == "template.unreadable" && error.message.contains("/nonexistent/hallpass-templates")
        }
    }

    @Test func emptyFolderMeansBuiltInOnly() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let renderer = try renderer(folder)
        #expect(renderer.languages == ["en", "ko"])
        #expect(renderer.blockPage(for: casinoRequest, acceptLanguage: nil).text.contains("<h1>This page is blocked</h1>"))
    }

    @Test(arguments: [
        ("block.mustache", "<p>\n{{#category}}\n<b>{{category}}</b>\n", 4, "template.syntax"),
        ("block.mustache", "<p>\n<b>{{#category}}x{{/rule}}</b>", 2, "template.syntax"),
        ("received.mustache", "<p>{{host</p>\n", 1, "template.syntax"),
        ("error.mustache", "ok\n<p>{{{message}}}</p>", 2, "template.unsafe-tag"),
        ("block.mustache", "\n\n<a href=\"{{& link.url}}\">", 3, "template.unsafe-tag"),
        ("block.mustache", "{{=<% %>=}}<%&host%>", 1, "template.unsafe-tag"),
        ("block.mustache", "{{%CONTENT_TYPE: TEXT}}{{host}}", 1, "template.unsafe-tag"),
        ("block.mustache", "x\n{{> header}}", 2, "template.unsafe-tag"),
        ("strings/en.strings", "heading = ok\nheadline = Blocked\n", 2, "strings.unknown-key"),
        ("strings/ko.strings", "# 한국어\nheading 차단\n", 2, "strings.syntax"),
        ("strings/de.strings", "title = a\ntitle = b\n", 2, "strings.duplicate-key"),
    ])
    func brokenFilesNameTheFileAndLine(file: String, text: String, line: Int, code: String) throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try folder.write(file, text)
        let error = try #require(loadError(folder))
        #expect(error.code == code)
        #expect(error.file == folder.path + "/" + file)
        #expect(error.line == line)
        #expect(error.message.hasPrefix("\(folder.path)/\(file), line \(line)"))
    }

    @Test func syntaxErrorsSayWhatIsWrong() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try folder.write("block.mustache", "<p>\n{{#category}}\n<b>{{category}}</b>\n")
        let error = try #require(loadError(folder))
        #expect(error.message.contains("is never closed"))
    }

    @Test(arguments: [
        ("blocked.mustache", "x", "template.unknown-file"),
        ("strings/korean.strings", "heading = x", "strings.language"),
        ("strings/fr.strings", "direction = sideways", "strings.value"),
    ])
    func wrongFilesAreRefused(file: String, text: String, code: String) throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try folder.write(file, text)
        let error = try #require(loadError(folder))
        #expect(error.code == code)
        #expect(error.message.contains(folder.path + "/" + file))
    }

    @Test func twoFilesForOneLanguageAreRefused() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try folder.write("strings/pt-BR.strings", "heading = a")
        try folder.write("strings/pt-br.strings", "heading = b")
        #expect(loadError(folder)?.code == "strings.language")
    }

    @Test func filesMustBeUTF8AndSmall() throws {
        let invalid = try TemporaryFolder()
        defer { invalid.remove() }
        try invalid.write("strings/en.strings", "")
        try invalid.writeBytes("strings/en.strings", Array("heading = caf".utf8) + [0xE9])
        #expect(loadError(invalid)?.code == "strings.unreadable")

        let large = try TemporaryFolder()
        defer { large.remove() }
        try large.write("block.mustache", String(repeating: "a", count: 256 * 1024 + 1))
        #expect(loadError(large)?.code == "template.too-large")
    }

    @Test func linkedFilesAreReadAndFoldersAreNot() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try folder.write("shared/page.mustache", "<h1>{{t.heading}}</h1>")
        try FileManager.default.createSymbolicLink(atPath: folder.path + "/block.mustache", withDestinationPath: folder.path + "/shared/page.mustache")
        #expect(try renderer(folder).blockPage(for: casinoRequest, acceptLanguage: nil).text == "<h1>This page is blocked</h1>")

        try FileManager.default.createDirectory(atPath: folder.path + "/error.mustache", withIntermediateDirectories: true)
        #expect(loadError(folder)?.code == "template.unreadable")
    }

    @Test func rightToLeftLanguage() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try folder.write("strings/ar.strings", "direction = rtl\nheading = هذه الصفحة محظورة\n")
        let page = try renderer(folder).blockPage(for: casinoRequest, acceptLanguage: "ar-SA").text
        #expect(page.contains("<html lang=\"ar\" dir=\"rtl\">"))
        #expect(page.contains("<h1>هذه الصفحة محظورة</h1>"))
    }
}
