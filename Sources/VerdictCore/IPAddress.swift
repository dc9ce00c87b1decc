/// An IPv4 or IPv6 address, stored as integers in host byte order so that
/// masking and comparison are plain integer operations.
public enum IPAddress: Hashable, Sendable {
    /// An IPv4 address; `0xC0A80001` is 192.168.0.1.
    case v4(UInt32)
    /// An IPv6 address as its high and low 64 bits.
    case v6(high: UInt64, low: UInt64)

    /// Builds an address from network-order bytes: 4 bytes make IPv4, 16 make IPv6.
    /// Returns nil for any other length.
    public init?<Bytes: Collection<UInt8>>(networkBytes bytes: Bytes) {
        switch bytes.count {
        case 4:
            var value: UInt32 = 0
            for byte in bytes { value = value << 8 | UInt32(byte) }
            self = .v4(value)
        case 16:
            var high: UInt64 = 0
            var low: UInt64 = 0
            for (index, byte) in bytes.enumerated() {
                if index < 8 { high = high << 8 | UInt64(byte) } else { low = low << 8 | UInt64(byte) }
            }
            self = .v6(high: high, low: low)
        default:
            return nil
        }
    }

    /// The same for bytes read off the wire: 4 bytes make IPv4, 16 make IPv6.
    public init?(networkBytes bytes: Span<UInt8>) {
        switch bytes.count {
        case 4:
            var value: UInt32 = 0
            for index in 0..<4 { value = value << 8 | UInt32(bytes[index]) }
            self = .v4(value)
        case 16:
            var high: UInt64 = 0
            var low: UInt64 = 0
            for index in 0..<8 {
                high = high << 8 | UInt64(bytes[index])
                low = low << 8 | UInt64(bytes[8 + index])
            }
            self = .v6(high: high, low: low)
        default:
            return nil
        }
    }

    /// The address in network byte order (4 or 16 bytes).
    public var networkBytes: [UInt8] {
        switch self {
        case .v4(let value):
            return (0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) }
        case .v6(let high, let low):
            return (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) }
                + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
        }
    }

    public var isIPv4: Bool {
        if case .v4 = self { return true }
        return false
    }

    /// Whether this is a loopback address: 127.0.0.0/8 (also written as
    /// `::ffff:127.x.y.z`) or `::1`.
    public var isLoopback: Bool {
        switch unmappingIPv4 {
        case .v4(let value): value >> 24 == 127
        case .v6(let high, let low): high == 0 && low == 1
        }
    }

    /// The number of bits in an address of this family (32 or 128).
    public var bitWidth: Int { isIPv4 ? 32 : 128 }

    /// An IPv4 address embedded as `::ffff:a.b.c.d`, unwrapped; any other address unchanged.
    public var unmappingIPv4: IPAddress {
        if case .v6(let high, let low) = self, high == 0, low >> 32 == 0xFFFF {
            return .v4(UInt32(truncatingIfNeeded: low))
        }
        return self
    }

    /// This address with every bit after the first `prefixLength` cleared.
    public func masked(toPrefixLength prefixLength: Int) -> IPAddress {
        switch self {
        case .v4(let value):
            let length = max(0, min(32, prefixLength))
            let mask: UInt32 = length == 0 ? 0 : ~UInt32(0) << (32 - length)
            return .v4(value & mask)
        case .v6(let high, let low):
            let length = max(0, min(128, prefixLength))
            let highMask: UInt64 = length >= 64 ? ~0 : (length == 0 ? 0 : ~UInt64(0) << (64 - length))
            let lowMask: UInt64 = length <= 64 ? 0 : (length == 128 ? ~0 : ~UInt64(0) << (128 - length))
            return .v6(high: high & highMask, low: low & lowMask)
        }
    }
}

// MARK: - Text form

extension IPAddress: CustomStringConvertible {
    /// Dotted quad for IPv4; RFC 5952 text for IPv6 (lower case, longest run of
    /// zero groups compressed, `::ffff:a.b.c.d` for mapped IPv4).
    public var description: String {
        switch self {
        case .v4(let value):
            return "\(value >> 24).\(value >> 16 & 0xFF).\(value >> 8 & 0xFF).\(value & 0xFF)"
        case .v6(let high, let low):
            if high == 0, low >> 32 == 0xFFFF {
                return "::ffff:" + IPAddress.v4(UInt32(truncatingIfNeeded: low)).description
            }
            let groups = (0..<8).map { index -> UInt16 in
                let word = index < 4 ? high : low
                return UInt16(truncatingIfNeeded: word >> (48 - 16 * (index % 4)))
            }
            // Longest run of at least two zero groups, first one on ties.
            var bestStart = -1
            var bestLength = 1
            var index = 0
            while index < 8 {
                if groups[index] == 0 {
                    var end = index
                    while end < 8, groups[end] == 0 { end += 1 }
                    if end - index > bestLength { bestStart = index; bestLength = end - index }
                    index = end
                } else {
                    index += 1
                }
            }
            func hex(_ range: Range<Int>) -> String {
                range.map { String(groups[$0], radix: 16) }.joined(separator: ":")
            }
            if bestStart < 0 { return hex(0..<8) }
            return hex(0..<bestStart) + "::" + hex((bestStart + bestLength)..<8)
        }
    }
}

extension IPAddress {
    /// Parses an IPv4 dotted quad (exactly four decimal parts, no leading
    /// zeros beyond a single `0`) or an IPv6 address (with `::` and an
    /// optional trailing dotted quad). Brackets and zone ids are not accepted.
    public init?(_ text: some StringProtocol) {
        let utf8 = Array(text.utf8)
        if let v4 = IPAddress.parseIPv4(utf8[...]) {
            self = .v4(v4)
        } else if let v6 = IPAddress.parseIPv6(utf8[...]) {
            self = v6
        } else {
            return nil
        }
    }

    /// Parses the text form from its UTF-8 bytes, as `init?(_:)` does, without a String.
    public init?(utf8 bytes: ArraySlice<UInt8>) {
        if let v4 = IPAddress.parseIPv4(bytes) {
            self = .v4(v4)
        } else if let v6 = IPAddress.parseIPv6(bytes) {
            self = v6
        } else {
            return nil
        }
    }

    /// Appends the text form (`description`) as UTF-8; IPv4 without building a String.
    public func appendDescription(to bytes: inout [UInt8]) {
        guard case .v4(let value) = self else {
            bytes.append(contentsOf: description.utf8)
            return
        }
        for shift in stride(from: 24, through: 0, by: -8) {
            if shift < 24 { bytes.append(UInt8(ascii: ".")) }
            appendDecimal(UInt64(value >> UInt32(shift) & 0xFF), to: &bytes)
        }
    }

    static func parseIPv4(_ bytes: ArraySlice<UInt8>) -> UInt32? {
        var value: UInt32 = 0
        var parts = 0
        var current: UInt32 = 0
        var digits = 0
        var leadingZero = false
        for byte in bytes {
            if byte == UInt8(ascii: ".") {
                guard digits > 0, parts < 3 else { return nil }
                value = value << 8 | current
                parts += 1
                current = 0
                digits = 0
                leadingZero = false
            } else if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                if digits == 1 && leadingZero { return nil }
                if digits == 0 && byte == UInt8(ascii: "0") { leadingZero = true }
                current = current * 10 + UInt32(byte - UInt8(ascii: "0"))
                digits += 1
                guard current <= 255, digits <= 3 else { return nil }
            } else {
                return nil
            }
        }
        guard parts == 3, digits > 0 else { return nil }
        return value << 8 | current
    }

    static func parseIPv6(_ bytes: ArraySlice<UInt8>) -> IPAddress? {
        guard bytes.count >= 2, bytes.count <= 45 else { return nil }
        var groups: [UInt16] = []
        var compressAt: Int? = nil
        var index = bytes.startIndex
        let end = bytes.endIndex
        if bytes[index] == UInt8(ascii: ":") {
            guard bytes[index + 1] == UInt8(ascii: ":") else { return nil }
            compressAt = 0
            index += 2
            if index == end { return .v6(high: 0, low: 0) }
        }
        while index < end {
            // A trailing dotted quad fills the last two groups.
            if let dot = bytes[index...].firstIndex(of: UInt8(ascii: ".")),
                !bytes[index..<dot].contains(UInt8(ascii: ":"))
            {
                guard let v4 = parseIPv4(bytes[index...]) else { return nil }
                groups.append(UInt16(v4 >> 16))
                groups.append(UInt16(v4 & 0xFFFF))
                index = end
                break
            }
            var value: UInt32 = 0
            var digits = 0
            while index < end, let nibble = HexDigit.value(of: bytes[index]) {
                value = value << 4 | UInt32(nibble)
                digits += 1
                index += 1
                guard digits <= 4 else { return nil }
            }
            guard digits > 0 else { return nil }
            groups.append(UInt16(value))
            if index == end { break }
            guard bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            if index < end, bytes[index] == UInt8(ascii: ":") {
                guard compressAt == nil else { return nil }
                compressAt = groups.count
                index += 1
                if index == end { break }
            } else if index == end {
                return nil
            }
        }
        if let at = compressAt {
            guard groups.count <= 7 else { return nil }
            groups.insert(contentsOf: repeatElement(0, count: 8 - groups.count), at: at)
        }
        guard groups.count == 8 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (position, group) in groups.enumerated() {
            if position < 4 { high = high << 16 | UInt64(group) } else { low = low << 16 | UInt64(group) }
        }
        return .v6(high: high, low: low)
    }
}

/// An address block such as `10.0.0.0/8` or `2001:db8::/32`.
public struct IPNetwork: Hashable, Sendable, CustomStringConvertible {
    /// The first address of the block (host bits are always zero).
    public let address: IPAddress
    public let prefixLength: Int

    public init(address: IPAddress, prefixLength: Int) {
        let length = max(0, min(address.bitWidth, prefixLength))
        self.address = address.masked(toPrefixLength: length)
        self.prefixLength = length
    }

    /// Parses `ADDRESS` (a host route) or `ADDRESS/LENGTH`.
    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(parts[0]) else { return nil }
        var length = address.bitWidth
        if parts.count == 2 {
            guard let parsed = Int(parts[1]), parsed >= 0, parsed <= address.bitWidth,
                parts[1].allSatisfy({ $0.isASCII && $0.isNumber })
            else { return nil }
            length = parsed
        }
        self.init(address: address, prefixLength: length)
    }

    public func contains(_ other: IPAddress) -> Bool {
        let candidate = other.unmappingIPv4
        guard candidate.isIPv4 == address.isIPv4 else { return false }
        return candidate.masked(toPrefixLength: prefixLength) == address
    }

    public var description: String {
        prefixLength == address.bitWidth ? address.description : "\(address)/\(prefixLength)"
    }
}

/// Appends `value` in decimal as UTF-8 digits.
public func appendDecimal(_ value: UInt64, to bytes: inout [UInt8]) {
    if value < 10 {
        bytes.append(UInt8(ascii: "0") + UInt8(value))
        return
    }
    var digits = InlineArray<20, UInt8>(repeating: 0)
    var count = 0
    var rest = value
    while rest > 0 {
        digits[count] = UInt8(ascii: "0") + UInt8(rest % 10)
        rest /= 10
        count += 1
    }
    while count > 0 {
        count -= 1
        bytes.append(digits[count])
    }
}

/// The unsigned decimal number in `bytes` (digits only, no sign), nil when it is not one or does not fit.
public func parseDecimal<N: FixedWidthInteger & UnsignedInteger>(_ bytes: ArraySlice<UInt8>, as type: N.Type = N.self) -> N? {
    guard !bytes.isEmpty, bytes.count <= 20 else { return nil }
    var value: N = 0
    for byte in bytes {
        guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
        let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
        let (sum, overflow2) = times.addingReportingOverflow(N(byte - UInt8(ascii: "0")))
        guard !overflow1, !overflow2 else { return nil }
        value = sum
    }
    return value
}
