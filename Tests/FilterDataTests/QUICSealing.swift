// Client Initials sealed for tests (RFC 9001 sections 5.2 to 5.4), with
// FilterData's own key derivation: frames of our choosing under a DCID of our
// choosing, which the parser must open exactly as it opens a real client's.
import Crypto
import _CryptoExtras
@testable import FilterData
import HallpassWire
import HallpassIPC

enum QUICSealing {
    /// A version 1 client Initial carrying `frames` (padded with PADDING to 1,200 bytes).
    static func initial(frames: [UInt8], dcid: [UInt8], packetNumber: UInt32 = 0) -> [UInt8] {
        let parameters = QUICInitialParser.initialParameters(for: 1)!
        let keys = QUICInitialProtection.clientKeys(destinationConnectionID: dcid, parameters: parameters.protection)
        var payload = frames
        let headerGuess = 1 + 4 + 1 + dcid.count + 1 + 1 + 2 + 4
        if payload.count < 1_200 - headerGuess - 16 { payload += [UInt8](repeating: 0, count: 1_200 - headerGuess - 16 - payload.count) }
        let packetNumberLength = 4
        let length = packetNumberLength + payload.count + 16
        var header: [UInt8] = [0xC0 | UInt8(packetNumberLength - 1), 0, 0, 0, 1]
        header += [UInt8(dcid.count)] + dcid + [0]  // no source connection ID
        header += [0]  // no token
        header += [0x40 | UInt8((length >> 8) & 0x3F), UInt8(length & 0xFF)]
        let packetNumberOffset = header.count
        header += Build.be32(packetNumber)
        var nonce = keys.iv
        for index in 0..<4 { nonce[11 - index] ^= UInt8(truncatingIfNeeded: packetNumber >> (8 * UInt32(index))) }
        let sealed = try! AES.GCM.seal(payload, using: keys.key, nonce: AES.GCM.Nonce(data: nonce), authenticating: header)
        var packet = header + Array(sealed.ciphertext) + Array(sealed.tag)
        var mask = Array(packet[(packetNumberOffset + 4)..<(packetNumberOffset + 20)])
        try! AES.permute(&mask, key: keys.headerProtectionKey)
        packet[0] ^= mask[0] & 0x0F
        for index in 0..<packetNumberLength { packet[packetNumberOffset + index] ^= mask[1 + index] }
        return packet
    }

    /// A CRYPTO frame (RFC 9000 section 19.6) with two-byte varint offset and length.
    static func cryptoFrame(offset: Int, _ data: [UInt8]) -> [UInt8] {
        [0x06, 0x40 | UInt8(offset >> 8), UInt8(offset & 0xFF), 0x40 | UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data
    }

    /// An ACK frame for packet 0 (RFC 9000 section 19.3).
    static let ackFrame: [UInt8] = [0x02, 0x00, 0x00, 0x00, 0x00]
}
