import ArgumentParser
import FilterControl
import FilterData
import Foundation
import SharedStore
import VerdictCore

// MARK: - replay

struct Replay: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run captured packets through the filter and show each flow's decision.",
        discussion: """
            Every packet of each capture (pcap or pcapng, recognised by its content) goes through
            the same flow logic as filter-data, with the capture's timestamps as the clock.
            One line per flow, in the order of its first packet:
              ACTION<TAB>PROTO<TAB>SRC<TAB>-><TAB>DST<TAB>KIND<TAB>HOST<TAB>URL
            ACTION is allow, block, ask (needs rules) or wait (the capture ended before the flow
            showed a name or reached its peek bound); KIND is tls, http, quic, dns or none; empty
            fields print '-'. SRC is the client. A DNS flow is one line with its first question
            (--json adds the number of queries). With --json, one object per line with file,
            proto, src, dst, kind, host, url, ech, action, category, rule, source, queries, packets.
            Packets inside IP-in-IP, Teredo, VXLAN and GTP-U tunnels are unwrapped first.
            Without --config every category in the rules is blocked and unknown names are allowed.
            """
    )

    @OptionGroup var rules: RulesOptions

    @Flag(name: .long, help: "Print JSON lines.")
    var json = false

    @Argument(help: "Capture files (pcap or pcapng).")
    var files: [String]

    func validate() throws {
        guard !files.isEmpty else { throw ValidationError("name at least one capture file") }
        try rules.requireOffline()
    }

    func run() throws {
        let engine = try rules.loadEngine()

        // Read every file first, so a missing one fails before any output.
        var captures: [(path: String, bytes: [UInt8])] = []
        for path in files {
            guard FileManager.default.fileExists(atPath: path) else {
                throw fail("\(path): no such file", status: ExitStatus.noInput)
            }
            // A folder lists (links followed, as for the file itself); a file does not.
            guard (try? FileManager.default.contentsOfDirectory(atPath: path)) == nil else {
                throw fail("\(path): is a folder, not a capture file", status: ExitStatus.noInput)
            }
            guard let data = FileManager.default.contents(atPath: path) else {
                throw fail("\(path): cannot read the file", status: ExitStatus.noInput)
            }
            captures.append((path, [UInt8](data)))
        }

        var badCaptures: [String] = []
        for capture in captures {
            let report: CaptureReplayReport
            do {
                report = try CaptureReplay.run(bytes: capture.bytes, engine: engine)
            } catch {
                badCaptures.append("\(capture.path): \(error)")
                continue
            }
            var out: [UInt8] = []
            out.reserveCapacity(report.flows.count * 120)
            for flow in report.flows {
                if json {
                    ReplayLine.appendJSON(flow, file: capture.path, to: &out)
                } else {
                    ReplayLine.appendText(flow, to: &out)
                }
            }
            FileHandle.standardOutput.write(Data(out))
        }
        if !badCaptures.isEmpty {
            throw fail(badCaptures.joined(separator: "\nfilterctl: "), status: ExitStatus.dataError)
        }
    }
}

/// The output lines of `filterctl replay`.
enum ReplayLine {
    /// `ip:port`, IPv6 addresses in brackets.
    static func endpoint(_ address: IPAddress, _ port: UInt16) -> String {
        address.isIPv4 ? "\(address):\(port)" : "[\(address)]:\(port)"
    }

    static func action(_ flow: ReplayedFlow) -> String {
        flow.decision.verdict.actionWord
    }

    static func appendText(_ flow: ReplayedFlow, to out: inout [UInt8]) {
        let fields = [
            action(flow), flow.transportName,
            endpoint(flow.key.source, flow.key.sourcePort), "->", endpoint(flow.key.destination, flow.key.destinationPort),
            flow.kind.rawValue, printable(flow.name) ?? "-", printable(flow.url) ?? "-",
        ]
        out.append(contentsOf: fields.joined(separator: "\t").utf8)
        out.append(UInt8(ascii: "\n"))
    }

    static func appendJSON(_ flow: ReplayedFlow, file: String, to out: inout [UInt8]) {
        func key(_ name: String, first: Bool = false) {
            out.append(contentsOf: ((first ? "{" : ",") + "\"" + name + "\":").utf8)
        }
        key("file", first: true)
        JSONText.appendString(file, to: &out)
        key("proto")
        JSONText.appendString(flow.transportName, to: &out)
        key("src")
        JSONText.appendString(endpoint(flow.key.source, flow.key.sourcePort), to: &out)
        key("dst")
        JSONText.appendString(endpoint(flow.key.destination, flow.key.destinationPort), to: &out)
        key("kind")
        JSONText.appendString(flow.kind.rawValue, to: &out)
        key("host")
        JSONText.appendOptional(flow.name, to: &out)
        key("url")
        JSONText.appendOptional(flow.url, to: &out)
        key("ech")
        out.append(contentsOf: (flow.encryptedClientHello ? "true" : "false").utf8)
        key("action")
        JSONText.appendString(action(flow), to: &out)
        key("category")
        JSONText.appendOptional(flow.decision.reason.category, to: &out)
        key("rule")
        JSONText.appendOptional(flow.decision.reason.rule, to: &out)
        key("source")
        JSONText.appendString(flow.decision.reason.source.rawValue, to: &out)
        key("queries")
        out.append(contentsOf: String(flow.queries).utf8)
        key("packets")
        out.append(contentsOf: String(flow.packets).utf8)
        out.append(contentsOf: "}\n".utf8)
    }

    /// Text output keeps one line per flow: control characters become '?'.
    static func printable(_ text: String?) -> String? {
        guard let text, !text.isEmpty else { return nil }
        return String(String.UnicodeScalarView(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "?" : $0 }))
    }
}
