// The kernel sets that select connections for the inspection proxy
// (docs/inspection.md): the addresses of inspected names, from the DNS
// answers filter-data sees, each kept for its answer's time to live. The
// kernel rules (filter-control's KernelRules) make the sets and redirect
// TCP 443 to them to the proxy and drop UDP 443 to them; filter-data fills
// them. Both sides use the names and bounds here.
public import VerdictCore

public enum InspectionSets {
    /// The ipset of IPv4 addresses (`hash:ip family inet`).
    public static let ipv4 = "hallpass-inspect4"
    /// The ipset of IPv6 addresses (`hash:ip family inet6`).
    public static let ipv6 = "hallpass-inspect6"

    /// An address stays at least this long (seconds), whatever its answer's
    /// TTL: a browser keeps an answer about a minute however short its TTL,
    /// and connects to the address all that time.
    public static let minimumTimeout: UInt32 = 60
    /// And at most this long: a day-long TTL must not keep an address the
    /// name has left selected for a day.
    public static let maximumTimeout: UInt32 = 3600
    /// How long the address of a connection that showed an inspected name
    /// outside the redirect stays (seconds): no answer gave it a TTL; ten
    /// minutes covers a browser's retries and the connections of the page
    /// it loads, and each further connection after it expires costs one
    /// more reset.
    public static let outsideRedirectTimeout: UInt32 = 600
    /// The most addresses each set holds (the kernel refuses more: the next
    /// connection to an address it could not take goes direct, judged by name).
    public static let maximumEntries = 65_536

    /// The time an address stays in the set for an answer with `ttl`.
    public static func timeout(forTTL ttl: UInt32) -> UInt32 {
        min(max(ttl, minimumTimeout), maximumTimeout)
    }

    /// The set an address goes into.
    public static func set(for address: IPAddress) -> String { address.isIPv4 ? ipv4 : ipv6 }

    /// An ipset `add` request (nfnetlink subsystem 6, `IPSET_CMD_ADD`, protocol
    /// 7) for `address` with `timeout` seconds, as one netlink message. Without
    /// NLM_F_EXCL an address already there gets the new timeout (`-exist`);
    /// without NLM_F_ACK only a failure is answered (a netlink error message).
    public static func addRequest(_ address: IPAddress, timeout: UInt32, sequence: UInt32) -> [UInt8] {
        let nested: UInt16 = 1 << 15
        let networkOrder: UInt16 = 1 << 14
        var message = NetlinkWriter()
        message.header(type: 6 << 8 | 9, flags: 1, sequence: sequence)
        // nfgenmsg: AF_INET (what ipset(8) sends for every command), version 0, resource 0.
        message.bytes += [2, 0, 0, 0]
        message.attribute(1, [7])  // IPSET_ATTR_PROTOCOL
        message.attribute(2, Array(set(for: address).utf8) + [0])  // IPSET_ATTR_SETNAME
        let data = message.begin(nested | 7)  // IPSET_ATTR_DATA
        let ip = message.begin(nested | 1)  // IPSET_ATTR_IP
        message.attribute(networkOrder | (address.isIPv4 ? 1 : 2), address.networkBytes)  // IPSET_ATTR_IPADDR_IPV4 / _IPV6
        message.end(ip)
        message.attribute(networkOrder | 6, bigEndian(timeout))  // IPSET_ATTR_TIMEOUT
        message.end(data)
        return message.finished()
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(truncatingIfNeeded: value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
    }
}

/// A netlink message built as bytes (host byte order for the headers, as the kernel reads them).
struct NetlinkWriter {
    var bytes: [UInt8] = []

    mutating func header(type: UInt16, flags: UInt16, sequence: UInt32) {
        bytes = []
        appendHost(UInt32(0))  // length, set by `finished`
        appendHost(type)
        appendHost(flags)
        appendHost(sequence)
        appendHost(UInt32(0))  // port id: the kernel
    }

    mutating func attribute(_ type: UInt16, _ payload: [UInt8]) {
        appendHost(UInt16(4 + payload.count))
        appendHost(type)
        bytes += payload
        pad()
    }

    /// Starts a nested attribute; `end` sets its length.
    mutating func begin(_ type: UInt16) -> Int {
        let start = bytes.count
        appendHost(UInt16(0))
        appendHost(type)
        return start
    }

    mutating func end(_ start: Int) {
        setHost(UInt16(bytes.count - start), at: start)
    }

    mutating func finished() -> [UInt8] {
        setHost(UInt32(bytes.count), at: 0)
        return bytes
    }

    private mutating func pad() {
        while bytes.count % 4 != 0 { bytes.append(0) }
    }

    // Netlink headers are in the host's byte order: little-endian on every
    // machine hallpass runs on (x86-64, arm64).
    private mutating func appendHost<T: FixedWidthInteger>(_ value: T) {
        for shift in stride(from: 0, to: T.bitWidth, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> shift)) }
    }

    private mutating func setHost<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        for (index, shift) in stride(from: 0, to: T.bitWidth, by: 8).enumerated() { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> shift) }
    }
}
