import Foundation

/// A report as a PDF file: a title, headings, paragraphs and tables of text
/// on A4 pages, numbered. The safeguarding digests and the annual review go
/// out as PDF attachments that a school files or prints; a person reads the
/// same report as HTML in the email or the console.
///
/// The file is written by hand (PDF 1.4, uncompressed), with the two
/// monospaced fonts every PDF reader carries (Courier, Courier-Bold): no
/// font is embedded, every character is 0.6 of the font's size wide, so a
/// table's columns line up by counting characters. The text is in
/// WinAnsiEncoding: Latin-1 and the common typographic marks. A character
/// outside it is written without its accents when it has a base letter in
/// the set (`ł` has none, `ő` has `o`), otherwise as `?`; the HTML version
/// carries every name exactly. The document's title in its properties is
/// UTF-16 and exact.
public struct PDFReport: Sendable {
    /// A column of a table: its title, its width in characters, and whether
    /// numbers are set flush right.
    public struct Column: Sendable, Hashable {
        public var title: String
        public var width: Int
        public var alignRight: Bool

        public init(_ title: String, width: Int, alignRight: Bool = false) {
            self.title = title
            self.width = max(1, width)
            self.alignRight = alignRight
        }
    }

    /// One line as it is laid out: which font, its size, how far in (points), and the text.
    struct Line: Sendable, Hashable {
        var bold: Bool
        var size: Double
        var indent: Double
        var text: String
        /// Space left above the line, besides the line's own height (points).
        var spaceBefore: Double = 0
    }

    /// A4, in points.
    static let pageWidth = 595.0
    static let pageHeight = 842.0
    static let margin = 50.0
    static let bodySize = 9.0
    static let tableSize = 8.0
    /// Beyond this many pages the report ends with a line saying it was cut:
    /// a report is read by a person, and the caller bounds its rows long before.
    static let maximumPages = 400

    public let title: String
    private(set) var lines: [Line] = []

    public init(title: String, subtitle: String? = nil) {
        self.title = title
        lines.append(Line(bold: true, size: 15, indent: 0, text: title))
        if let subtitle { lines.append(contentsOf: Self.wrap(subtitle, bold: false, size: Self.bodySize, indent: 0, spaceBefore: 2)) }
    }

    /// How many characters of `size` fit across the page from `indent`.
    static func columns(size: Double, indent: Double = 0) -> Int {
        Int(((pageWidth - 2 * margin - indent) / (0.6 * size)).rounded(.down))
    }

    public mutating func heading(_ text: String) {
        lines.append(contentsOf: Self.wrap(text, bold: true, size: 11, indent: 0, spaceBefore: 10))
    }

    /// A paragraph, wrapped at spaces (a word longer than a line is cut).
    public mutating func paragraph(_ text: String) {
        lines.append(contentsOf: Self.wrap(text, bold: false, size: Self.bodySize, indent: 0, spaceBefore: 3))
    }

    /// A table: a bold header, a rule, then a line per row. A cell longer
    /// than its column ends in `…`; a row with fewer cells is padded.
    public mutating func table(_ columns: [Column], rows: [[String]]) {
        let header = columns.map { Self.cell($0.title, width: $0.width, alignRight: $0.alignRight) }.joined(separator: " ")
        lines.append(Line(bold: true, size: Self.tableSize, indent: 0, text: header, spaceBefore: 4))
        lines.append(Line(bold: false, size: Self.tableSize, indent: 0, text: String(repeating: "-", count: header.count)))
        for row in rows {
            let text = columns.enumerated().map { index, column in
                Self.cell(index < row.count ? row[index] : "", width: column.width, alignRight: column.alignRight)
            }.joined(separator: " ")
            lines.append(Line(bold: false, size: Self.tableSize, indent: 0, text: text))
        }
        if rows.isEmpty { lines.append(Line(bold: false, size: Self.tableSize, indent: 0, text: "(none)")) }
    }

    static func cell(_ text: String, width: Int, alignRight: Bool) -> String {
        // One line per cell: a line break in data would otherwise start a line of its own.
        var flat = String(text.map { $0.isNewline || $0 == "\t" ? " " : $0 })
        if flat.count > width { flat = String(flat.prefix(width - 1)) + "…" }
        let padding = String(repeating: " ", count: width - flat.count)
        return alignRight ? padding + flat : flat + padding
    }

    static func wrap(_ text: String, bold: Bool, size: Double, indent: Double, spaceBefore: Double) -> [Line] {
        let width = columns(size: size, indent: indent)
        var result: [Line] = []
        for (index, paragraph) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var current = ""
            func flush() {
                result.append(Line(bold: bold, size: size, indent: indent, text: current, spaceBefore: result.isEmpty ? spaceBefore : 0))
                current = ""
            }
            for word in paragraph.split(separator: " ", omittingEmptySubsequences: true) {
                var word = Substring(word)
                while word.count > width {
                    if !current.isEmpty { flush() }
                    current = String(word.prefix(width))
                    flush()
                    word = word.dropFirst(width)
                }
                if current.isEmpty {
                    current = String(word)
                } else if current.count + 1 + word.count <= width {
                    current += " " + word
                } else {
                    flush()
                    current = String(word)
                }
            }
            if !current.isEmpty || index == 0 || paragraph.isEmpty { flush() }
        }
        return result
    }

    // MARK: Writing the file

    /// The pages: lines placed from the top margin down, a new page when the next does not fit.
    func pages() -> [[(line: Line, y: Double)]] {
        let top = Self.pageHeight - Self.margin
        let bottom = Self.margin + 14  // the footer's line sits below this
        var pages: [[(line: Line, y: Double)]] = [[]]
        var y = top
        for line in lines {
            let height = line.size * 1.3
            let needed = (pages[pages.count - 1].isEmpty ? 0 : line.spaceBefore) + height
            if y - needed < bottom, !pages[pages.count - 1].isEmpty {
                if pages.count == Self.maximumPages {
                    pages[pages.count - 1].append((Line(bold: true, size: Self.bodySize, indent: 0, text: "(the report is cut here: it is longer than \(Self.maximumPages) pages)"), bottom))
                    break
                }
                pages.append([])
                y = top
            }
            y -= (pages[pages.count - 1].isEmpty ? 0 : line.spaceBefore) + height
            pages[pages.count - 1].append((line, y))
        }
        return pages
    }

    /// The PDF file. `created` (Unix seconds, UTC) is the document's creation date.
    public func render(created: Int64) -> [UInt8] {
        let laidOut = pages()
        var file = PDFFile()
        // Objects 1 catalog, 2 page tree, 3 and 4 the fonts, 5 the information; then page and contents pairs.
        let pageObjects = (0..<laidOut.count).map { 6 + 2 * $0 }
        file.add(1, "<< /Type /Catalog /Pages 2 0 R >>")
        file.add(2, "<< /Type /Pages /Kids [\(pageObjects.map { "\($0) 0 R" }.joined(separator: " "))] /Count \(laidOut.count) >>")
        file.add(3, "<< /Type /Font /Subtype /Type1 /BaseFont /Courier /Encoding /WinAnsiEncoding >>")
        file.add(4, "<< /Type /Font /Subtype /Type1 /BaseFont /Courier-Bold /Encoding /WinAnsiEncoding >>")
        file.add(5, "<< /Title \(Self.textString(title)) /Producer (hallpass-server) /CreationDate (\(Self.date(created))) >>")
        for (index, page) in laidOut.enumerated() {
            var content = ""
            for (line, y) in page where !line.text.isEmpty {
                content += "BT /\(line.bold ? "F2" : "F1") \(Self.number(line.size)) Tf \(Self.number(Self.margin + line.indent)) \(Self.number(y)) Td \(Self.contentString(line.text)) Tj ET\n"
            }
            let footer = "\(title) - page \(index + 1) of \(laidOut.count)"
            content += "BT /F1 7 Tf \(Self.number(Self.margin)) \(Self.number(Self.margin - 10)) Td \(Self.contentString(footer)) Tj ET\n"
            let bytes = Array(content.utf8)
            file.add(pageObjects[index], "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents \(pageObjects[index] + 1) 0 R >>")
            file.add(pageObjects[index] + 1, "<< /Length \(bytes.count) >>", stream: bytes)
        }
        return file.finish(root: 1, info: 5)
    }

    static func number(_ value: Double) -> String {
        let rounded = (value * 100).rounded() / 100
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }

    /// `D:20261129093000Z`.
    static func date(_ seconds: Int64) -> String {
        let text = RecordTime.format(milliseconds: seconds * 1000)  // 2026-11-29T09:30:00.000Z
        let digits = text.prefix(19).filter(\.isNumber)
        return "D:" + digits + "Z"
    }

    /// A text string for the document's properties: UTF-16BE with its byte order mark, in hex, so any character is exact.
    static func textString(_ text: String) -> String {
        var hex = "<FEFF"
        for unit in text.utf16 { hex += String(format: "%04X", unit) }
        return hex + ">"
    }

    /// A string shown on a page: WinAnsi bytes, with `\`, `(` and `)` escaped
    /// and every byte outside printable ASCII written as an octal escape, so
    /// the file stays ASCII.
    static func contentString(_ text: String) -> String {
        var result = "("
        for byte in winAnsi(text) {
            switch byte {
            case UInt8(ascii: "\\"), UInt8(ascii: "("), UInt8(ascii: ")"):
                result += "\\" + String(UnicodeScalar(byte))
            case 0x20...0x7E:
                result += String(UnicodeScalar(byte))
            default:
                let octal = String(byte, radix: 8)
                result += "\\" + String(repeating: "0", count: 3 - octal.count) + octal
            }
        }
        return result + ")"
    }

    /// The characters of WinAnsiEncoding's 0x80-0x9F block, by their byte.
    static let windowsBlock: [UInt32: UInt8] = [
        0x20AC: 0x80, 0x201A: 0x82, 0x0192: 0x83, 0x201E: 0x84, 0x2026: 0x85, 0x2020: 0x86, 0x2021: 0x87, 0x02C6: 0x88,
        0x2030: 0x89, 0x0160: 0x8A, 0x2039: 0x8B, 0x0152: 0x8C, 0x017D: 0x8E, 0x2018: 0x91, 0x2019: 0x92, 0x201C: 0x93,
        0x201D: 0x94, 0x2022: 0x95, 0x2013: 0x96, 0x2014: 0x97, 0x02DC: 0x98, 0x2122: 0x99, 0x0161: 0x9A, 0x203A: 0x9B,
        0x0153: 0x9C, 0x017E: 0x9E, 0x0178: 0x9F,
    ]

    static func winAnsiByte(_ scalar: Unicode.Scalar) -> UInt8? {
        switch scalar.value {
        case 0x20...0x7E, 0xA0...0xFF: return UInt8(scalar.value)
        default: return windowsBlock[scalar.value]
        }
    }

    /// The text in WinAnsiEncoding: a character outside it by its base
    /// letter when its canonical decomposition starts with one in the set,
    /// else `?`; control characters are spaces.
    static func winAnsi(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        for character in text {
            let scalars = character.unicodeScalars
            if scalars.count == 1, let scalar = scalars.first {
                if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                    bytes.append(0x20)
                    continue
                }
                if let byte = winAnsiByte(scalar) {
                    bytes.append(byte)
                    continue
                }
            }
            // Composed in the set (e + combining acute is é), else its base letter.
            if let composed = String(character).precomposedStringWithCanonicalMapping.unicodeScalars.first,
                String(character).precomposedStringWithCanonicalMapping.unicodeScalars.count == 1,
                let byte = winAnsiByte(composed)
            {
                bytes.append(byte)
            } else if let base = String(character).decomposedStringWithCanonicalMapping.unicodeScalars.first,
                base.value >= 0x20, let byte = winAnsiByte(base)
            {
                bytes.append(byte)
            } else {
                bytes.append(UInt8(ascii: "?"))
            }
        }
        return bytes
    }
}

/// The objects of a PDF file and its cross-reference table.
struct PDFFile {
    // The second line's four bytes over 127 tell transfer programs the file is binary.
    private var bytes: [UInt8] = Array("%PDF-1.4\n%".utf8) + [0xE2, 0xE3, 0xCF, 0xD3, 0x0A]
    private var offsets: [Int: Int] = [:]

    mutating func add(_ number: Int, _ dictionary: String, stream: [UInt8]? = nil) {
        offsets[number] = bytes.count
        bytes += Array("\(number) 0 obj\n\(dictionary)\n".utf8)
        if let stream {
            bytes += Array("stream\n".utf8)
            bytes += stream
            bytes += Array("\nendstream\n".utf8)
        }
        bytes += Array("endobj\n".utf8)
    }

    consuming func finish(root: Int, info: Int) -> [UInt8] {
        let count = (offsets.keys.max() ?? 0) + 1
        let table = bytes.count
        // Each entry is exactly 20 bytes: ten digits, space, five digits, space, n or f, space, newline.
        var xref = "xref\n0 \(count)\n0000000000 65535 f \n"
        for number in 1..<count {
            if let offset = offsets[number] {
                let digits = String(offset)
                xref += String(repeating: "0", count: 10 - digits.count) + digits + " 00000 n \n"
            } else {
                xref += "0000000000 65535 f \n"
            }
        }
        xref += "trailer\n<< /Size \(count) /Root \(root) 0 R /Info \(info) 0 R >>\nstartxref\n\(table)\n%%EOF\n"
        bytes += Array(xref.utf8)
        return bytes
    }
}
