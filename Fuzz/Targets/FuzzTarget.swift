// The entry points of the fuzz targets: one per parser of untrusted bytes,
// each running its input through the same public API the programs use, and
// trapping when something that must hold does not. The libFuzzer driver
// (Fuzz/Package.swift) calls them with the fuzzer's inputs; the unit test
// Tests/FuzzRegressionTests replays every crash input kept beside it through
// them, in the ordinary debug build. See docs/fuzzing.md.
import BlockPage
import FilterControl
import FilterData
import HallpassWire
import HallpassIPC
import SharedStore
import VerdictCore

public enum FuzzTarget: String, CaseIterable, Sendable {
    /// IPv4/IPv6 with TCP/UDP headers, then the whole inspector on the packet.
    case ip
    /// A TLS ClientHello in records, and as a bare handshake message.
    case tls
    /// An HTTP/1.x request head.
    case http
    /// TCP segments (sizes and order from the input) through the stream peek and
    /// the flow state machine: reassembly, then TLS, HTTP or DNS over TCP.
    case stream
    /// QUIC Initials: the input is sealed into a valid Initial (keys, AEAD,
    /// header protection), so the fuzzer reaches decryption and the CRYPTO frames;
    /// odd first bytes give the raw datagram instead (header checks).
    case quic
    /// DNS messages (UDP and TCP framing), their A/AAAA records, and the answer
    /// rewrite on a UDP packet built around the message.
    case dns
    /// pcap and pcapng files, link layers included.
    case capture
    /// Control channel messages between filter-control and filter-data.
    case control
    /// A rule store opened with its structure checked (no checksum, so mutated inputs reach the bounds checks), then looked up.
    case store
    /// Signed bundle manifests (their `file` and `delta` lines).
    case manifest
    /// A bundle delta (zstd frame with a prefix) applied to a base file.
    case delta
    /// hallpass.yaml.
    case configuration
    /// The block page: requests routed by the responder, the access request form, Accept-Language.
    case blockpage
    /// Block page strings and template files from a template folder.
    case templates
    /// The policy file filter-control writes for filter-data.
    case policy
    /// The tunnel and proxy recognizers: a TCP stream (and its prefixes) or a
    /// flow's UDP datagrams, to a server port; then the inspector on them.
    case tunnel
    /// Google QUIC client datagrams: frames sealed into a protected Initial
    /// (Q050, T050, T051), after a clear long header (Q046) or a public header
    /// (Q024-Q043), or raw; through the parser and one flow's handshake.
    case gquic
    /// The DNS rewrites against bypasses: ech out of HTTPS and SVCB records,
    /// NXDOMAIN and SafeSearch answers, over UDP and TCP framing.
    case dnsbypass
    /// An inspected HTTPS request's Host and target (and a server name)
    /// through the inspection plan: search terms, YouTube videos, the decision.
    case inspect
    /// A live state from the school's server: the envelope, or a payload signed with the target's key.
    case live

    /// Runs one input. Returns normally for any input the parsers must cope
    /// with; a trap is a finding.
    public func run(_ input: [UInt8]) {
        switch self {
        case .ip: Wire.ip(input)
        case .tls: Wire.tls(input)
        case .http: Wire.http(input)
        case .stream: Wire.stream(input)
        case .quic: QUICFuzzing.run(input)
        case .dns: Wire.dns(input)
        case .capture: Files.capture(input)
        case .control: Files.control(input)
        case .store: Files.store(input)
        case .manifest: Files.manifest(input)
        case .delta: Files.delta(input)
        case .configuration: Files.configuration(input)
        case .blockpage: BlockPageFuzzing.request(input)
        case .templates: BlockPageFuzzing.templates(input)
        case .policy: Files.policy(input)
        case .tunnel: BypassFuzzing.tunnel(input)
        case .gquic: BypassFuzzing.googleQUIC(input)
        case .dnsbypass: BypassFuzzing.dnsRewrite(input)
        case .inspect: InspectFuzzing.run(input)
        case .live: LiveFuzzing.run(input)
        }
    }
}

/// Something that must hold did not: trap, so the fuzzer keeps the input.
func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("fuzz invariant: \(message())") }
}

/// Reads the input a piece at a time (sizes, flags), then hands over the rest.
struct InputSplitter {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isAtEnd: Bool { offset >= bytes.count }

    mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func take(_ count: Int) -> [UInt8] {
        let end = min(bytes.count, offset + max(0, count))
        defer { offset = end }
        return Array(bytes[offset..<end])
    }

    mutating func rest() -> [UInt8] { take(bytes.count - offset) }
}
