// hallpass-bench inspect: the per-packet cost of filter-data's inspection,
// without the kernel: packets as the queue hands them over (IP header on),
// through the same FlowInspector and engine, timed in a loop. For profiling
// (`valgrind --tool=callgrind` counts its instructions) and for comparing
// changes to the packet path before a peerbench run.
//
//   hallpass-bench inspect --store FILE [--kind dns|http|wireguard] [--packets N] [--rounds R]
//       dns:  N queries `hK.allowed.test A` from 4 client ports (dnsperf's shape)
//       http: N new TCP flows, each one request packet with `Host: hK.allowed.test`
//       wireguard: N new UDP flows, each one WireGuard handshake initiation (a tunnel, dropped)
#if canImport(Glibc)
import Glibc
#endif
import FilterData
import HallpassWire
import HallpassIPC
import SharedStore
import VerdictCore

/// An IPv4 packet from 10.99.0.1 to 10.99.0.2 (checksums are not checked by the inspector).
func ipv4Packet(protocolNumber: UInt8, transport: [UInt8]) -> [UInt8] {
    let length = 20 + transport.count
    return [0x45, 0, UInt8(length >> 8), UInt8(length & 0xFF), 0, 0, 0x40, 0, 64, protocolNumber, 0, 0, 10, 99, 0, 1, 10, 99, 0, 2]
        + transport
}

func dnsQueryPacket(id: UInt16, sourcePort: UInt16, name: String) -> [UInt8] {
    var message: [UInt8] = [UInt8(id >> 8), UInt8(id & 0xFF), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]
    for label in name.split(separator: ".") {
        message.append(UInt8(label.utf8.count))
        message += Array(label.utf8)
    }
    message += [0, 0, 1, 0, 1]
    let length = 8 + message.count
    let udp: [UInt8] = [UInt8(sourcePort >> 8), UInt8(sourcePort & 0xFF), 0, 53, UInt8(length >> 8), UInt8(length & 0xFF), 0, 0]
    return ipv4Packet(protocolNumber: 17, transport: udp + message)
}

func httpRequestPacket(sourcePort: UInt16, host: String) -> [UInt8] {
    let request = Array("GET / HTTP/1.1\r\nHost: \(host)\r\nUser-Agent: connbench\r\nAccept: */*\r\n\r\n".utf8)
    let tcp: [UInt8] = [
        UInt8(sourcePort >> 8), UInt8(sourcePort & 0xFF), 0, 80, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0x50, 0x18, 0xFF, 0xFF, 0, 0, 0, 0,
    ]
    return ipv4Packet(protocolNumber: 6, transport: tcp + request)
}

/// A WireGuard handshake initiation (type 1, 148 bytes; the sender index and the rest made up) to port 51820.
func wireGuardPacket(sourcePort: UInt16, sender: UInt32) -> [UInt8] {
    var message: [UInt8] = [1, 0, 0, 0, UInt8(truncatingIfNeeded: sender >> 24), UInt8(truncatingIfNeeded: sender >> 16),
                            UInt8(truncatingIfNeeded: sender >> 8), UInt8(truncatingIfNeeded: sender)]
    message += (8..<148).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(sender)) }
    let length = 8 + message.count
    let udp: [UInt8] = [UInt8(sourcePort >> 8), UInt8(sourcePort & 0xFF), 0xCA, 0x6C, UInt8(length >> 8), UInt8(length & 0xFF), 0, 0]
    return ipv4Packet(protocolNumber: 17, transport: udp + message)
}

func inspect(_ arguments: [String]) {
    guard let path = option("--store", in: arguments) else { fail("usage: inspect --store FILE [--kind dns|http|wireguard] [--packets N] [--rounds R]") }
    let kind = option("--kind", in: arguments) ?? "dns"
    let count = option("--packets", in: arguments).flatMap { Int($0) } ?? 100_000
    let rounds = option("--rounds", in: arguments).flatMap { Int($0) } ?? 5
    let store: RuleStore
    do { store = try RuleStore(path: path, verification: .structure) } catch { fail("\(error)") }
    // Every category of the store blocked (the default selection), as in peerbench.
    let engine = VerdictEngine(rules: store, policy: Policy())

    let packets: [[UInt8]]
    switch kind {
    case "dns":
        packets = (0..<count).map { dnsQueryPacket(id: UInt16(truncatingIfNeeded: $0), sourcePort: UInt16(40_000 + $0 % 4), name: "h\($0 % 1000).allowed.test") }
    case "http":
        packets = (0..<count).map { httpRequestPacket(sourcePort: UInt16(truncatingIfNeeded: 1024 + $0 % 60_000), host: "h\($0 % 64).allowed.test") }
    case "wireguard":
        packets = (0..<count).map { wireGuardPacket(sourcePort: UInt16(truncatingIfNeeded: 1024 + $0 % 60_000), sender: UInt32($0 + 1)) }
    default:
        fail("--kind is dns, http or wireguard")
    }
    var times: [Double] = []
    var verdicts = [Verdict: Int]()
    for _ in 0..<rounds {
        // A new inspector per round: every HTTP packet starts a flow, as under connection churn.
        var inspector = FlowInspector(engine: engine)
        var now: UInt64 = 1_000_000_000
        let start = nanoseconds()
        for packet in packets {
            now &+= 50_000
            let inspection = inspector.inspect(packet, uid: 1000, gid: 1000, now: now)
            verdicts[inspection.verdict, default: 0] += 1
        }
        times.append(Double(nanoseconds() - start) / Double(packets.count))
    }
    times.sort()
    let summary = verdicts.map { "\($0.key.rawValue) \($0.value)" }.sorted().joined(separator: ", ")
    print("inspect \(kind): \(packets.count) packets x \(rounds) rounds, median \(decimal(times[rounds / 2], places: 1)) ns per packet (\(summary))")
}
