// hallpass-bench: the measurements behind BENCHMARKS.md (see scripts/bench-store.sh).
//
//   hallpass-bench generate --domains N --queries M --out DIR
//       DIR/domains.txt: N synthetic domains (2-4 labels), DIR/queries.txt:
//       M host names with 3 to 6 labels, half under a listed domain (hits), half not.
//   hallpass-bench lookup --store FILE --queries FILE
//       open time (both verification modes), per-lookup latency (median, p99)
//       of the store's suffix lookups and of a whole engine decision.
//   hallpass-bench inspect --store FILE [--kind dns|http] [--packets N]
//       filter-data's inspection per packet, without the kernel (Inspect.swift).
//   hallpass-bench update --directory DIR --source URL --trusted-key KEY [--ca-file PEM]
//       one rule update as filter-control makes it (Update.swift, scripts/bench-updates.sh).
#if canImport(Glibc)
import Glibc
#endif
import FilterData
import HallpassWire
import HallpassIPC
import HallpassSystem
import SharedStore
import VerdictCore

/// A small, fixed-seed generator so every run makes the same lists.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func nanoseconds() -> UInt64 {
    MonotonicClock.nanoseconds()
}

func fail(_ message: String) -> Never {
    StandardError.write("hallpass-bench: \(message)\n")
    exit(64)
}

/// `value` with three decimals, without Foundation.
func decimal(_ value: Double, places: Int = 3) -> String {
    var scale = 1.0
    for _ in 0..<places { scale *= 10 }
    let scaled = Int((value * scale).rounded())
    let whole = scaled / Int(scale)
    let fraction = String(scaled % Int(scale))
    return "\(whole)." + String(repeating: "0", count: places - fraction.count) + fraction
}

func option(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

func writeFile(_ path: String, _ bytes: [UInt8]) {
    do { try AtomicFile.write(bytes, to: path, mode: 0o644) } catch { fail("\(error)") }
}

func readLines(_ path: String) -> [String] {
    let bytes: [UInt8]
    do { bytes = try BoundedFile.read(path, limit: 1 << 34) } catch { fail("cannot read \(path): \(error)") }
    return bytes.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
}

let tlds = ["com", "net", "org", "de", "fr", "co.uk", "io", "info", "ru", "com.br", "nl", "xyz"]

func label(_ random: inout SplitMix64) -> String {
    let letters = Array("abcdefghijklmnopqrstuvwxyz0123456789-")
    let length = Int.random(in: 3...12, using: &random)
    var text = ""
    for position in 0..<length {
        // No leading or trailing hyphen.
        let pool = position == 0 || position == length - 1 ? 36 : 37
        text.append(letters[Int.random(in: 0..<pool, using: &random)])
    }
    return text
}

func generate(_ arguments: [String]) {
    guard let domains = option("--domains", in: arguments).flatMap(Int.init),
        let queries = option("--queries", in: arguments).flatMap(Int.init),
        let out = option("--out", in: arguments)
    else { fail("usage: generate --domains N --queries M --out DIR") }
    var random = SplitMix64(state: 20_261_122)
    var listed: [String] = []
    listed.reserveCapacity(domains)
    var list: [UInt8] = []
    // --from FILE: take the listed names from a real list instead of making them up.
    if let from = option("--from", in: arguments) {
        listed = readLines(from).filter { !$0.hasPrefix("#") && (try? HostName($0)) != nil }
    }
    for _ in 0..<(listed.isEmpty ? domains : 0) {
        var name = label(&random) + "." + tlds[Int.random(in: 0..<tlds.count, using: &random)]
        if Bool.random(using: &random) { name = label(&random) + "." + name }
        listed.append(name)
        list.append(contentsOf: name.utf8)
        list.append(UInt8(ascii: "\n"))
    }
    if !list.isEmpty { writeFile(out + "/domains.txt", list) }
    var output: [UInt8] = []
    for index in 0..<queries {
        var name: String
        if index % 2 == 0 {
            name = listed[Int.random(in: 0..<listed.count, using: &random)]
        } else {
            name = label(&random) + "." + tlds[Int.random(in: 0..<tlds.count, using: &random)]
        }
        // 3 to 6 labels in all.
        while name.split(separator: ".").count < Int.random(in: 3...6, using: &random) {
            name = label(&random) + "." + name
        }
        output.append(contentsOf: name.utf8)
        output.append(UInt8(ascii: "\n"))
    }
    writeFile(out + "/queries.txt", output)
    print("wrote \(list.isEmpty ? 0 : domains) domains and \(queries) queries (hits from \(listed.count) names) to \(out)")
}

func percentile(_ sorted: [UInt64], _ fraction: Double) -> UInt64 {
    sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
}

func lookup(_ arguments: [String]) {
    guard let path = option("--store", in: arguments), let queryPath = option("--queries", in: arguments) else {
        fail("usage: lookup --store FILE --queries FILE")
    }
    // Open times: the median of 21 opens of each kind (the file is in the page cache).
    for (label, mode) in [("open, structure only (filter-data)", RuleStore.Verification.structure), ("open, full checksum (filterctl)", .full)] {
        var times: [UInt64] = []
        for _ in 0..<21 {
            let start = nanoseconds()
            do { _ = try RuleStore(path: path, verification: mode) } catch { fail("\(error)") }
            times.append(nanoseconds() - start)
        }
        times.sort()
        let median = Double(percentile(times, 0.5)) / 1e6
        print("\(label): median \(decimal(median)) ms")
    }
    let store: RuleStore
    do { store = try RuleStore(path: path, verification: .structure) } catch { fail("\(error)") }
    let hosts = readLines(queryPath).compactMap { try? HostName($0) }
    var timerCost: [UInt64] = []
    for _ in 0..<100_000 {
        let start = nanoseconds()
        timerCost.append(nanoseconds() - start)
    }
    timerCost.sort()
    let overhead = percentile(timerCost, 0.5)
    print("timer overhead (subtracted below): \(overhead) ns")

    // 1. The store alone: fingerprints of every suffix, then one probe per suffix.
    var storeTimes: [UInt64] = []
    storeTimes.reserveCapacity(hosts.count)
    var hits = 0
    for host in hosts {
        let start = nanoseconds()
        var found = false
        // As the engine does it: every suffix's fingerprint, skip label counts no rule has,
        // prefetch the rest together, then probe.
        var wanted = InlineArray<128, UInt64>(repeating: 0)
        var count = 0
        var labels = 0
        SuffixFingerprints.forEachSuffix(host.bytes.span) { _, fingerprint in
            labels += 1
            if count < 128, store.hasDomainRules(labelCount: labels) {
                wanted[count] = fingerprint
                count += 1
            }
        }
        store.prefetchDomainRules(fingerprints: wanted.span.extracting(0..<count))
        for index in 0..<count {
            store.forEachDomainRule(fingerprint: wanted[index]) { _, _ in found = true }
        }
        let elapsed = nanoseconds() - start
        storeTimes.append(elapsed > overhead ? elapsed - overhead : 0)
        if found { hits += 1 }
    }
    storeTimes.sort()
    print(
        "store lookup (all suffixes of \(hosts.count) names, \(hits) hits): median \(percentile(storeTimes, 0.5)) ns, p99 \(percentile(storeTimes, 0.99)) ns"
    )

    // 2. A whole decision from facts with a canonical name (what filter-data does per new flow).
    let engine = VerdictEngine(rules: store, policy: Policy())
    var decideTimes: [UInt64] = []
    decideTimes.reserveCapacity(hosts.count)
    var blocked = 0
    for host in hosts {
        let facts = FlowFacts(host: host, nameSource: .tlsServerName, transport: .tcp)
        let start = nanoseconds()
        let decision = engine.decide(facts)
        let elapsed = nanoseconds() - start
        decideTimes.append(elapsed > overhead ? elapsed - overhead : 0)
        if decision.verdict == .drop { blocked += 1 }
    }
    decideTimes.sort()
    print(
        "engine decision (\(blocked) blocked): median \(percentile(decideTimes, 0.5)) ns, p99 \(percentile(decideTimes, 0.99)) ns"
    )
    let perName = Double(store.byteCount) / Double(max(1, store.domainNameCount))
    print("store: \(store.byteCount) bytes, \(store.domainNameCount) names, \(decimal(perName, places: 2)) bytes per name")
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "generate": generate(arguments)
case "lookup": lookup(arguments)
case "inspect": inspect(arguments)
case "bypass": bypass(arguments)
case "update": await update(arguments)
default: fail("usage: hallpass-bench generate|lookup|inspect|bypass|update ...")
}
