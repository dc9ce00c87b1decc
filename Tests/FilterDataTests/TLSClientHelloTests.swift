import Testing
@testable import FilterData
import HallpassWire
import HallpassIPC

@Suite struct TLSClientHelloTests {
    let hello = Build.clientHello(extensions: [
        Build.sniExtension("WWW.Example.COM"),
        Build.alpnExtension(["h2", "http/1.1"]),
        Build.supportedVersions([0x0304, 0x0303]),
        (0xfe0d, [0, 1, 2, 3]),
    ])

    @Test func parsesOneRecord() throws {
        guard case .clientHello(let info) = ClientHelloParser.parse(recordStream: Build.records(hello)) else {
            Issue.record("expected a ClientHello")
            return
        }
        #expect(info.serverName == Array("www.example.com".utf8))
        #expect(info.alpnProtocols == [Array("h2".utf8), Array("http/1.1".utf8)])
        #expect(info.supportedVersions == [0x0304, 0x0303])
        #expect(info.legacyVersion == 0x0303)
        #expect(info.hasEncryptedClientHello)
        #expect(!info.hasLegacyEncryptedSNI)
        #expect(info.handshakeLength == hello.count)
    }

    @Test func parsesAcrossManySmallRecords() {
        let stream = Build.records(hello, recordSize: 7)
        guard case .clientHello(let info) = ClientHelloParser.parse(recordStream: stream) else {
            Issue.record("expected a ClientHello")
            return
        }
        #expect(info.serverName == Array("www.example.com".utf8))
    }

    @Test func everyPrefixNeedsMoreData() {
        for stream in [Build.records(hello), Build.records(hello, recordSize: 13)] {
            for length in 0..<stream.count {
                switch ClientHelloParser.parse(recordStream: Array(stream.prefix(length))) {
                case .needMoreData(let total):
                    if let total { #expect(total > length) }
                default:
                    Issue.record("prefix \(length) gave \(ClientHelloParser.parse(recordStream: Array(stream.prefix(length))))")
                }
            }
        }
        for length in 0..<hello.count {
            if case .needMoreData = ClientHelloParser.parse(handshakeMessage: Array(hello.prefix(length))) { continue }
            Issue.record("bare prefix \(length) is not needMoreData")
        }
    }

    @Test func randomFlipsNeverCrash() {
        forEachMutation(of: Build.records(hello), rounds: 2000) { _ = ClientHelloParser.parse(recordStream: $0) }
        forEachMutation(of: Build.records(hello, recordSize: 9), rounds: 500, seed: 7) { _ = ClientHelloParser.parse(recordStream: $0) }
        forEachMutation(of: hello, rounds: 1000, seed: 3) { _ = ClientHelloParser.parse(handshakeMessage: $0) }
    }

    @Test func notTLS() {
        #expect(ClientHelloParser.parse(recordStream: Array("GET / HTTP/1.1\r\n".utf8)) == .notTLS)
        #expect(ClientHelloParser.parse(recordStream: [22, 9]) == .notTLS)
        #expect(ClientHelloParser.parse(recordStream: [23, 3, 3, 0, 1, 0]) == .notTLS)
        #expect(ClientHelloParser.parse(handshakeMessage: [2, 0, 0, 0]) == .notTLS)
    }

    @Test func malformedCases() {
        func isMalformed(_ outcome: ClientHelloOutcome) -> Bool {
            if case .malformed = outcome { return true }
            return false
        }
        // ServerHello as the first handshake message.
        #expect(isMalformed(ClientHelloParser.parse(recordStream: [22, 3, 3, 0, 4, 2, 0, 0, 0])))
        // Empty record.
        #expect(isMalformed(ClientHelloParser.parse(recordStream: [22, 3, 1, 0, 0])))
        // An alert record between ClientHello fragments.
        let split = Build.records(Array(hello.prefix(20))) + [21, 3, 3, 0, 2, 1, 0]
        #expect(isMalformed(ClientHelloParser.parse(recordStream: split)))
        // Duplicate server_name.
        let duplicate = Build.clientHello(extensions: [Build.sniExtension("a.example"), Build.sniExtension("b.example")])
        #expect(isMalformed(ClientHelloParser.parse(recordStream: Build.records(duplicate))))
        // Extension running past the message.
        var bad = hello
        bad[bad.count - 5] = 0xFF
        #expect(isMalformed(ClientHelloParser.parse(handshakeMessage: bad)))
        // Over the 64 KiB bound: too large, told apart from malformed (filter-data blocks it as a bypass).
        #expect(ClientHelloParser.parse(recordStream: [22, 3, 1, 0, 4, 1, 0x01, 0x00, 0x01]) == .tooLarge(declaredLength: 65_541))
        #expect(ClientHelloParser.parse(handshakeMessage: [1, 0x01, 0x00, 0x01]) == .tooLarge(declaredLength: 65_541))
        // Declared in a later record of a split hello.
        #expect(ClientHelloParser.parse(recordStream: Build.records([1, 0x01, 0x00, 0x01], recordSize: 2)) == .tooLarge(declaredLength: 65_541))
    }

    /// A hello padded to 20 KB (a GREASE extension before the server name), as a
    /// student's own client can send it: two records, the name in the second.
    static func paddedHello(_ name: String, padding: Int = 20_000) -> [UInt8] {
        Build.clientHello(extensions: [(0x0a0a, [UInt8](repeating: 0, count: padding)), Build.sniExtension(name)])
    }

    @Test func aHelloPaddedPastThePeekBoundIsReadWhole() {
        let message = Self.paddedHello("www.blocked.example")
        for recordSize in [16_384, 1_000, 100] {
            guard case .clientHello(let info) = ClientHelloParser.parse(recordStream: Build.records(message, recordSize: recordSize)) else {
                Issue.record("records of \(recordSize): expected a ClientHello")
                continue
            }
            #expect(info.serverName.map { String(decoding: $0, as: UTF8.self) } == "www.blocked.example")
            #expect(info.handshakeLength == message.count)
        }
        // The largest hello the parser reads: 64 KiB of message in records of 16 KiB.
        let largest = Self.paddedHello("a.example", padding: ClientHelloParser.maximumHandshakeLength - 110)
        #expect(largest.count <= ClientHelloParser.maximumHandshakeLength)
        guard case .clientHello = ClientHelloParser.parse(recordStream: Build.records(largest)) else {
            Issue.record("a hello of \(largest.count) bytes is within the bound")
            return
        }
        // The same message in 1-byte records needs six times its size of stream: past the stream bound.
        #expect(ClientHelloParser.parse(recordStream: Build.records(largest, recordSize: 1)) == .tooLarge(declaredLength: largest.count))
    }

    /// What an incomplete stream says it needs is never more than the whole
    /// stream (a larger answer would wait for bytes that never come) and
    /// always more than it has, whatever the record sizes.
    @Test func bytesNeededAreALowerBound() {
        let message = Self.paddedHello("www.example.org", padding: 3_000)
        for recordSize in [16_384, 700, 64, 7, 1] {
            let stream = Build.records(message, recordSize: recordSize)
            var prefixLength = 0
            var parses = 0
            while prefixLength < stream.count {
                parses += 1
                guard case .needMoreData(let total) = ClientHelloParser.parse(recordStream: Array(stream[0..<prefixLength])) else {
                    Issue.record("records of \(recordSize): a prefix of \(prefixLength) bytes is no incomplete hello")
                    break
                }
                let needed = total ?? prefixLength + 1
                #expect(needed > prefixLength && needed <= stream.count, "records of \(recordSize), prefix \(prefixLength): needs \(needed) of \(stream.count)")
                // As filter-data does: parse again once that many bytes are in.
                prefixLength = max(needed, prefixLength + 1)
            }
            guard case .clientHello = ClientHelloParser.parse(recordStream: stream) else {
                Issue.record("records of \(recordSize): the whole stream is a hello")
                continue
            }
            // Small records do not make it parse once per record.
            #expect(parses < 80, "records of \(recordSize): parsed \(parses) times")
        }
    }

    /// The same for every prefix of streams whose records have mixed sizes.
    @Test func bytesNeededAreALowerBoundForEveryPrefix() {
        let message = Self.paddedHello("www.example.org", padding: 1_200)
        for seed: UInt64 in 1...4 {
            var generator = SplitMix64(state: seed)
            var stream: [UInt8] = []
            var start = 0
            while start < message.count {
                let end = min(message.count, start + [1, 2, 5, 40, 300, 2_000].randomElement(using: &generator)!)
                stream += Build.records(Array(message[start..<end]))
                start = end
            }
            for prefixLength in 0..<stream.count {
                guard case .needMoreData(let total) = ClientHelloParser.parse(recordStream: Array(stream[0..<prefixLength])) else {
                    Issue.record("seed \(seed): a prefix of \(prefixLength) bytes is no incomplete hello")
                    break
                }
                let needed = total ?? prefixLength + 1
                guard needed > prefixLength && needed <= stream.count else {
                    Issue.record("seed \(seed), prefix \(prefixLength): needs \(needed) of \(stream.count)")
                    break
                }
            }
            guard case .clientHello = ClientHelloParser.parse(recordStream: stream) else {
                Issue.record("seed \(seed): the whole stream is a hello")
                continue
            }
        }
    }

    @Test func legacyESNIWithoutName() {
        let esni = Build.clientHello(extensions: [(0xffce, [1, 2, 3, 4])])
        guard case .clientHello(let info) = ClientHelloParser.parse(handshakeMessage: esni) else {
            Issue.record("expected a ClientHello")
            return
        }
        #expect(info.serverName == nil)
        #expect(info.hasLegacyEncryptedSNI)
    }

    @Test func hugeClientHelloWithoutSNI() {
        // Like tls_with_huge_ch: 11 KB of padding (extension 21), no SNI, across records.
        let huge = Build.clientHello(extensions: [(21, [UInt8](repeating: 0, count: 11_000))])
        guard case .clientHello(let info) = ClientHelloParser.parse(recordStream: Build.records(huge, recordSize: 4096)) else {
            Issue.record("expected a ClientHello")
            return
        }
        #expect(info.serverName == nil)
        #expect(info.handshakeLength > 11_000)
    }

    @Test func realCaptures() throws {
        guard TestData.isAvailable else { return }
        // ECH with outer SNI.
        let ech = try NameExtractor.run(TestData.bytes("ndpi/pcap/tls_ech.pcapng"))
        #expect(ech.byKind["tls_client_hello_sni"] == ["performance.radar.cloudflare.com"])
        // ESNI only: no name.
        let esni = try NameExtractor.run(TestData.bytes("ndpi/pcap/encrypted_sni.pcap"))
        #expect(esni.byKind["tls_client_hello_sni"] == nil)
        // 11 KB ClientHello over 12 segments, no SNI.
        let huge = try NameExtractor.run(TestData.bytes("ndpi/pcap/tls_with_huge_ch.pcapng"))
        #expect(huge.byKind["tls_client_hello_sni"] == nil)
        let both = try NameExtractor.run(TestData.bytes("ndpi/pcap/tls_esni_sni_both.pcap"))
        #expect(both.byKind["tls_client_hello_sni"]?.count == 2)
    }
}
