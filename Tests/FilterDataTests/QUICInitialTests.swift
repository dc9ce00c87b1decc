import Testing
@testable import FilterData
import HallpassWire
import HallpassIPC

/// RFC 9001 Appendix A.2: the client Initial (DCID 8394c8f03e515708, packet number 2, SNI example.com).
let rfc9001ClientInitial = [UInt8](hex: """
c000000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11d242b123dc9bd8bab936b47d92ec356c0bab7df5976d27cd449f63300099f399
1c260ec4c60d17b31f8429157bb35a1282a643a8d2262cad67500cadb8e7378c8eb7539ec4d4905fed1bee1fc8aafba17c750e2c7ace01e6005f80fcb7df6212
30c83711b39343fa028cea7f7fb5ff89eac2308249a02252155e2347b63d58c5457afd84d05dfffdb20392844ae812154682e9cf012f9021a6f0be17ddd0c208
4dce25ff9b06cde535d0f920a2db1bf362c23e596d11a4f5a6cf3948838a3aec4e15daf8500a6ef69ec4e3feb6b1d98e610ac8b7ec3faf6ad760b7bad1db4ba3
485e8a94dc250ae3fdb41ed15fb6a8e5eba0fc3dd60bc8e30c5c4287e53805db059ae0648db2f64264ed5e39be2e20d82df566da8dd5998ccabdae053060ae6c
7b4378e846d29f37ed7b4ea9ec5d82e7961b7f25a9323851f681d582363aa5f89937f5a67258bf63ad6f1a0b1d96dbd4faddfcefc5266ba6611722395c906556
be52afe3f565636ad1b17d508b73d8743eeb524be22b3dcbc2c7468d54119c7468449a13d8e3b95811a198f3491de3e7fe942b330407abf82a4ed7c1b311663a
c69890f4157015853d91e923037c227a33cdd5ec281ca3f79c44546b9d90ca00f064c99e3dd97911d39fe9c5d0b23a229a234cb36186c4819e8b9c5927726632
291d6a418211cc2962e20fe47feb3edf330f2c603a9d48c0fcb5699dbfe5896425c5bac4aee82e57a85aaf4e2513e4f05796b07ba2ee47d80506f8d2c25e50fd
14de71e6c418559302f939b0e1abd576f279c4b2e0feb85c1f28ff18f58891ffef132eef2fa09346aee33c28eb130ff28f5b766953334113211996d20011a198
e3fc433f9f2541010ae17c1bf202580f6047472fb36857fe843b19f5984009ddc324044e847a4f4a0ab34f719595de37252d6235365e9b84392b061085349d73
203a4a13e96f5432ec0fd4a1ee65accdd5e3904df54c1da510b0ff20dcc0c77fcb2c0e0eb605cb0504db87632cf3d8b4dae6e705769d1de354270123cb11450e
fc60ac47683d7b8d0f811365565fd98c4c8eb936bcab8d069fc33bd801b03adea2e1fbc5aa463d08ca19896d2bf59a071b851e6c239052172f296bfb5e724047
90a2181014f3b94a4e97d117b438130368cc39dbb2d198065ae3986547926cd2162f40a29f0c3c8745c0f50fba3852e566d44575c29d39a03f0cda721984b6f4
40591f355e12d439ff150aab7613499dbd49adabc8676eef023b15b65bfc5ca06948109f23f350db82123535eb8a7433bdabcb909271a6ecbcb58b936a88cd4e
8f2e6ff5800175f113253d8fa9ca8885c2f552e657dc603f252e1a8e308f76f0be79e2fb8f5d5fbbe2e30ecadd220723c8c0aea8078cdfcb3868263ff8f09400
54da48781893a7e49ad5aff4af300cd804a6b6279ab3ff3afb64491c85194aab760d58a606654f9f4400e8b38591356fbf6425aca26dc85244259ff2b19c41b9
f96f3ca9ec1dde434da7d2d392b905ddf3d1f9af93d1af5950bd493f5aa731b4056df31bd267b6b90a079831aaf579be0a39013137aac6d404f518cfd4684064
7e78bfe706ca4cf5e9c5453e9f7cfd2b8b4c8d169a44e55c88d4a9a7f9474241e221af44860018ab0856972e194cd934
""")

/// RFC 9369 Appendix A.2: the same Initial in QUIC version 2.
let rfc9369ClientInitial = [UInt8](hex: """
d76b3343cf088394c8f03e5157080000449ea0c95e82ffe67b6abcdb4298b485dd04de806071bf03dceebfa162e75d6c96058bdbfb127cdfcbf903388e99ad04
9f9a3dd4425ae4d0992cfff18ecf0fdb5a842d09747052f17ac2053d21f57c5d250f2c4f0e0202b70785b7946e992e58a59ac52dea6774d4f03b55545243cf1a
12834e3f249a78d395e0d18f4d766004f1a2674802a747eaa901c3f10cda5500cb9122faa9f1df66c392079a1b40f0de1c6054196a11cbea40afb6ef5253cd68
18f6625efce3b6def6ba7e4b37a40f7732e093daa7d52190935b8da58976ff3312ae50b187c1433c0f028edcc4c2838b6a9bfc226ca4b4530e7a4ccee1bfa2a3
d396ae5a3fb512384b2fdd851f784a65e03f2c4fbe11a53c7777c023462239dd6f7521a3f6c7d5dd3ec9b3f233773d4b46d23cc375eb198c63301c21801f6520
bcfb7966fc49b393f0061d974a2706df8c4a9449f11d7f3d2dcbb90c6b877045636e7c0c0fe4eb0f697545460c806910d2c355f1d253bc9d2452aaa549e27a1f
ac7cf4ed77f322e8fa894b6a83810a34b361901751a6f5eb65a0326e07de7c1216ccce2d0193f958bb3850a833f7ae432b65bc5a53975c155aa4bcb4f7b2c4e5
4df16efaf6ddea94e2c50b4cd1dfe06017e0e9d02900cffe1935e0491d77ffb4fdf85290fdd893d577b1131a610ef6a5c32b2ee0293617a37cbb08b847741c3b
8017c25ca9052ca1079d8b78aebd47876d330a30f6a8c6d61dd1ab5589329de714d19d61370f8149748c72f132f0fc99f34d766c6938597040d8f9e2bb522ff9
9c63a344d6a2ae8aa8e51b7b90a4a806105fcbca31506c446151adfeceb51b91abfe43960977c87471cf9ad4074d30e10d6a7f03c63bd5d4317f68ff325ba3bd
80bf4dc8b52a0ba031758022eb025cdd770b44d6d6cf0670f4e990b22347a7db848265e3e5eb72dfe8299ad7481a408322cac55786e52f633b2fb6b614eaed18
d703dd84045a274ae8bfa73379661388d6991fe39b0d93debb41700b41f90a15c4d526250235ddcd6776fc77bc97e7a417ebcb31600d01e57f32162a8560cacc
7e27a096d37a1a86952ec71bd89a3e9a30a2a26162984d7740f81193e8238e61f6b5b984d4d3dfa033c1bb7e4f0037febf406d91c0dccf32acf423cfa1e70710
10d3f270121b493ce85054ef58bada42310138fe081adb04e2bd901f2f13458b3d6758158197107c14ebb193230cd1157380aa79cae1374a7c1e5bbcb80ee23e
06ebfde206bfb0fcbc0edc4ebec309661bdd908d532eb0c6adc38b7ca7331dce8dfce39ab71e7c32d318d136b6100671a1ae6a6600e3899f31f0eed19e3417d1
34b90c9058f8632c798d4490da4987307cba922d61c39805d072b589bd52fdf1e86215c2d54e6670e07383a27bbffb5addf47d66aa85a0c6f9f32e59d85a44dd
5d3b22dc2be80919b490437ae4f36a0ae55edf1d0b5cb4e9a3ecabee93dfc6e38d209d0fa6536d27a5d6fbb17641cde27525d61093f1b28072d111b2b4ae5f89
d5974ee12e5cf7d5da4d6a31123041f33e61407e76cffcdcfd7e19ba58cf4b536f4c4938ae79324dc402894b44faf8afbab35282ab659d13c93f70412e85cb19
9a37ddec600545473cfb5a05e08d0b209973b2172b4d21fb69745a262ccde96ba18b2faa745b6fe189cf772a9f84cbfc
""")

@Suite struct QUICInitialTests {
    let dcid = [UInt8](hex: "8394c8f03e515708")

    @Test func vectorsHaveTheRightLength() {
        #expect(rfc9001ClientInitial.count == 1200)
        #expect(rfc9369ClientInitial.count == 1200)
    }

    @Test func rfc9001InitialKeys() throws {
        let parameters = try #require(QUICInitialParser.initialParameters(for: 1))
        let keys = QUICInitialProtection.clientKeys(destinationConnectionID: dcid, parameters: parameters.protection)
        #expect(keys.iv.hexString == "fa044b2f42a3fd3b46fb255c")
        #expect(keys.key.withUnsafeBytes { Array($0) }.hexString == "1f369613dd76d5467730efcbe3b1a22d")
        #expect(keys.headerProtectionKey.withUnsafeBytes { Array($0) }.hexString == "9f50449e04a0e810283a1e9933adedd2")
    }

    @Test func rfc9369InitialKeys() throws {
        let parameters = try #require(QUICInitialParser.initialParameters(for: 0x6b33_43cf))
        let keys = QUICInitialProtection.clientKeys(destinationConnectionID: dcid, parameters: parameters.protection)
        #expect(keys.key.withUnsafeBytes { Array($0) }.hexString == "8b1a0bc121284290a29e0971b5cd045d")
        #expect(keys.iv.hexString == "91f73e2351d8fa91660e909f")
        #expect(keys.headerProtectionKey.withUnsafeBytes { Array($0) }.hexString == "45b95e15235d6f45a6b19cbcb0294ba9")
    }

    func expectExampleComInitial(_ datagram: [UInt8], version: QUICVersion) throws {
        guard case .packets(let summary) = QUICInitialParser.parse(datagram: datagram) else {
            Issue.record("not parsed: \(QUICInitialParser.parse(datagram: datagram))")
            return
        }
        let packet = try #require(summary.initials.first)
        #expect(packet.version == version)
        #expect(packet.packetNumber == 2)
        #expect(packet.destinationConnectionID == dcid)
        #expect(packet.cryptoFrames.count == 1)
        #expect(packet.cryptoFrames.first?.offset == 0)
        var assembler = QUICCryptoAssembler()
        assembler.add(packet)
        guard case .clientHello(let info) = assembler.clientHello() else {
            Issue.record("no ClientHello: \(assembler.clientHello())")
            return
        }
        #expect(info.serverName == Array("example.com".utf8))
        #expect(info.supportedVersions == [0x0304])
    }

    @Test func rfc9001ClientInitialOpens() throws {
        try expectExampleComInitial(rfc9001ClientInitial, version: .version1)
    }

    @Test func rfc9369ClientInitialOpens() throws {
        try expectExampleComInitial(rfc9369ClientInitial, version: .version2)
    }

    /// IETF and Google QUIC open Initials with the one `QUICInitialProtection`:
    /// the RFC 9001 Initial opens with its version's parameters and its own
    /// DCID, or with a key DCID when its own has another, and not with
    /// another salt; keys whose IV is not a nonce's 12 bytes open nothing
    /// (the IETF copy indexed the nonce unchecked: it trapped on such keys).
    @Test func theSharedProtectionOpensWithTheRightKeysOnly() throws {
        let bytes = rfc9001ClientInitial
        let datagram = bytes.span
        let parameters = try #require(QUICInitialParser.initialParameters(for: 1)).protection
        // The RFC's Initial: a long header of 1 + 4 + 1 + 8 + 1 bytes, no token, a 2-byte length.
        let packetNumberOffset = 1 + 4 + 1 + 8 + 1 + 1 + 2
        let end = datagram.count
        // (Spans cannot go into the test macros: each outcome is taken first.)
        let ownKeys = QUICInitialProtection.open(
            datagram, packetStart: 0, packetNumberOffset: packetNumberOffset, end: end, destinationConnectionID: dcid,
            keyConnectionIDs: [], parameters: parameters)
        let opened = try #require(ownKeys)
        #expect(opened.packetNumber == 2 && opened.keyConnectionID == dcid)
        let other: [UInt8] = [9, 9, 9, 9]
        let earlierKeys = QUICInitialProtection.open(
            datagram, packetStart: 0, packetNumberOffset: packetNumberOffset, end: end, destinationConnectionID: other,
            keyConnectionIDs: [[1], other, dcid], parameters: parameters)
        let viaKey = try #require(earlierKeys)
        #expect(viaKey.keyConnectionID == dcid && viaKey.plaintext == opened.plaintext)
        let otherSalt = QUICInitialProtection.open(
            datagram, packetStart: 0, packetNumberOffset: packetNumberOffset, end: end, destinationConnectionID: dcid,
            keyConnectionIDs: [], parameters: .version1Labels(salt: GoogleQUICParser.saltQ050))
        #expect(otherSalt == nil)
        let keys = QUICInitialProtection.clientKeys(destinationConnectionID: dcid, parameters: parameters)
        let withKeys = QUICInitialProtection.open(datagram, packetStart: 0, packetNumberOffset: packetNumberOffset, end: end, keys: keys)
        #expect(withKeys?.plaintext == opened.plaintext)
        for length in [0, 8, 11, 13] {
            var shortNonce = keys
            shortNonce.iv = [UInt8](repeating: 0, count: length)
            let outcome = QUICInitialProtection.open(datagram, packetStart: 0, packetNumberOffset: packetNumberOffset, end: end, keys: shortNonce)
            #expect(outcome == nil, "an IV of \(length) bytes")
        }
        // Too short for the sample, or an end past the bytes: nothing is read out of bounds.
        let short = QUICInitialProtection.open(datagram, packetStart: 0, packetNumberOffset: end - 19, end: end, keys: keys)
        let past = QUICInitialProtection.open(datagram, packetStart: 0, packetNumberOffset: packetNumberOffset, end: end + 1, keys: keys)
        #expect(short == nil && past == nil)
    }

    @Test func corruptedInitialFailsAuthentication() {
        var datagram = rfc9001ClientInitial
        datagram[600] ^= 1
        guard case .malformed = QUICInitialParser.parse(datagram: datagram) else {
            Issue.record("expected malformed")
            return
        }
    }

    @Test func versionNegotiationRetryShortHeaderAndUnknownVersions() {
        #expect(QUICInitialParser.parse(datagram: [0x80, 0, 0, 0, 0, 8] + dcid + [0]) == .versionNegotiation)
        #expect(QUICInitialParser.parse(datagram: [0x40, 1, 2, 3]) == .notLongHeader)
        #expect(QUICInitialParser.parse(datagram: [0xC0, 0x0a, 0x0a, 0x0a, 0x0a, 8] + dcid + [0])
            == .unsupportedVersion(QUICVersion(rawValue: 0x0a0a_0a0a)))
        // v1 Retry: type bits 11.
        #expect(QUICInitialParser.parse(datagram: [0xF0, 0, 0, 0, 1, 8] + dcid + [0] + [UInt8](repeating: 7, count: 20)) == .retry)
        // v2 Retry is type 00.
        #expect(QUICInitialParser.parse(datagram: [0xC0, 0x6b, 0x33, 0x43, 0xcf, 8] + dcid + [0] + [UInt8](repeating: 7, count: 20)) == .retry)
        #expect(QUICInitialParser.parse(datagram: []) == .malformed(reason: "empty datagram"))
    }

    @Test func coalescedHandshakePacketIsSkipped() {
        // A Handshake packet (v1 type 2) of 20 bytes after the Initial.
        let handshake: [UInt8] = [0xE0, 0, 0, 0, 1, 8] + dcid + [0, 20] + [UInt8](repeating: 0x55, count: 20)
        guard case .packets(let summary) = QUICInitialParser.parse(datagram: rfc9001ClientInitial + handshake) else {
            Issue.record("not parsed")
            return
        }
        #expect(summary.initials.count == 1)
        #expect(summary.skippedPacketCount == 1)
        // Handshake first, then the Initial.
        guard case .packets(let reversed) = QUICInitialParser.parse(datagram: handshake + rfc9001ClientInitial) else {
            Issue.record("not parsed")
            return
        }
        #expect(reversed.initials.count == 1)
    }

    @Test func everyPrefixAndMutationIsSafe() {
        for length in stride(from: 0, through: rfc9001ClientInitial.count, by: 7) {
            _ = QUICInitialParser.parse(datagram: Array(rfc9001ClientInitial.prefix(length)))
        }
        // Header bytes are where the parsing logic lives; mutate those most.
        forEachMutation(of: Array(rfc9001ClientInitial.prefix(40)) + [UInt8](repeating: 0, count: 60), rounds: 500) {
            _ = QUICInitialParser.parse(datagram: $0)
        }
        forEachMutation(of: rfc9369ClientInitial, rounds: 50) { _ = QUICInitialParser.parse(datagram: $0) }
    }

    @Test func frameWalkerHandlesAckPaddingPingCloseAndStops() {
        // PADDING, PING, ACK(type 3 with one range and ECN), CRYPTO(offset 5, "abc"), CONNECTION_CLOSE, then an unknown frame.
        let payload: [UInt8] = [0x00, 0x01, 0x03, 0x05, 0x00, 0x01, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00,
                                0x06, 0x05, 0x03, 0x61, 0x62, 0x63,
                                0x1c, 0x00, 0x00, 0x01, 0x7a,
                                0x08, 0x06, 0x00, 0x01, 0x7a]
        let frames = QUICInitialParser.cryptoFrames(in: payload.span)
        #expect(frames == [QUICCryptoFrame(offset: 5, data: Array("abc".utf8))])
        // A truncated CRYPTO frame stops quietly.
        let truncated: [UInt8] = [0x06, 0x00, 0x10, 0x61]
        #expect(QUICInitialParser.cryptoFrames(in: truncated.span).isEmpty)
        // An ACK claiming more ranges than bytes stops quietly.
        let hugeAck: [UInt8] = [0x02, 0x00, 0x00, 0x80, 0xff, 0xff, 0xff, 0x00]
        #expect(QUICInitialParser.cryptoFrames(in: hugeAck.span).isEmpty)
    }

    @Test func assemblerReassemblesOutOfOrderAndBounds() {
        let message = Build.clientHello(extensions: [Build.sniExtension("quic.example")])
        var assembler = QUICCryptoAssembler(capacity: 4096)
        let cut1 = 10, cut2 = 60
        assembler.add(QUICCryptoFrame(offset: UInt64(cut2), data: Array(message[cut2...])))
        #expect(assembler.clientHello() == .needMoreData(totalBytes: 4))
        assembler.add(QUICCryptoFrame(offset: 0, data: Array(message[..<cut1])))
        if case .needMoreData = assembler.clientHello() {} else { Issue.record("expected needMoreData") }
        // An overlapping retransmission with different bytes does not overwrite (first copy wins).
        assembler.add(QUICCryptoFrame(offset: 0, data: [UInt8](repeating: 0xEE, count: 20)))
        assembler.add(QUICCryptoFrame(offset: UInt64(cut1), data: Array(message[cut1..<cut2])))
        guard case .clientHello(let info) = assembler.clientHello() else {
            Issue.record("expected ClientHello")
            return
        }
        #expect(info.serverName == Array("quic.example".utf8))
        // Frames beyond the bound (or at absurd offsets) are dropped.
        #expect(assembler.add(QUICCryptoFrame(offset: 1 << 60, data: [1, 2, 3])) == false)
    }
}
