/// Percent-encoding (RFC 3986 section 2.1), both ways, once: decoding what
/// hallpass reads percent-encoded (the block page's request-access form and
/// its `?url=`, `application/x-www-form-urlencoded` where `+` is a space;
/// the file URL of a rules source, where `+` is itself), and encoding the
/// values put into a request-access link (the block page's and the desktop
/// notice's).
public enum PercentEncoding {
    /// Why text does not decode.
    public enum Failure: Error, Hashable, Sendable {
        /// A '%' at `offset` that is not followed by two hex digits.
        case badEscape(offset: Int)
        /// A byte at `offset` that belongs escaped: a space, a control
        /// character, or a byte outside ASCII (RFC 3986 section 2).
        case rawByte(UInt8, offset: Int)
        /// The decoded bytes are not UTF-8.
        case notUTF8
    }

    /// `value` with every UTF-8 byte but the unreserved characters
    /// (`A-Z a-z 0-9 - . _ ~`, RFC 3986 section 2.3) written as `%XX`.
    public static func encode(_ value: String) -> String {
        let hexDigits = Array("0123456789ABCDEF".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(value.utf8.count)
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                bytes.append(byte)
            default:
                bytes += [UInt8(ascii: "%"), hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `encoded` with every `%XX` made the byte it stands for, and with
    /// `plusIsSpace` every `+` a space; the result must be UTF-8.
    public static func decode(_ encoded: some Collection<UInt8>, plusIsSpace: Bool) throws(Failure) -> String {
        let bytes = Array(encoded)
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "+") where plusIsSpace:
                decoded.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard bytes.count - index > 2, let high = HexDigit.value(of: bytes[index + 1]), let low = HexDigit.value(of: bytes[index + 2]) else {
                    throw .badEscape(offset: index)
                }
                decoded.append(high << 4 | low)
                index += 2
            case 0x21...0x7E:
                decoded.append(byte)
            default:
                throw .rawByte(byte, offset: index)
            }
            index += 1
        }
        guard let text = String(validating: decoded, as: UTF8.self) else { throw .notUTF8 }
        return text
    }
}

/// Hexadecimal digits, as percent escapes and IPv6 addresses write them.
enum HexDigit {
    /// The value of an ASCII hex digit (either case), nil for any other byte.
    static func value(of byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// Lower-case hexadecimal, as fingerprints, hashes and signatures are
/// written (the school's contract, the control channel, the server's
/// stored hashes): one for the package, where each module had its own copy.
package enum Hex {
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of `text` (either case), nil unless it is whole hex digits.
    package static func decode(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = HexDigit.value(of: digits[index]), let low = HexDigit.value(of: digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}
