// The protection of a client's QUIC Initial packets (RFC 9001 sections 5.2
// to 5.4): keys derived from the Destination Connection ID and a salt of the
// version, header protection, and AES-128-GCM. IETF QUIC (QUICInitial.swift:
// v1, v2, the late drafts) and Google QUIC's Q050, T050 and T051
// (GoogleQUIC.swift) protect their Initials the same way, each with salts
// and labels of its own; both open them here.

internal import Crypto
internal import _CryptoExtras

enum QUICInitialProtection {
    /// What a version puts into the key derivation.
    struct Parameters {
        var salt: [UInt8]
        /// "quic key", "quic iv", "quic hp" for v1, the drafts and gQUIC; "quicv2 ..." for v2 (RFC 9369 section 3.3.2).
        var keyLabel: [UInt8]
        var ivLabel: [UInt8]
        var hpLabel: [UInt8]

        private static let v1Labels = (key: Array("quic key".utf8), iv: Array("quic iv".utf8), hp: Array("quic hp".utf8))
        private static let v2Labels = (key: Array("quicv2 key".utf8), iv: Array("quicv2 iv".utf8), hp: Array("quicv2 hp".utf8))

        /// The labels of QUIC v1 (and the drafts, and gQUIC) with `salt`.
        static func version1Labels(salt: [UInt8]) -> Parameters {
            Parameters(salt: salt, keyLabel: v1Labels.key, ivLabel: v1Labels.iv, hpLabel: v1Labels.hp)
        }

        /// The labels of QUIC v2 with `salt`.
        static func version2Labels(salt: [UInt8]) -> Parameters {
            Parameters(salt: salt, keyLabel: v2Labels.key, ivLabel: v2Labels.iv, hpLabel: v2Labels.hp)
        }
    }

    /// The AEAD nonce is the IV (RFC 9001 section 5.3: 12 bytes for AES-128-GCM).
    static let nonceLength = 12
    /// The AEAD tag, and the header protection sample (RFC 9001 section 5.4.2).
    static let tagLength = 16
    static let sampleLength = 16

    /// The client's Initial packet protection keys.
    struct ClientKeys {
        var key: SymmetricKey
        var iv: [UInt8]
        var headerProtectionKey: SymmetricKey
    }

    static func clientKeys(destinationConnectionID: [UInt8], parameters: Parameters) -> ClientKeys {
        let initialSecret = HKDF<SHA256>.extract(inputKeyMaterial: SymmetricKey(data: destinationConnectionID), salt: parameters.salt)
        let clientSecret = expandLabel(secret: SymmetricKey(data: initialSecret), label: Array("client in".utf8), length: 32)
        let key = expandLabel(secret: clientSecret, label: parameters.keyLabel, length: 16)
        let iv = expandLabelBytes(secret: clientSecret, label: parameters.ivLabel, length: nonceLength)
        let hp = expandLabel(secret: clientSecret, label: parameters.hpLabel, length: 16)
        return ClientKeys(key: key, iv: iv, headerProtectionKey: hp)
    }

    /// HKDF-Expand-Label (RFC 8446 section 7.1) with an empty context.
    static func expandLabel(secret: SymmetricKey, label: [UInt8], length: Int) -> SymmetricKey {
        HKDF<SHA256>.expand(pseudoRandomKey: secret, info: labelInfo(label, length: length), outputByteCount: length)
    }

    /// HKDF-Expand-Label as bytes, for an output of at most one SHA-256 block:
    /// HKDF-Expand's first block is HMAC(secret, info | 0x01) (RFC 5869
    /// section 2.3), so the bytes come out of the MAC (a byte sequence)
    /// instead of out of a key, which has no safe way to read it.
    static func expandLabelBytes(secret: SymmetricKey, label: [UInt8], length: Int) -> [UInt8] {
        precondition(length <= SHA256.byteCount, "one HKDF block at most")
        let block = HMAC<SHA256>.authenticationCode(for: labelInfo(label, length: length) + [1], using: secret)
        return Array(block.prefix(length))
    }

    /// The HkdfLabel structure with an empty context (RFC 8446 section 7.1).
    private static func labelInfo(_ label: [UInt8], length: Int) -> [UInt8] {
        var info: [UInt8] = [UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
        info.append(UInt8(6 + label.count))
        info.append(contentsOf: Array("tls13 ".utf8))
        info.append(contentsOf: label)
        info.append(0)
        return info
    }

    /// A decrypted Initial.
    struct Opened {
        /// The packet number as sent (truncated to its encoded length).
        var packetNumber: UInt64
        var plaintext: [UInt8]
        /// The DCID whose keys opened it.
        var keyConnectionID: [UInt8]
    }

    /// The most earlier DCIDs tried for one packet (the flows' assemblers keep as many).
    static let maximumKeyConnectionIDs = 4

    /// Opens the Initial that starts at `packetStart`, whose packet number
    /// starts at `packetNumberOffset` and whose protected payload ends at
    /// `end`: with the keys of its own DCID (a first Initial, or the first
    /// after a Retry), else with those of each of `keyConnectionIDs` (the
    /// DCIDs whose keys opened the flow's earlier Initials: a client that
    /// switched to the server's connection ID keeps its original keys, RFC
    /// 9001 section 5.2). Nil when none authenticates, or when the packet is
    /// too short for the header protection sample and a tag.
    static func open(_ bytes: Span<UInt8>, packetStart: Int, packetNumberOffset: Int, end: Int, destinationConnectionID: [UInt8],
                     keyConnectionIDs: [[UInt8]], parameters: Parameters) -> Opened? {
        let tries = 1 + min(keyConnectionIDs.count, maximumKeyConnectionIDs)
        for attempt in 0..<tries {
            let candidate = attempt == 0 ? destinationConnectionID : keyConnectionIDs[attempt - 1]
            if attempt > 0, candidate == destinationConnectionID { continue }
            let keys = clientKeys(destinationConnectionID: candidate, parameters: parameters)
            if let opened = open(bytes, packetStart: packetStart, packetNumberOffset: packetNumberOffset, end: end, keys: keys) {
                return Opened(packetNumber: opened.packetNumber, plaintext: opened.plaintext, keyConnectionID: candidate)
            }
        }
        return nil
    }

    /// Removes header protection (RFC 9001 section 5.4) and decrypts one
    /// Initial with `keys` (section 5.3); nil when it does not authenticate,
    /// or when the keys' IV is not a nonce's length.
    static func open(_ bytes: Span<UInt8>, packetStart start: Int, packetNumberOffset: Int, end: Int,
                     keys: ClientKeys) -> (packetNumber: UInt64, plaintext: [UInt8])? {
        // The sample starts 4 bytes after the packet number offset (RFC 9001 section 5.4.2).
        guard keys.iv.count == nonceLength, start >= 0, start < packetNumberOffset, end <= bytes.count,
              end - packetNumberOffset >= 4 + sampleLength else { return nil }
        var mask = bytes.copied((packetNumberOffset + 4)..<(packetNumberOffset + 4 + sampleLength))
        do {
            try AES.permute(&mask, key: keys.headerProtectionKey)
        } catch {
            return nil
        }
        let unprotectedFirst = bytes[start] ^ (mask[0] & 0x0F)
        let packetNumberLength = Int(unprotectedFirst & 0x03) + 1
        let payloadStart = packetNumberOffset + packetNumberLength
        guard end - payloadStart >= tagLength else { return nil }
        var header = bytes.copied(start..<payloadStart)
        header[0] = unprotectedFirst
        var packetNumber: UInt64 = 0
        for index in 0..<packetNumberLength {
            let position = packetNumberOffset - start + index
            header[position] ^= mask[1 + index]
            packetNumber = packetNumber << 8 | UInt64(header[position])
        }
        // The nonce: the IV with the packet number XORed into its last bytes (RFC 9001 section 5.3).
        var nonce = keys.iv
        for index in 0..<8 {
            nonce[nonceLength - 1 - index] ^= UInt8(truncatingIfNeeded: packetNumber >> (8 * UInt64(index)))
        }
        do {
            let box = try AES.GCM.SealedBox(nonce: AES.GCM.Nonce(data: nonce),
                                            ciphertext: bytes.copied(payloadStart..<(end - tagLength)),
                                            tag: bytes.copied((end - tagLength)..<end))
            return (packetNumber, Array(try AES.GCM.open(box, using: keys.key, authenticating: header)))
        } catch {
            return nil
        }
    }
}
