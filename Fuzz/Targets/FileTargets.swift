// Fuzz targets for what the programs read from files and sockets: captures,
// control messages, the rule store, bundle manifests, the configuration,
// the policy file, and the block page's requests, strings and templates.
import BlockPage
import BundleDelta
import FilterControl
import FilterData
import HallpassWire
import HallpassIPC
import Foundation
import SharedStore
import VerdictCore

/// A private folder for targets that must go through a file (in /dev/shm when there is one),
/// removed when the process exits (the test suite, a fuzzer that ends its runs; fuzz.sh
/// removes what an interrupted or crashed fuzzer leaves).
enum Scratch {
    static let folder: String = {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        let folder = base + "/hallpass-fuzz-\(ProcessInfo.processInfo.processIdentifier)"
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: Scratch.folder) }
        return folder
    }()

    static func write(_ bytes: [UInt8], to name: String) -> String {
        let path = folder + "/" + name
        let parent = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else {
            fatalError("cannot write the scratch file \(path)")
        }
        return path
    }
}

enum Files {
    static func capture(_ input: [UInt8]) {
        // Every record, then the whole replay through the inspector.
        if var reader = try? CaptureReader(bytes: input) {
            var records = 0
            while records < 100_000, let record = try? reader.next() {
                require(record.frame.endIndex <= input.count, "a frame past the end of the file")
                if case .ip(let packet) = record.payload { _ = try? IPPacketParser.parse(packet) }
                records += 1
            }
        }
        _ = try? CaptureReplay.run(bytes: input, engine: Engines.engine)
    }

    static func control(_ input: [UInt8]) {
        // Both directions read the same bytes: a command as filter-data would, an event as filter-control would.
        if let command = try? ControlCommand(decoding: input) {
            let encoded = command.encoded
            if encoded.count <= controlMessageMaximumSize {
                require((try? ControlCommand(decoding: encoded)) == command, "a decoded command does not survive encoding")
            }
        }
        guard let message = try? DataEvent(decoding: input) else { return }
        let encoded = message.encoded
        guard encoded.count <= controlMessageMaximumSize else { return }
        require((try? DataEvent(decoding: encoded)) == message, "a decoded event does not survive encoding")
        // Report lines are kept as they came: each one checked must read as a report, field by field too.
        if case .reports(let lines) = message {
            require(lines.reports.count == lines.count, "a checked report line does not read as a report")
            for index in 0..<lines.count { require(lines.summary(index)?.verdict != nil, "a checked report line has no verdict") }
        }
    }

    /// A store from a file with its structure checked, then lookups. filter-data
    /// opens stores with the full check; the checksum it adds would refuse
    /// nearly every mutated input before the bounds this target exercises.
    static func store(_ input: [UInt8]) {
        let path = Scratch.write(input, to: "store.hpstore")
        guard let store = try? RuleStore(path: path, verification: .structure) else { return }
        let engine = VerdictEngine(rules: store, policy: Policy())
        for (name, destination) in [("blocked.test", IPAddress.v4(0xC000_0201)), ("a.b.c.example.com", .v6(high: 0x2001_0db8_0000_0000, low: 1)),
                                    ("x", .v4(0x0A00_0001))] {
            let facts = FlowFacts(host: try? HostName(name), nameSource: .tlsServerName, path: "/path/page", destination: destination,
                                  destinationPort: 443)
            _ = engine.decide(facts)
        }
        _ = engine.decide(FlowFacts(destination: .v6(high: 0x2001_0db8_ffff_0000, low: 7), destinationPort: 80))
    }

    static func manifest(_ input: [UInt8]) {
        guard let manifest = try? BundleManifest(parsing: input) else { return }
        require((try? BundleManifest(parsing: manifest.encoded)) == manifest, "a manifest does not survive encoding")
    }

    /// A delta (a zstd frame) applied to a base: the first input byte says how
    /// long the base is (times 16), the next two the size the result must have.
    /// The machine applies only deltas whose SHA-256 the signed manifest gives,
    /// so this is libzstd's decoder and the mappings around it, on any bytes.
    static func delta(_ input: [UInt8]) {
        var split = InputSplitter(input)
        let base = split.take(Int(split.byte()) * 16)
        let size = UInt64(split.byte()) << 8 | UInt64(split.byte())
        let patch = split.rest()
        let basePath = Scratch.write(base, to: "delta/base")
        let patchPath = Scratch.write(patch, to: "delta/patch")
        let output = Scratch.folder + "/delta/out"
        try? FileManager.default.removeItem(atPath: output)
        do {
            try ZstdPatch.apply(patch: patchPath, base: basePath, output: output, size: size)
            let made = (try? FileManager.default.attributesOfItem(atPath: output)[.size] as? NSNumber)?.uint64Value
            require(made == size, "a delta made \(made ?? 0) bytes, not \(size)")
        } catch {
            require(!FileManager.default.fileExists(atPath: output), "a refused delta left its output")
        }
        try? FileManager.default.removeItem(atPath: output)
    }

    static func configuration(_ input: [UInt8]) {
        guard input.count <= 64 * 1024 else { return }
        _ = try? Configuration(yaml: String(decoding: input, as: UTF8.self))
    }

    static func policy(_ input: [UInt8]) {
        guard let policy = try? PolicyText.parse(String(decoding: input, as: UTF8.self)) else { return }
        require((try? PolicyText.parse(PolicyText.render(policy))) == policy, "a policy does not survive rendering")
    }
}

enum BlockPageFuzzing {
    struct Backend: BlockPageBackend {
        func explain(host: String, url: String, user: String?) -> BlockedRequest {
            BlockedRequest(host: host, url: url, category: "demo", rule: host, reason: "category", user: user)
        }

        func submit(_ form: AccessRequestForm, user: String?) -> Result<String, BlockPageError> {
            .success("request-1")
        }

        // The form is parsed before its token is checked, so the parser is still fuzzed whole.
        let formTokens = RequestFormTokens(secret: Array(repeating: 0, count: 32))
    }

    static let responder: BlockPageResponder = {
        do {
            let renderer = try BlockPageRenderer(settings: BlockPageSettings(organization: "Fuzz School", requestAccess: .builtIn(text: "Ask")))
            return BlockPageResponder(renderer: renderer, backend: Backend(), ownNames: ["blockpage.test", "127.0.0.1"])
        } catch {
            fatalError("the built-in block page does not load: \(error)")
        }
    }()

    /// Input: method, target, host and Accept-Language on the first four lines, then the body.
    static func request(_ input: [UInt8]) {
        var lines = input.split(separator: UInt8(ascii: "\n"), maxSplits: 4, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        while lines.count < 5 { lines.append("") }
        let body = Array(lines[4].utf8)
        let request = BlockPageRequest(method: lines[0], target: lines[1], host: lines[2].isEmpty ? nil : lines[2],
                                       acceptLanguage: lines[3], body: body, scheme: "https", user: "student")
        let response = responder.respond(to: request)
        require((100...599).contains(response.status), "status \(response.status)")
        _ = try? AccessRequestForm.parse(input)
        _ = AcceptLanguage.choose(String(decoding: input, as: UTF8.self), from: ["en", "ko", "pt-BR"], default: "en")
    }

    /// Input: which file (a template or a strings file), then its text.
    static func templates(_ input: [UInt8]) {
        var splitter = InputSplitter(input)
        let names = ["block.mustache", "received.mustache", "error.mustache", "strings/en.strings", "strings/ko.strings"]
        let name = names[Int(splitter.byte()) % names.count]
        let text = splitter.rest()
        let folder = Scratch.folder + "/templates"
        try? FileManager.default.removeItem(atPath: folder)
        _ = Scratch.write(text, to: "templates/" + name)
        guard let renderer = try? BlockPageRenderer(settings: BlockPageSettings(
            organization: "Fuzz School", requestAccess: .builtIn(text: "Ask"), templateFolder: folder))
        else { return }
        let blocked = BlockedRequest(host: "blocked.test", url: "http://blocked.test/<script>", category: "demo", user: "student")
        // Every page in the language the file changes (a template: English), once.
        let language = name == "strings/ko.strings" ? "ko" : "en"
        _ = renderer.blockPage(for: blocked, acceptLanguage: language)
        _ = renderer.requestReceivedPage(id: "1", request: blocked, acceptLanguage: language)
        _ = renderer.errorPage(status: 404, acceptLanguage: language)
    }
}
