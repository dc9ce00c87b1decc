import Testing
import VerdictCore
@testable import HallpassWire
@testable import FilterData

@Suite struct DNSMessageTests {
    @Test func queryName() throws {
        let message = try DNSMessageParser.parse(Build.dnsQuery("WWW.Example.COM", type: 28)).get()
        #expect(message.question?.name == Array("www.example.com".utf8))
        #expect(message.question?.type == 28)
        #expect(message.question?.class == 1)
        #expect(!message.header.isResponse)
    }

    @Test func compressionPointerForwardAndLoop() throws {
        // Question name is a pointer to a name placed after the question (forward pointer).
        var message = Build.be16(1) + Build.be16(0x0100) + Build.be16(1) + Build.be16(0) + Build.be16(0) + Build.be16(0)
        message += [0xC0, 18] + Build.be16(1) + Build.be16(1)  // name at 12..<14, then type/class -> name target at 18
        message += Build.dnsName("codemonkey.net")
        #expect(try DNSMessageParser.parse(message).get().question?.name == Array("codemonkey.net".utf8))
        // Self-referencing pointer: a loop.
        var loop = Build.be16(1) + Build.be16(0x0100) + Build.be16(1) + Build.be16(0) + Build.be16(0) + Build.be16(0)
        loop += [0xC0, 12, 0, 1, 0, 1]
        guard case .failure = DNSMessageParser.parse(loop) else { Issue.record("loop accepted"); return }
        // Label then pointer back to itself (growing loop): stopped by the length bound.
        var growing = Build.be16(1) + Build.be16(0x0100) + Build.be16(1) + Build.be16(0) + Build.be16(0) + Build.be16(0)
        growing += [3, 0x61, 0x62, 0x63, 0xC0, 12, 0, 1, 0, 1]
        guard case .failure = DNSMessageParser.parse(growing) else { Issue.record("growing loop accepted"); return }
    }

    /// The one name walker, as the message parser and the answer rewrites read with it: labels
    /// in order through a pointer, where the field ends in place, the size to make room for,
    /// where a field ends in a pointer, and whether a failure is a message cut short.
    @Test func theNameWalkerFollowsPointersAndSaysWhereTheFieldEnds() throws {
        // "example.org" at 0, then "www" and a pointer to it at 13. (Spans cannot go into the
        // test macros: each outcome is taken first.)
        let bytes = Build.dnsName("example.org") + [3] + Array("www".utf8) + [0xC0, 0]
        let span = bytes.span
        var labels = DNSName.Labels(at: 13, end: bytes.count)
        let size = labels.size(in: span)
        var read: [String] = []
        while let label = try labels.next(in: span) { read.append(String(decoding: bytes[label], as: UTF8.self)) }
        #expect(read == ["www", "example", "org"])
        #expect(labels.fieldEnd == bytes.count, "after the pointer, not after the name it points to")
        #expect(size?.labels == 3 && size?.labelBytes == 13)
        var reader = WireReader(span, from: 13)
        let pointer = try DNSName.skip(&reader, span)
        #expect(pointer == 17 && reader.offset == bytes.count)
        reader = WireReader(span)
        let root = try DNSName.skip(&reader, span)
        #expect(root == nil && reader.offset == 13)
        // Cut short: a truncation (dns.truncated for the rewrites); a pointer loop is not.
        var cut = DNSName.Labels(at: 13, end: 16)
        let cutSize = cut.size(in: span)
        var failure: DNSMalformation? = nil
        do throws(DNSMalformation) {
            while try cut.next(in: span) != nil {}
        } catch {
            failure = error
        }
        #expect(cutSize == nil && failure?.isTruncation == true)
        #expect(DNSRewriteError(DNSName.malformation(.pointerLoop, at: 13)).code == "dns.malformed")
        let short = Array(bytes[..<15])
        var rewriteFailure: DNSRewriteError? = nil
        do throws(DNSRewriteError) {
            _ = try DNSBypassRewrite.decompressedName(short.span, at: 13)
        } catch {
            rewriteFailure = error
        }
        #expect(rewriteFailure?.code == "dns.truncated" && rewriteFailure?.offset == 13)
    }

    @Test func badBytesAndLengths() {
        let control = Build.be16(1) + Build.be16(0x0100) + Build.be16(1) + [0, 0, 0, 0, 0, 0] + [3, 0x61, 0x04, 0x62, 0] + [0, 1, 0, 1]
        guard case .failure = DNSMessageParser.parse(control) else { Issue.record("control byte accepted"); return }
        let dotInLabel = Build.be16(1) + Build.be16(0x0100) + Build.be16(1) + [0, 0, 0, 0, 0, 0] + [3, 0x61, 0x2E, 0x62, 0] + [0, 1, 0, 1]
        guard case .failure = DNSMessageParser.parse(dotInLabel) else { Issue.record("dot in label accepted"); return }
        let long = Build.dnsQuery(Array(repeating: String(repeating: "a", count: 63), count: 5).joined(separator: "."))
        guard case .failure = DNSMessageParser.parse(long) else { Issue.record("over-long name accepted"); return }
        let maximal = Build.dnsQuery(Array(repeating: String(repeating: "a", count: 63), count: 3).joined(separator: ".") + "." + String(repeating: "b", count: 61))
        guard case .success = DNSMessageParser.parse(maximal) else { Issue.record("253-character name refused"); return }
        guard case .failure = DNSMessageParser.parse([1, 2, 3]) else { Issue.record("short header accepted"); return }
    }

    @Test func everyPrefixAndFlipIsSafe() {
        let query = Build.dnsQuery("a.b.example.org")
        for length in 0..<query.count {
            guard case .failure = DNSMessageParser.parse(Array(query.prefix(length))) else {
                Issue.record("prefix \(length) accepted")
                continue
            }
        }
        forEachMutation(of: query, rounds: 2000) { _ = DNSMessageParser.parse($0); _ = DNSMessageParser.addressRecords(in: $0) }
    }

    @Test func tcpFraming() {
        let query = Build.dnsQuery("tcp.example")
        let stream = Build.be16(query.count) + query
        for length in 0..<stream.count {
            guard case .needMoreData = DNSMessageParser.parse(tcpStream: Array(stream.prefix(length))) else {
                Issue.record("prefix \(length) is not needMoreData")
                continue
            }
        }
        guard case .message(let message, let range) = DNSMessageParser.parse(tcpStream: stream) else {
            Issue.record("not parsed")
            return
        }
        #expect(message.question?.name == Array("tcp.example".utf8))
        #expect(range == 2..<stream.count)
    }

    @Test func addressRecordOffsets() throws {
        var response = Build.be16(7) + Build.be16(0x8180) + Build.be16(1) + Build.be16(3) + Build.be16(0) + Build.be16(0)
        response += Build.dnsName("x.example") + Build.be16(1) + Build.be16(1)
        // CNAME, then A, then AAAA; owner names compressed to the question (offset 12).
        response += [0xC0, 12] + Build.be16(5) + Build.be16(1) + Build.be32(60) + Build.be16(4) + [0xC0, 12, 0, 0]
        let aOffset = response.count + 12
        response += [0xC0, 12] + Build.be16(1) + Build.be16(1) + Build.be32(300) + Build.be16(4) + [192, 0, 2, 7]
        let aaaaOffset = response.count + 12
        response += [0xC0, 12] + Build.be16(28) + Build.be16(1) + Build.be32(300) + Build.be16(16) + [UInt8](repeating: 0, count: 15) + [1]
        let records = try DNSMessageParser.addressRecords(in: response).get()
        #expect(records.count == 2)
        #expect(records[0].address == IPAddress("192.0.2.7"))
        #expect(records[0].addressOffset == aOffset)
        #expect(Array(response[aOffset..<(aOffset + 4)]) == [192, 0, 2, 7])
        #expect(records[0].timeToLiveOffset == aOffset - 6)
        #expect(records[1].address == IPAddress("::1"))
        #expect(records[1].addressOffset == aaaaOffset)
        // Truncated answer.
        guard case .failure = DNSMessageParser.addressRecords(in: Array(response.dropLast(3))) else {
            Issue.record("truncated answer accepted")
            return
        }
    }

    @Test func realCaptures() throws {
        guard TestData.isAvailable else { return }
        let forward = try NameExtractor.run(TestData.bytes("suricata-verify/tests/dns__dns-forward-pointer/input.pcap"))
        #expect(forward.byKind["dns_query"]?.contains("codemonkey.net") == true)
        let invalid = try NameExtractor.run(TestData.bytes("ndpi/pcap/dns-invalid-chars.pcap"))
        #expect(invalid.byKind["dns_query"] == nil)  // control bytes: malformed, not guessed
        let avast = try NameExtractor.run(TestData.bytes("ndpi/pcap/avast_securedns.pcapng"))
        #expect(avast.byKind["dns_query"] == ["2.securedns.avast.com"])  // 0x20 random case folded
    }
}
