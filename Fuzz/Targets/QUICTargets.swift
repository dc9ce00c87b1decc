// The QUIC fuzz target. Random bytes almost never pass header protection and
// AEAD authentication, so most of the input is sealed into a valid client
// Initial first (RFC 9001 sections 5.2 to 5.4): the fuzzer then mutates
// what is inside (the frames, the CRYPTO data, the ClientHello) and the
// header fields the sealer takes from the input.
import Crypto
import _CryptoExtras
import FilterData
import HallpassWire
import HallpassIPC

enum QUICFuzzing {
    /// Input: mode (odd: the rest is a raw datagram), version choice, DCID
    /// length and bytes, packet number length, token length and bytes, then the
    /// plaintext frames; after a sealed packet, a second datagram of the flow
    /// when the mode asks for one (the same frames at another packet number).
    static func run(_ input: [UInt8]) {
        var splitter = InputSplitter(input)
        let mode = splitter.byte()
        guard mode & 1 == 0 else {
            datagrams([splitter.rest()])
            return
        }
        let version = versions[Int(splitter.byte()) % versions.count]
        let dcid = splitter.take(Int(splitter.byte()) % 21)
        let packetNumberLength = Int(splitter.byte() & 0x03) + 1
        let token = splitter.take(Int(splitter.byte()) % 8)
        let plaintext = splitter.rest()
        let first = seal(plaintext, version: version, dcid: dcid, token: token, packetNumber: 0, packetNumberLength: packetNumberLength)
        if mode & 2 != 0 {
            let second = seal(plaintext, version: version, dcid: dcid, token: [], packetNumber: 1, packetNumberLength: packetNumberLength)
            datagrams([first, second])
        } else {
            datagrams([first])
        }
    }

    /// The datagrams of one flow, through the parser, the assembler and the state machine.
    private static func datagrams(_ datagrams: [[UInt8]]) {
        var assembler = QUICCryptoAssembler(capacity: 16_384)
        var machine = FlowStateMachine.quic()
        for datagram in datagrams {
            if case .packets(let summary) = QUICInitialParser.parse(datagram: datagram) {
                for packet in summary.initials {
                    require(packet.packetRange.upperBound <= datagram.count, "packet range past the datagram")
                }
            }
            _ = assembler.add(datagram: datagram)
            _ = assembler.clientHello()
            _ = machine.clientDatagram(datagram.span)
        }
    }

    private static let versions: [UInt32] = [0x0000_0001, 0x6b33_43cf, 0xff00_001d]

    /// A client Initial carrying `plaintext` (padded so that the header
    /// protection sample exists), sealed with the keys of `dcid`. Also Google
    /// QUIC's protected Initials (Q050, T050, T051), which use this header.
    static func seal(_ plaintext: [UInt8], version: UInt32, dcid: [UInt8], token: [UInt8], packetNumber: UInt32,
                     packetNumberLength: Int) -> [UInt8] {
        let isVersion2 = version == 0x6b33_43cf
        var payload = plaintext
        if payload.count < 20 { payload += [UInt8](repeating: 0, count: 20 - payload.count) }  // PADDING frames
        let length = packetNumberLength + payload.count + 16
        // Initial: type 0 (v1) or 1 (v2), with the packet number length in the low bits.
        let typeBits: UInt8 = isVersion2 ? 0x10 : 0x00
        var header: [UInt8] = [0xC0 | typeBits | UInt8(packetNumberLength - 1)]
        header += [UInt8(version >> 24), UInt8((version >> 16) & 0xFF), UInt8((version >> 8) & 0xFF), UInt8(version & 0xFF)]
        header += [UInt8(dcid.count)] + dcid + [0]  // no source connection ID
        header += variableLengthInteger(token.count) + token
        header += [0x40 | UInt8((length >> 8) & 0x3F), UInt8(length & 0xFF)]
        let packetNumberOffset = header.count
        for index in (0..<packetNumberLength).reversed() { header.append(UInt8(truncatingIfNeeded: packetNumber >> (8 * UInt32(index)))) }

        let keys = Keys(dcid: dcid, version: version)
        var nonce = keys.iv
        for index in 0..<4 { nonce[11 - index] ^= UInt8(truncatingIfNeeded: packetNumber >> (8 * UInt32(index))) }
        guard let sealed = try? AES.GCM.seal(payload, using: keys.key, nonce: AES.GCM.Nonce(data: nonce), authenticating: header) else {
            fatalError("AES-GCM sealing failed")
        }
        var packet = header + Array(sealed.ciphertext) + Array(sealed.tag)
        // Header protection: the sample starts 4 bytes after the packet number's start.
        var mask = Array(packet[(packetNumberOffset + 4)..<(packetNumberOffset + 20)])
        do {
            try AES.permute(&mask, key: keys.headerProtection)
        } catch {
            fatalError("header protection failed: \(error)")
        }
        packet[0] ^= mask[0] & 0x0F
        for index in 0..<packetNumberLength { packet[packetNumberOffset + index] ^= mask[1 + index] }
        return packet
    }

    private static func variableLengthInteger(_ value: Int) -> [UInt8] {
        value < 64 ? [UInt8(value)] : [0x40 | UInt8(value >> 8), UInt8(value & 0xFF)]
    }

    /// Client Initial keys (RFC 9001 section 5.2; RFC 9369 section 3.3 for v2; gQUIC's salts).
    private struct Keys {
        var key: SymmetricKey
        var iv: [UInt8]
        var headerProtection: SymmetricKey

        init(dcid: [UInt8], version: UInt32) {
            let salt: [UInt8]
            switch version {
            case 0x6b33_43cf:
                salt = [0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9]
            case 0xff00_001d:
                salt = [0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11, 0xe0, 0x43, 0x90, 0xa8, 0x99]
            // Google QUIC Q050, T050 and T051 (Chromium's quic_versions.cc): v1's labels, their own salts.
            case 0x5130_3530:
                salt = [0x50, 0x45, 0x74, 0xef, 0xd0, 0x66, 0xfe, 0x2f, 0x9d, 0x94, 0x5c, 0xfc, 0xdb, 0xd3, 0xa7, 0xf0, 0xd3, 0xb5, 0x6b, 0x45]
            case 0x5430_3530:
                salt = [0x7f, 0xf5, 0x79, 0xe5, 0xac, 0xd0, 0x72, 0x91, 0x55, 0x80, 0x30, 0x4c, 0x43, 0xa2, 0x36, 0x7c, 0x60, 0x48, 0x83, 0x10]
            case 0x5430_3531:
                salt = [0x7a, 0x4e, 0xde, 0xf4, 0xe7, 0xcc, 0xee, 0x5f, 0xa4, 0x50, 0x6c, 0x19, 0x12, 0x4f, 0xc8, 0xcc, 0xda, 0x6e, 0x03, 0x3d]
            default:
                salt = [0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a]
            }
            // draft-29 has v1's labels; v2 its own (RFC 9369 section 3.3).
            let prefix = version == 0x6b33_43cf ? "quicv2 " : "quic "
            let initial = HKDF<SHA256>.extract(inputKeyMaterial: SymmetricKey(data: dcid), salt: salt)
            let client = Keys.expand(SymmetricKey(data: initial), "client in", 32)
            key = Keys.expand(client, prefix + "key", 16)
            headerProtection = Keys.expand(client, prefix + "hp", 16)
            // The IV as bytes: HKDF-Expand's first block is HMAC(secret, info | 0x01).
            let block = HMAC<SHA256>.authenticationCode(for: Keys.info(prefix + "iv", 12) + [1], using: client)
            iv = Array(block.prefix(12))
        }

        static func expand(_ secret: SymmetricKey, _ label: String, _ length: Int) -> SymmetricKey {
            HKDF<SHA256>.expand(pseudoRandomKey: secret, info: info(label, length), outputByteCount: length)
        }

        static func info(_ label: String, _ length: Int) -> [UInt8] {
            let full = Array(("tls13 " + label).utf8)
            return [UInt8(length >> 8), UInt8(length & 0xFF), UInt8(full.count)] + full + [0]
        }
    }
}
