import Foundation
@testable import SchoolServer
import Testing

/// The reports' PDF files, read back by poppler (Debian's poppler-utils:
/// pdfinfo and pdftotext), the way a school's PDF reader would read them.
@Suite struct PDFReportTests {
    /// Runs a poppler program on the file and returns what it printed; fails the test on a non-zero exit.
    func poppler(_ program: String, _ arguments: [String], _ pdf: [UInt8]) throws -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("pdf-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("report.pdf")
        try Data(pdf).write(to: file)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/\(program)")
        process.arguments = arguments + [file.path] + (program == "pdftotext" ? ["-"] : [])
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaints = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(program): \(complaints)")
        // poppler prints "Syntax Error" or "Syntax Warning" for a damaged file and often still exits 0.
        #expect(!complaints.contains("Syntax"), "\(program) found the file damaged: \(complaints)")
        return String(decoding: printed, as: UTF8.self)
    }

    /// pdfinfo's `Key:   value` lines as a dictionary.
    func properties(_ pdf: [UInt8]) throws -> [String: String] {
        var result: [String: String] = [:]
        for line in try poppler("pdfinfo", [], pdf).split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            result[String(line[..<colon])] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return result
    }

    /// The text with every run of spaces made one, so columns compare whatever spacing the reader chose.
    func words(_ text: String) -> String {
        text.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }.joined(separator: "\n")
    }

    @Test func aReportReadsBackWithItsTitleTextAndTableAndOneNumberedPage() throws {
        var report = PDFReport(title: "Weekly safeguarding digest", subtitle: "Lakeside Middle School, 23 to 29 November 2026")
        report.heading("Flags by severity")
        report.table(
            [.init("severity", width: 10), .init("this week", width: 10, alignRight: true), .init("last week", width: 10, alignRight: true)],
            rows: [["danger", "3", "1"], ["caution", "12", "15"]])
        report.paragraph("Names in (brackets) and a back\\slash are escaped.")
        let pdf = report.render(created: 1_796_000_000)
        let info = try properties(pdf)
        #expect(info["Title"] == "Weekly safeguarding digest")
        #expect(info["Pages"] == "1")
        #expect(info["Producer"] == "hallpass-server")
        #expect(info["CreationDate"]?.contains("2026") == true)
        let text = words(try poppler("pdftotext", ["-layout"], pdf))
        #expect(text.contains("Weekly safeguarding digest"))
        #expect(text.contains("Lakeside Middle School, 23 to 29 November 2026"))
        #expect(text.contains("danger"))
        #expect(text.contains("caution 12 15"))
        #expect(text.contains("Names in (brackets) and a back\\slash are escaped."))
        #expect(text.contains("page 1 of 1"))
    }

    @Test func longReportsBreakIntoPagesAndLongWordsAndCellsAreCut() throws {
        var report = PDFReport(title: "Annual filtering review")
        report.table([.init("student", width: 12), .init("flags", width: 6, alignRight: true)], rows: (1...200).map { ["pupil\($0)", "\($0)"] })
        report.paragraph(String(repeating: "x", count: 300))
        report.table([.init("host", width: 10)], rows: [["a-very-long-host-name.example"]])
        let pdf = report.render(created: 0)
        let pages = Int(try properties(pdf)["Pages"] ?? "") ?? 0
        #expect(pages > 1, "200 rows fill more than one page")
        let text = try poppler("pdftotext", ["-layout"], pdf)
        #expect(text.contains("pupil200"))
        #expect(text.contains("page 1 of"))
        #expect(text.contains("a-very-lo…"))
        // No line is wider than the page: the 300 x's are cut into lines of the body's width.
        let widest = text.split(separator: "\n").map { $0.filter { $0 == "x" }.count }.max() ?? 0
        #expect(widest == PDFReport.columns(size: PDFReport.bodySize))
    }

    @Test func namesKeepTheirLettersWhereWinAnsiHasThemAndTheTitleIsExact() throws {
        var report = PDFReport(title: "Zoë Łukasz 山田")
        report.paragraph("Zoë Ólafsdóttir – Łukasz Dvořák 山田")
        let pdf = report.render(created: 0)
        let text = try poppler("pdftotext", [], pdf)
        // é and ó are in the set; ř has the base r; Ł has no base letter; the CJK name has none either.
        #expect(text.contains("Zoë Ólafsdóttir – ?ukasz Dvorák ??"))
        #expect(try properties(pdf)["Title"] == "Zoë Łukasz 山田")
        // Every byte of the file is ASCII except the binary marker on line 2.
        let body = pdf.dropFirst(15)
        #expect(body.allSatisfy { $0 < 0x80 })
    }

    @Test func controlCharactersInDataNeverBreakAContentString() {
        #expect(PDFReport.contentString("a)\n(b\\") == "(a\\) \\(b\\\\)")
        #expect(PDFReport.contentString("é") == "(\\351)")
        #expect(PDFReport.winAnsi("€\u{7}") == [0x80, 0x20])
    }
}
