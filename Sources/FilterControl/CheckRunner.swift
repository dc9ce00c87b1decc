import HallpassSystem
public import VerdictCore
import SharedStore
public import SystemPackage

/// `filterctl check`: one line per target, as text or JSON lines.
///
/// Text: `ACTION<TAB>TARGET<TAB>REASON`, where ACTION is allow, block or ask
/// (or `error` for a target that cannot be read). JSON: one object per line
/// with `target`, `action`, `category`, `rule`, `reason` (and `error`).
public struct CheckRunner<Rules: RuleSource> {
    public enum Format: Sendable { case text, json }

    public let engine: VerdictEngine<Rules>
    public let format: Format
    /// Targets that could not be read so far.
    public private(set) var invalidTargets = 0

    public init(engine: VerdictEngine<Rules>, format: Format) {
        self.engine = engine
        self.format = format
    }

    /// The decision for one target, or why it cannot be checked.
    public func check(_ target: ArraySlice<UInt8>) -> Result<Decision, CheckTarget.ParseError> {
        do {
            let parsed = try CheckTarget(utf8: target)
            return .success(engine.decide(parsed.facts))
        } catch {
            return .failure(error)
        }
    }

    /// Appends the output line for `target` to `output`.
    public mutating func appendLine(for target: Substring, to output: inout [UInt8]) {
        appendLine(for: Array(target.utf8)[...], to: &output)
    }

    /// Appends the output line for `target` (UTF-8 bytes) to `output`.
    public mutating func appendLine(for target: ArraySlice<UInt8>, to output: inout [UInt8]) {
        switch check(target) {
        case .success(let decision):
            switch format {
            case .text:
                output.append(contentsOf: decision.verdict.actionWord.utf8)
                output.append(UInt8(ascii: "\t"))
                output.append(contentsOf: target)
                output.append(UInt8(ascii: "\t"))
                decision.reason.appendDescription(to: &output)
            case .json:
                output.append(contentsOf: #"{"target":"#.utf8)
                JSONText.appendString(target, to: &output)
                output.append(contentsOf: #","action":""#.utf8)
                output.append(contentsOf: decision.verdict.actionWord.utf8)
                output.append(contentsOf: #"","category":"#.utf8)
                JSONText.appendOptional(decision.reason.category, to: &output)
                output.append(contentsOf: #","rule":"#.utf8)
                JSONText.appendOptional(decision.reason.rule, to: &output)
                output.append(contentsOf: #","source":""#.utf8)
                output.append(contentsOf: decision.reason.source.rawValue.utf8)
                output.append(contentsOf: #"","reason":"#.utf8)
                var reason: [UInt8] = []
                decision.reason.appendDescription(to: &reason)
                JSONText.appendString(reason, to: &output)
                output.append(UInt8(ascii: "}"))
            }
        case .failure(let error):
            invalidTargets += 1
            switch format {
            case .text:
                output.append(contentsOf: "error\t".utf8)
                output.append(contentsOf: target)
                output.append(UInt8(ascii: "\t"))
                output.append(contentsOf: error.description.utf8)
            case .json:
                output.append(contentsOf: #"{"target":"#.utf8)
                JSONText.appendString(target, to: &output)
                output.append(contentsOf: #","action":"error","category":null,"rule":null,"error":"#.utf8)
                JSONText.appendString(error.description.utf8, to: &output)
                output.append(UInt8(ascii: "}"))
            }
        }
        output.append(UInt8(ascii: "\n"))
    }

    /// Batch mode: reads targets from `input` (one per line) until end of
    /// file and writes results to `output`, flushing as it goes so a pipe
    /// sees answers line by line as they come.
    public mutating func run(input: FileDescriptor, output: FileDescriptor) throws(CheckIOError) {
        var pending: [UInt8] = []
        var out: [UInt8] = []
        out.reserveCapacity(1 << 16)
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count: Int
            do {
                count = try input.readSome(into: &buffer)
            } catch {
                throw CheckIOError(message: "reading targets: \(error)")
            }
            if count == 0 { break }
            pending.append(contentsOf: buffer[0..<count])
            var lineStart = 0
            while let newline = pending[lineStart...].firstIndex(of: UInt8(ascii: "\n")) {
                processLine(pending[lineStart..<newline], into: &out)
                lineStart = newline + 1
                if out.count >= 1 << 16 { try flush(&out, to: output) }
            }
            pending.removeSubrange(0..<lineStart)
            try flush(&out, to: output)
        }
        if !pending.isEmpty { processLine(pending[...], into: &out) }
        try flush(&out, to: output)
    }

    private mutating func processLine(_ bytes: ArraySlice<UInt8>, into out: inout [UInt8]) {
        var line = bytes
        while let last = line.last, last == UInt8(ascii: "\r") || last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") {
            line = line.dropLast()
        }
        while let first = line.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { line = line.dropFirst() }
        if line.isEmpty || line.first == UInt8(ascii: "#") { return }
        appendLine(for: line, to: &out)
    }

    private func flush(_ out: inout [UInt8], to descriptor: FileDescriptor) throws(CheckIOError) {
        do {
            try descriptor.write(contentsOf: out)
        } catch {
            throw CheckIOError(message: "writing results: \(error)")
        }
        out.removeAll(keepingCapacity: true)
    }
}

public struct CheckIOError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

/// Minimal JSON string encoding for line output (RFC 8259 section 7).
public enum JSONText {
    public static func appendString(_ text: some StringProtocol, to output: inout [UInt8]) {
        appendString(text.utf8, to: &output)
    }

    /// Appends UTF-8 bytes as a JSON string. Invalid UTF-8 is replaced, so the output is always valid JSON.
    public static func appendString(_ bytes: some Collection<UInt8>, to output: inout [UInt8]) {
        if bytes.allSatisfy({ $0 < 0x80 }) {
            appendValidUTF8(bytes, to: &output)
        } else {
            appendValidUTF8(Array(String(decoding: Array(bytes), as: UTF8.self).utf8), to: &output)
        }
    }

    private static func appendValidUTF8(_ bytes: some Collection<UInt8>, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): output.append(contentsOf: #"\\"#.utf8)
            case 0x0A: output.append(contentsOf: #"\n"#.utf8)
            case 0x0D: output.append(contentsOf: #"\r"#.utf8)
            case 0x09: output.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                output.append(contentsOf: #"\u00"#.utf8)
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0xF)])
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    public static func appendOptional(_ text: String?, to output: inout [UInt8]) {
        if let text { appendString(text, to: &output) } else { output.append(contentsOf: "null".utf8) }
    }
}
