/// Why a string is not a usable host name.
public enum HostNameError: Error, Hashable, Sendable, CustomStringConvertible {
    case empty
    case tooLong(length: Int)
    case emptyLabel
    case labelTooLong(label: String)
    case invalidCharacter(Character)
    case notEncodable(label: String)

    public var description: String {
        switch self {
        case .empty: "the host name is empty"
        case .tooLong(let length): "the host name is \(length) bytes long; DNS allows at most 253"
        case .emptyLabel: "the host name has an empty label (two dots in a row, or a leading dot)"
        case .labelTooLong(let label): "the label '\(label)' is longer than the 63 bytes DNS allows"
        case .invalidCharacter(let character):
            "the character '\(character.unicodeScalars.map { $0.escaped(asASCII: true) }.joined())' is not allowed in a host name"
        case .notEncodable(let label): "the label '\(label)' cannot be converted to its ASCII (punycode) form"
        }
    }
}

/// A host name in the one form that rules are stored and looked up in:
/// ASCII, lower case, internationalized labels in punycode (`xn--...`),
/// no trailing dot. Letters, digits, `-` and `_` are allowed in a label
/// (`_` appears in real service names, e.g. `_dmarc`).
///
/// Every name that reaches the rule store goes through this type, so the
/// writer and the reader agree byte for byte.
public struct HostName: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The canonical bytes (ASCII).
    public let bytes: [UInt8]

    /// Canonicalizes `text`: case folding, trailing dots removed, IDN labels
    /// converted to punycode, the IDNA full stops (U+3002, U+FF0E, U+FF61)
    /// read as dots.
    public init(_ text: some StringProtocol) throws(HostNameError) {
        if text.utf8.allSatisfy({ $0 < 0x80 }) {
            try self.init(asciiBytes: text.utf8)
        } else {
            try self.init(unicode: String(text))
        }
    }

    /// Canonicalizes a name taken from the wire (SNI, Host header, DNS).
    /// Valid UTF-8 outside ASCII is converted like typed text; other bytes are refused.
    public init(bytes: some Collection<UInt8>) throws(HostNameError) {
        if bytes.allSatisfy({ $0 < 0x80 }) {
            try self.init(asciiBytes: bytes)
        } else {
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw .invalidCharacter("\u{FFFD}")
            }
            try self.init(unicode: text)
        }
    }

    /// The same for a name the wire parsers read into an array (they lower-case
    /// ASCII letters): a name already in canonical form is checked in one
    /// pass and kept as it is, without a copy. This runs for every DNS query,
    /// server name and Host header, so it must not go through the generic path.
    public init(bytes: [UInt8]) throws(HostNameError) {
        if HostName.isCanonical(bytes) {
            self.init(canonicalBytes: bytes)
        } else {
            try self.init(bytes: bytes[...])
        }
    }

    /// True when `bytes` is a host name in canonical form: 1 to 253 bytes of
    /// lower-case letters, digits, `-`, `_` and dots, labels of 1 to 63 bytes.
    static func isCanonical(_ bytes: [UInt8]) -> Bool {
        guard !bytes.isEmpty, bytes.count <= 253 else { return false }
        var labelLength = 0
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                labelLength += 1
                if labelLength > 63 { return false }
            case UInt8(ascii: "."):
                if labelLength == 0 { return false }
                labelLength = 0
            default:
                return false
            }
        }
        return labelLength > 0
    }

    /// Wraps bytes already in canonical form (as read back from a rule store).
    /// The caller guarantees they are canonical.
    init(canonicalBytes: [UInt8]) {
        self.bytes = canonicalBytes
    }

    private init(asciiBytes source: some Collection<UInt8>) throws(HostNameError) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(source.count)
        for byte in source {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
                bytes.append(byte)
            case UInt8(ascii: "A")...UInt8(ascii: "Z"):
                bytes.append(byte | 0x20)
            default:
                throw .invalidCharacter(Character(Unicode.Scalar(byte)))
            }
        }
        while bytes.last == UInt8(ascii: ".") { bytes.removeLast() }
        try HostName.validate(bytes)
        self.bytes = bytes
    }

    private init(unicode text: String) throws(HostNameError) {
        let dots: Set<Unicode.Scalar> = [".", "\u{3002}", "\u{FF0E}", "\u{FF61}"]
        var labels: [[Unicode.Scalar]] = [[]]
        for scalar in text.lowercased().unicodeScalars {
            if dots.contains(scalar) {
                labels.append([])
            } else {
                labels[labels.count - 1].append(scalar)
            }
        }
        while labels.count > 1, labels.last?.isEmpty == true { labels.removeLast() }
        var bytes: [UInt8] = []
        for (index, label) in labels.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ".")) }
            if label.allSatisfy(\.isASCII) {
                bytes.append(contentsOf: label.map { UInt8($0.value) })
                continue
            }
            for scalar in label where !HostName.isAllowedNonASCII(scalar) {
                throw .invalidCharacter(Character(scalar))
            }
            guard let encoded = Punycode.encode(label) else {
                throw .notEncodable(label: String(String.UnicodeScalarView(label)))
            }
            bytes.append(contentsOf: Array("xn--".utf8) + encoded)
        }
        // The ASCII parts still have to pass the ASCII rules.
        try self.init(asciiBytes: bytes)
    }

    /// Letters, marks and digits of any script may form an IDN label;
    /// spaces, symbols, punctuation and controls may not.
    private static func isAllowedNonASCII(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .lowercaseLetter, .uppercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
            .nonspacingMark, .spacingMark, .enclosingMark, .decimalNumber, .letterNumber, .otherNumber:
            return true
        default:
            return false
        }
    }

    private static func validate(_ bytes: [UInt8]) throws(HostNameError) {
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= 253 else { throw .tooLong(length: bytes.count) }
        var labelLength = 0
        var labelStart = 0
        for (index, byte) in bytes.enumerated() {
            if byte == UInt8(ascii: ".") {
                guard labelLength > 0 else { throw .emptyLabel }
                labelLength = 0
                labelStart = index + 1
            } else {
                labelLength += 1
                if labelLength > 63 {
                    let end = bytes[labelStart...].firstIndex(of: UInt8(ascii: ".")) ?? bytes.endIndex
                    throw .labelTooLong(label: String(decoding: bytes[labelStart..<end], as: UTF8.self))
                }
            }
        }
        guard labelLength > 0 else { throw .emptyLabel }
    }

    public var description: String { String(decoding: bytes, as: UTF8.self) }

    /// The number of dot-separated labels.
    public var labelCount: Int { bytes.reduce(1) { $1 == UInt8(ascii: ".") ? $0 + 1 : $0 } }

    /// Whether the name is an IPv4 dotted quad (which HostName accepts as text).
    public var isIPv4Literal: Bool { IPAddress.parseIPv4(bytes[...]) != nil }

    public static func < (lhs: HostName, rhs: HostName) -> Bool { lhs.bytes.lexicographicallyPrecedes(rhs.bytes) }
}
