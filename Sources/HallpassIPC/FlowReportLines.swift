public import VerdictCore

/// Reports as the lines they travel in (`FlowReport`'s tab-separated
/// format, each line ended by a line feed): what filter-data writes as it
/// decides and what filter-control keeps. A line is read field by field
/// where a field is needed, so the common report (an allowed connection,
/// which filter-control only keeps) costs no String and no decoding of
/// the fields nobody reads.
///
/// Lines decoded from a message were checked whole (`init(decoding:)`);
/// lines appended by filter-data are written by `FlowReport`'s encoder.
public struct FlowReportLines: Sendable, Hashable {
    /// The lines, each ended by a line feed.
    public private(set) var bytes: [UInt8] = []
    /// Where each line starts in `bytes`.
    private var starts: [Int] = []

    /// Lines per `report` message, at most (the message's size bounds them too).
    public static let maximumPerMessage = 128

    public init() {}

    public init(_ reports: some Sequence<FlowReport>) {
        for report in reports { append(report) }
    }

    public var count: Int { starts.count }
    public var isEmpty: Bool { starts.isEmpty }

    /// The line at `index`, without its line feed.
    public func line(_ index: Int) -> ArraySlice<UInt8> {
        let end = index + 1 < starts.count ? starts[index + 1] : bytes.count
        return bytes[starts[index]..<(end - 1)]
    }

    /// The report at `index`, decoded (nil only for a line appended unchecked that is no report).
    public func report(_ index: Int) -> FlowReport? {
        FlowReport(line: line(index))
    }

    /// Every report, decoded.
    public var reports: [FlowReport] {
        (0..<count).compactMap(report)
    }

    public mutating func append(_ report: FlowReport) {
        starts.append(bytes.count)
        report.appendLine(to: &bytes)
        bytes.append(0x0A)
    }

    /// Appends a line `write` puts at the end of the bytes (without its line feed).
    public mutating func appendLine(_ write: (inout [UInt8]) -> Void) {
        starts.append(bytes.count)
        write(&bytes)
        bytes.append(0x0A)
    }

    public mutating func append(contentsOf other: FlowReportLines) {
        let base = bytes.count
        bytes.append(contentsOf: other.bytes)
        starts.append(contentsOf: other.starts.lazy.map { $0 + base })
    }

    public mutating func removeAll(keepingCapacity: Bool = false) {
        bytes.removeAll(keepingCapacity: keepingCapacity)
        starts.removeAll(keepingCapacity: keepingCapacity)
    }

    /// The lines from `range`, as a batch of their own.
    public func lines(_ range: Range<Int>) -> FlowReportLines {
        guard !range.isEmpty else { return FlowReportLines() }
        var part = FlowReportLines()
        let start = starts[range.lowerBound]
        let end = range.upperBound < starts.count ? starts[range.upperBound] : bytes.count
        part.bytes = Array(bytes[start..<end])
        part.starts = starts[range].map { $0 - start }
        return part
    }

    /// The size of the lines from `range`, line feeds included.
    public func byteCount(_ range: Range<Int>) -> Int {
        guard !range.isEmpty else { return 0 }
        return (range.upperBound < starts.count ? starts[range.upperBound] : bytes.count) - starts[range.lowerBound]
    }

    /// Reads the lines of a `report` message: `message` is what follows the
    /// name, each line after a line feed (empty for no reports). Each line is
    /// checked as `FlowReport(line:)` reads it; of its fields only the
    /// reason's source becomes a String (a short one, stored inline).
    public init(decoding message: ArraySlice<UInt8>) throws(ControlMessageError) {
        var start = message.startIndex
        while start < message.endIndex {
            guard message[start] == 0x0A else { throw ControlMessageError(reason: "a report message's lines follow its name") }
            let lineStart = start + 1
            let end = message[lineStart...].firstIndex(of: 0x0A) ?? message.endIndex
            guard starts.count < FlowReportLines.maximumPerMessage else {
                throw ControlMessageError(reason: "more than \(FlowReportLines.maximumPerMessage) reports")
            }
            let line = message[lineStart..<end]
            guard FlowReport.Fields(line: line)?.isReport == true else {
                throw ControlMessageError(reason: "'\(String(decoding: line.prefix(64), as: UTF8.self))' is not a report")
            }
            starts.append(bytes.count)
            bytes.append(contentsOf: line)
            bytes.append(0x0A)
            start = end
        }
    }

    /// What filter-control reads of every report (the labels of the
    /// decisions' metrics, and whether the connection is kept), as ranges
    /// of `line(index)`'s bytes.
    public func summary(_ index: Int) -> FlowReport.Fields? {
        FlowReport.Fields(line: line(index))
    }
}

extension FlowReport {
    /// The 13 fields of a report line (14 with a search term), found without
    /// copying: where its tabs are, and the protocol and verdict read. Small
    /// (the tabs as 16-bit offsets), because it is made and passed on for
    /// every report filter-control reads: 13 ranges of Int were 208 bytes
    /// copied each time.
    public struct Fields: Sendable {
        public let line: ArraySlice<UInt8>
        /// The offsets of the tabs from the line's start.
        private var tabs: InlineArray<13, UInt16>
        /// 12, or 13 when the line ends with a search term.
        private var tabCount: UInt8

        /// Nil when the line does not have 13 or 14 tab-separated fields, or is
        /// longer than a report line can be (each of its fields is cut to 256
        /// bytes: far under 64 KiB).
        public init?(line: ArraySlice<UInt8>) {
            guard line.count <= Int(UInt16.max) else { return nil }
            self.line = line
            tabs = InlineArray(repeating: 0)
            var count = 0
            // The tabs are found on the line's span (no index checks against the slice, no retains).
            let span = line.span
            for offset in span.indices where span[offset] == 0x09 {
                guard count < 13 else { return nil }
                tabs[count] = UInt16(offset)
                count += 1
            }
            guard count == 12 || count == 13 else { return nil }
            tabCount = UInt8(count)
        }

        /// Whether the line has the 14th field, the search term.
        public var hasSearchTerm: Bool { tabCount == 13 }

        /// Field `number` (0: protocol ... 12: path, 13: the search term when `hasSearchTerm`).
        public subscript(number: Int) -> ArraySlice<UInt8> {
            let base = line.startIndex
            let start = number == 0 ? base : base + Int(tabs[number - 1]) + 1
            let end = number == Int(tabCount) ? line.endIndex : base + Int(tabs[number])
            return line[start..<end]
        }

        public var protocolNumber: UInt8? { parseDecimal(self[0], as: UInt8.self) }
        public var kind: ArraySlice<UInt8> { self[6] }
        public var category: ArraySlice<UInt8> { self[10] }
        /// The verdict, from its raw value.
        public var verdict: Verdict? { FlowReport.Fields.word(self[8], in: FlowReport.Fields.verdicts) }

        /// The reason's source, from its raw value.
        public var reasonSource: Reason.Source? { FlowReport.Fields.word(self[9], in: FlowReport.Fields.reasonSources) }

        /// The raw values of a field's words as bytes, made once: compared
        /// as arrays, not through String's UTF-8 view for every line.
        static let verdicts = Verdict.allCases.map { (Array($0.rawValue.utf8), $0) }
        static let reasonSources = Reason.Source.allCases.map { (Array($0.rawValue.utf8), $0) }

        static func word<Word>(_ field: ArraySlice<UInt8>, in words: [([UInt8], Word)]) -> Word? {
            words.first { $0.0.count == field.count && $0.0[...] == field }?.1
        }

        /// Whether every field reads as `FlowReport(line:)` needs it to.
        var isReport: Bool {
            guard protocolNumber != nil, IPAddress(utf8: self[1]) != nil, parseDecimal(self[2], as: UInt16.self) != nil,
                IPAddress(utf8: self[3]) != nil, parseDecimal(self[4], as: UInt16.self) != nil, verdict != nil,
                reasonSource != nil
            else { return false }
            return isNone(5) || parseDecimal(self[5], as: UInt32.self) != nil
        }

        /// Whether field `number` is '-' (none).
        func isNone(_ number: Int) -> Bool { self[number].count == 1 && self[number].first == UInt8(ascii: "-") }
    }
}
