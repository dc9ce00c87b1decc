// Pointing the answer to a blocked name at the block page: the A and AAAA
// records of a DNS response are overwritten in place (same lengths, so no
// offset moves), their TTLs shortened, and the UDP checksum computed again
// (RFC 768; RFC 8200 section 8.1 for IPv6, where it is mandatory).

public import HallpassWire
public import VerdictCore

/// A DNS response carried in one UDP packet from port 53.
public struct DNSResponsePacket: Sendable {
    public var ip: IPPacket
    public var header: DNSHeader
    /// The question's name, when it is a usable host name.
    public var question: HostName?

    /// Recognizes a DNS response (QR set, one question) from `port` in a
    /// whole IP packet; nil for anything else, including malformed messages.
    public init?(_ packet: Span<UInt8>, port: UInt16 = 53) {
        guard let ip = try? IPPacketParser.parse(packet), ip.protocolNumber == 17, ip.sourcePort == port,
            !ip.fragmentation.isFragment
        else { return nil }
        guard case .success(let message) = DNSMessageParser.parse(packet.extracting(ip.payload)), message.header.isResponse,
            message.header.opcode == 0, let question = message.question
        else { return nil }
        self.ip = ip
        self.header = message.header
        self.question = try? HostName(bytes: question.name)
    }
}

public enum DNSAnswerRewrite {
    /// The packet with every A record of the answer section set to
    /// `rewrite.ipv4`, every AAAA record to `rewrite.ipv6`, their TTLs cut to
    /// `rewrite.timeToLive`, and the UDP checksum made right; nil when the
    /// answer holds no A or AAAA record (nothing to point anywhere) or cannot
    /// be read.
    public static func rewrite(_ packet: Span<UInt8>, response: DNSResponsePacket, to rewrite: Policy.DNSRewrite) -> [UInt8]? {
        guard case .success(let records) = DNSMessageParser.addressRecords(in: packet.extracting(response.ip.payload)),
            !records.isEmpty
        else { return nil }
        var bytes = [UInt8](copying: packet)
        let base = response.ip.payload.lowerBound
        for record in records {
            let address = record.type == 1 ? rewrite.ipv4.networkBytes : rewrite.ipv6.networkBytes
            guard address.count == record.addressLength else { return nil }
            bytes.replaceSubrange((base + record.addressOffset)..<(base + record.addressOffset + record.addressLength), with: address)
            let ttl = min(record.timeToLive, rewrite.timeToLive)
            let ttlAt = base + record.timeToLiveOffset
            bytes[ttlAt] = UInt8(truncatingIfNeeded: ttl >> 24)
            bytes[ttlAt + 1] = UInt8(truncatingIfNeeded: ttl >> 16)
            bytes[ttlAt + 2] = UInt8(truncatingIfNeeded: ttl >> 8)
            bytes[ttlAt + 3] = UInt8(truncatingIfNeeded: ttl)
        }
        guard InternetChecksum.setUDPChecksum(&bytes, ip: response.ip) else { return nil }
        return bytes
    }
}
