// The flow state machine on its own, then the inspector packet by packet:
// handshakes, tiny and shuffled segments, late packets, needRules and
// resolve, DNS per query, QUIC, peek bound, budgets and malformed bytes.
import Testing
import SharedStore
import VerdictCore
@testable import FilterData
import HallpassWire
import HallpassIPC

// MARK: - Helpers

/// A rule store built in memory from `(pattern, category)` pairs.
func makeStore(_ entries: [(String, String)]) throws -> RuleStore {
    var builder = RuleStoreBuilder()
    for (pattern, category) in entries {
        let id = try builder.category(named: category)
        builder.add(try RulePattern(pattern), category: id)
    }
    return try RuleStore(bytes: try builder.build(version: 1).bytes)
}

let blockedStore: RuleStore = try! makeStore([("blocked.example", "adult"), ("videos.example/forbidden", "adult"), ("www.ntop.org", "test")])

func inspector(policy: Policy = Policy(), settings: FlowInspectorSettings = FlowInspectorSettings()) -> FlowInspector<RuleStore> {
    FlowInspector(engine: VerdictEngine(rules: blockedStore, policy: policy), settings: settings)
}

/// The client side of one TCP connection, building its packets.
struct TCPClient {
    var clientPort = 40_000
    var serverPort = 443
    var isn: UInt32 = 0xFFFF_FF00  // wraps during the stream
    var serverISN: UInt32 = 7_000
    /// The server's IPv4 address (the client's is 10.0.0.1).
    var server: [UInt8] = [10, 0, 0, 2]

    var syn: [UInt8] {
        Build.ipv4(destination: server, protocolNumber: 6, payload: Build.tcp(sourcePort: clientPort, destinationPort: serverPort, seq: isn, flags: 0x02))
    }
    var synAck: [UInt8] {
        Build.ipv4(source: [10, 0, 0, 2], destination: [10, 0, 0, 1], protocolNumber: 6,
                   payload: Build.tcp(sourcePort: serverPort, destinationPort: clientPort, seq: serverISN, ack: isn &+ 1, flags: 0x12))
    }
    var ack: [UInt8] { data(at: 0, []) }

    /// Client data at stream offset `offset` (0 = first byte after the SYN).
    func data(at offset: Int, _ bytes: [UInt8], flags: UInt8 = 0x18) -> [UInt8] {
        Build.ipv4(destination: server, protocolNumber: 6, payload: Build.tcp(sourcePort: clientPort, destinationPort: serverPort,
                                                         seq: isn &+ 1 &+ UInt32(offset), ack: serverISN &+ 1, flags: flags, payload: bytes))
    }

    func serverData(_ bytes: [UInt8]) -> [UInt8] {
        Build.ipv4(source: [10, 0, 0, 2], destination: [10, 0, 0, 1], protocolNumber: 6,
                   payload: Build.tcp(sourcePort: serverPort, destinationPort: clientPort, seq: serverISN &+ 1, ack: isn &+ 1, flags: 0x18, payload: bytes))
    }
}

func clientHelloRecords(_ name: String, ech: Bool = false) -> [UInt8] {
    var extensions = [Build.sniExtension(name), Build.alpnExtension(["h2"])]
    if ech { extensions.append((0xfe0d, [0, 1, 2, 3])) }
    return Build.records(Build.clientHello(extensions: extensions))
}

func udpPacket(sourcePort: Int = 40_000, destinationPort: Int = 53, _ payload: [UInt8], fromServer: Bool = false) -> [UInt8] {
    if fromServer {
        return Build.ipv4(source: [10, 0, 0, 2], destination: [10, 0, 0, 1], protocolNumber: 17,
                          payload: Build.udp(sourcePort: destinationPort, destinationPort: sourcePort, payload: payload))
    }
    return Build.ipv4(protocolNumber: 17, payload: Build.udp(sourcePort: sourcePort, destinationPort: destinationPort, payload: payload))
}

func dnsResponse(_ name: String, id: Int = 0x1234) -> [UInt8] {
    var message = Build.dnsQuery(name, id: id)
    message[2] |= 0x80  // QR
    return message
}

private let second: UInt64 = 1_000_000_000

// MARK: - State machine

@Suite struct FlowStateMachineTests {
    func header(seq: UInt32, flags: TCPFlags) -> TCPSegmentHeader {
        TCPSegmentHeader(sequenceNumber: seq, acknowledgmentNumber: 0, flags: flags, window: 1000, headerLength: 20)
    }

    func step(_ machine: inout FlowStateMachine, seq: UInt32, flags: TCPFlags = [.ack, .psh], _ bytes: [UInt8]) -> FlowStep {
        machine.clientSegment(header(seq: seq, flags: flags), payload: bytes.span)
    }

    @Test func tcpWaitsThenDecidesThenRepeats() {
        var machine = FlowStateMachine.tcp()
        #expect(machine.stage == .inspecting)
        #expect(step(&machine, seq: 99, flags: .syn, []) == .awaitMoreData)
        let hello = clientHelloRecords("www.example.org")
        #expect(step(&machine, seq: 100, Array(hello[0..<10])) == .awaitMoreData)
        guard case .decide(let findings) = step(&machine, seq: 110, Array(hello[10...])) else {
            Issue.record("no decision after the whole ClientHello")
            return
        }
        #expect(findings.kind == .tls && findings.name == "www.example.org" && findings.host?.description == "www.example.org")
        let drop = Decision(.drop, Reason(source: .category, category: "x", rule: "example.org"))
        #expect(machine.apply(drop, findings: findings) == .decided)
        #expect(machine.decision?.verdict == .drop && machine.decision?.reason.source == .category)
        // Anything later repeats the decision, whatever it carries.
        guard case .repeatDecision(let judged) = step(&machine, seq: 100, clientHelloRecords("allowed.example")) else {
            Issue.record("a decided flow must repeat its decision")
            return
        }
        #expect(judged == DecidedFlow(verdict: .drop, kind: .tls, source: .category))
        guard case .repeatDecision = machine.serverPacket() else {
            Issue.record("server packets of a decided flow repeat too")
            return
        }
    }

    @Test func needRulesHoldsUntilRulesChange() {
        var machine = FlowStateMachine.tcp()
        guard case .decide(let first) = step(&machine, seq: 1, clientHelloRecords("new.example")) else {
            Issue.record("expected a decision")
            return
        }
        #expect(machine.apply(Decision(.needRules, Reason(source: .unknownHost)), findings: first) == .waitingForRules)
        #expect(step(&machine, seq: 1, [1, 2, 3]) == .holdForRules(machine.findings))
        guard case .decide(let findings)? = machine.rulesChanged() else {
            Issue.record("rulesChanged must ask again")
            return
        }
        #expect(findings.name == "new.example")
        #expect(machine.apply(Decision(.allow, Reason(source: .unknownHost)), findings: findings) == .decided)
        #expect(machine.rulesChanged() == nil, "a decided flow ignores new rules")
    }

    @Test func neitherTLSNorHTTPIsNamelessAtOnce() {
        var machine = FlowStateMachine.tcp()
        #expect(step(&machine, seq: 1, Array("220 mail.example.com ESMTP ready\r\n".utf8)) == .decide(.nothing))
    }

    @Test func clientResetEndsTheSearch() {
        var machine = FlowStateMachine.tcp()
        #expect(step(&machine, seq: 1, Array(clientHelloRecords("a.example").prefix(20))) == .awaitMoreData)
        #expect(step(&machine, seq: 21, flags: .rst, []) == .decide(FlowFindings(kind: .tls)))
    }

    @Test func finDecidesOnlyOnceTheBytesBeforeItAreIn() {
        var machine = FlowStateMachine.tcp()
        let hello = clientHelloRecords("fin.example")
        #expect(step(&machine, seq: 0, flags: .syn, []) == .awaitMoreData)
        // The FIN comes after the last segment, which arrives late: no decision until it does.
        #expect(step(&machine, seq: 1, Array(hello[0..<20])) == .awaitMoreData)
        #expect(step(&machine, seq: 1 + UInt32(hello.count), flags: [.fin, .ack], []) == .awaitMoreData)
        guard case .decide(let findings) = step(&machine, seq: 21, Array(hello[20...])) else {
            Issue.record("the gap filled: the name is there")
            return
        }
        #expect(findings.name == "fin.example")
    }

    @Test func dnsQueriesAreJudgedOneByOne() {
        var machine = FlowStateMachine.dns()
        let first = FlowFindings(kind: .dns, wireName: Array("a.example".utf8))
        #expect(machine.dnsQuery(Array("a.example".utf8)) == .decide(first))
        #expect(machine.apply(Decision(.drop, Reason(source: .localDenyList, rule: "a.example")), findings: first) == .decided)
        #expect(machine.decision == nil, "a DNS flow keeps no final decision")
        guard case .decide(let second) = machine.dnsQuery(Array("b.example".utf8)) else {
            Issue.record("every query asks again")
            return
        }
        #expect(second.name == "b.example")
        machine.apply(Decision(.allow, Reason(source: .unknownHost)), findings: second)
        guard case .repeatDecision(let judged) = machine.serverPacket() else {
            Issue.record("a response gets the latest query's decision")
            return
        }
        #expect(judged.verdict == .allow && machine.findings.name == "a.example")
    }

    @Test func quicShortHeaderIsNameless() {
        var machine = FlowStateMachine.quic()
        let short: [UInt8] = [0x40] + [UInt8](repeating: 7, count: 30)
        #expect(machine.clientDatagram(short.span) == .decide(FlowFindings(kind: .none)))
    }

    @Test func quicWaitsForAnOpenableInitialWithinABound() {
        var machine = FlowStateMachine.quic(limits: FlowLimits(quicDatagramBound: 3))
        // A greased version: keys unknown, the client may still retry with one we know.
        var greased = rfc9001ClientInitial
        greased[1...4] = [0x0a, 0x0a, 0x0a, 0x0a]
        #expect(machine.clientDatagram(greased.span) == .awaitMoreData)
        #expect(machine.clientDatagram(greased.span) == .awaitMoreData)
        #expect(machine.clientDatagram(greased.span) == .decide(FlowFindings(kind: .quic)))

        var fresh = FlowStateMachine.quic()
        #expect(fresh.clientDatagram(greased.span) == .awaitMoreData)
        let initial = rfc9001ClientInitial
        guard case .decide(let findings) = fresh.clientDatagram(initial.span) else {
            Issue.record("the v1 Initial after a greased one must be read")
            return
        }
        #expect(findings.kind == .quic && findings.name == "example.com")
    }
}

// MARK: - Inspector

@Suite struct FlowInspectorTests {
    @Test func tlsHandshakeDecidesOnTheClientHelloAndRepeatsAfterwards() throws {
        var inspector = inspector()
        let client = TCPClient()
        let first = inspector.inspect(client.syn, now: 1)
        #expect(first.verdict == .needMoreData && first.createdFlow && first.finality == .undecided)
        #expect(first.flow == FlowKey(protocolNumber: 6, source: .v4(0x0A00_0001), sourcePort: 40_000, destination: .v4(0x0A00_0002), destinationPort: 443))
        let synAck = inspector.inspect(client.synAck, now: 2)
        #expect(synAck.verdict == .needMoreData && synAck.direction == .serverToClient && synAck.flow == first.flow && !synAck.createdFlow)
        #expect(inspector.inspect(client.ack, now: 3).verdict == .needMoreData)
        let hello = inspector.inspect(client.data(at: 0, clientHelloRecords("www.blocked.example", ech: true)), uid: 1000, gid: 100, now: 4)
        #expect(hello.verdict == .drop && hello.finality == .firstDecision)
        #expect(hello.decision.reason.category == "adult" && hello.decision.reason.rule == "blocked.example")
        #expect(hello.kind == .tls && hello.findings.name == "www.blocked.example")
        #expect(hello.facts.host?.description == "www.blocked.example" && hello.facts.nameSource == .tlsServerName)
        #expect(hello.facts.encryptedClientHello && hello.facts.uid == 1000 && hello.facts.gid == 100)
        #expect(hello.facts.destination == .v4(0x0A00_0002) && hello.facts.destinationPort == 443 && hello.facts.transport == .tcp)
        let late = inspector.inspect(client.data(at: 600, [1, 2, 3]), now: 5)
        // A late packet gets the decision (and its kind); what it was made on went with the first.
        #expect(late.verdict == .drop && late.finality == .repeatedDecision && late.kind == .tls)
        #expect(late.decision.reason.source == .category && late.facts.destination == hello.facts.destination)
        let reply = inspector.inspect(client.serverData([22, 3, 3, 0, 1, 2]), now: 6)
        #expect(reply.verdict == .drop && reply.direction == .serverToClient && reply.finality == .repeatedDecision)
        let counters = inspector.counters
        #expect(counters.packets == 6 && counters.flowsCreated == 1 && counters.flowDecisions == 1)
        #expect(counters.repeatedDecisions == 2 && counters.neededMoreData == 3 && counters.dropped == 3)
    }

    @Test func aSynOnADecidedFlowStartsANewOneJudgedOnItsOwnName() {
        var inspector = inspector()
        let first = TCPClient()
        _ = inspector.inspect(first.syn, now: 1)
        let allowed = inspector.inspect(first.data(at: 0, clientHelloRecords("www.allowed.example")), now: 2)
        #expect(allowed.verdict == .allow && allowed.finality == .firstDecision)
        // Without a SYN, another ClientHello on the same ports is a late packet of the decided flow.
        let late = inspector.inspect(first.data(at: 0, clientHelloRecords("www.blocked.example")), now: 3)
        #expect(late.verdict == .allow && late.finality == .repeatedDecision)
        // The same ports reused by a new connection: the kernel queues its SYN (KernelRules), and the
        // new connection is judged on its own ClientHello.
        let second = TCPClient(isn: 0x1234_5678)
        let syn = inspector.inspect(second.syn, now: 4)
        #expect(syn.verdict == .needMoreData && syn.createdFlow && syn.finality == .undecided)
        let blocked = inspector.inspect(second.data(at: 0, clientHelloRecords("www.blocked.example")), now: 5)
        #expect(blocked.verdict == .drop && blocked.finality == .firstDecision && blocked.findings.name == "www.blocked.example")
        // A SYN of a flow still being inspected (a retransmission) changes nothing.
        let third = TCPClient(clientPort: 40_001)
        _ = inspector.inspect(third.syn, now: 6)
        _ = inspector.inspect(third.data(at: 0, Array(clientHelloRecords("www.blocked.example")[0..<10])), now: 7)
        #expect(!inspector.inspect(third.syn, now: 8).createdFlow)
        #expect(inspector.counters.reopenedFlows == 1 && inspector.counters.flowsCreated == 3)
    }

    @Test func oneByteSegmentsInShuffledOrderStillShowTheName() {
        let hello = clientHelloRecords("www.blocked.example")
        for seed in UInt64(1)...5 {
            var inspector = inspector()
            let client = TCPClient(clientPort: 40_000 + Int(seed))
            #expect(inspector.inspect(client.syn, now: 0).verdict == .needMoreData)
            var offsets = Array(0..<hello.count)
            var generator = SplitMix64(state: seed)
            offsets.shuffle(using: &generator)
            var verdicts: [Verdict] = []
            for (index, offset) in offsets.enumerated() {
                let inspection = inspector.inspect(client.data(at: offset, [hello[offset]]), now: UInt64(index + 1))
                verdicts.append(inspection.verdict)
            }
            // Every byte but the last one to arrive passes undecided; the last completes the name.
            #expect(verdicts.dropLast().allSatisfy { $0 == .needMoreData }, "seed \(seed)")
            #expect(verdicts.last == .drop, "seed \(seed)")
        }
    }

    @Test func outOfOrderSegmentsAndRetransmissions() {
        var inspector = inspector()
        let client = TCPClient()
        let hello = clientHelloRecords("www.ntop.org")
        _ = inspector.inspect(client.syn, now: 0)
        #expect(inspector.inspect(client.data(at: 100, Array(hello[100...])), now: 1).verdict == .needMoreData)
        // A retransmission of the later part with other bytes does not change what was seen.
        #expect(inspector.inspect(client.data(at: 100, [UInt8](repeating: 0x41, count: hello.count - 100)), now: 2).verdict == .needMoreData)
        let decided = inspector.inspect(client.data(at: 0, Array(hello[0..<100])), now: 3)
        #expect(decided.verdict == .drop && decided.findings.name == "www.ntop.org")
    }

    @Test func midStreamFlowTakesTheDirectionOfItsFirstPacket() {
        var inspector = inspector()
        let client = TCPClient()
        // Application data, no handshake seen: neither TLS ClientHello nor HTTP.
        let inspection = inspector.inspect(client.data(at: 5000, [23, 3, 3, 0, 2, 0xAA, 0xBB]), now: 0)
        #expect(inspection.createdFlow && inspection.finality == .firstDecision && inspection.verdict == .allow)
        #expect(inspection.decision.reason.source == .noName && inspection.flow?.sourcePort == 40_000)
    }

    @Test func synAckFirstMakesTheReceiverTheClient() {
        var inspector = inspector()
        let client = TCPClient()
        let inspection = inspector.inspect(client.synAck, now: 0)
        #expect(inspection.createdFlow && inspection.direction == .serverToClient && inspection.flow?.sourcePort == 40_000)
        #expect(inspector.inspect(client.data(at: 0, clientHelloRecords("blocked.example")), now: 1).verdict == .drop)
    }

    @Test func httpHostAndPathAreJudged() {
        var inspector = inspector()
        let client = TCPClient(serverPort: 80)
        _ = inspector.inspect(client.syn, now: 0)
        let request = Array("GET /forbidden/clip HTTP/1.1\r\nHost: Videos.Example:80\r\nUser-Agent: t\r\n\r\n".utf8)
        #expect(inspector.inspect(client.data(at: 0, Array(request[0..<30])), now: 1).verdict == .needMoreData)
        let decided = inspector.inspect(client.data(at: 30, Array(request[30...])), now: 2)
        #expect(decided.verdict == .drop && decided.kind == .http)
        #expect(decided.findings.name == "videos.example" && decided.facts.path == "/forbidden/clip")
        #expect(decided.decision.reason.rule == "videos.example/forbidden")

        var other = inspector
        let allowed = TCPClient(clientPort: 40_001, serverPort: 80)
        _ = other.inspect(allowed.syn, now: 3)
        let fine = other.inspect(allowed.data(at: 0, Array("GET /ok HTTP/1.1\r\nHost: videos.example\r\n\r\n".utf8)), now: 4)
        #expect(fine.verdict == .allow && fine.decision.reason.source == .unknownHost)
    }

    @Test func lateAndOtherPacketsNeverOverturnADecision() {
        var inspector = inspector()
        let client = TCPClient()
        _ = inspector.inspect(client.syn, now: 0)
        #expect(inspector.inspect(client.data(at: 0, clientHelloRecords("www.blocked.example")), now: 1).verdict == .drop)
        // New rules that know nothing of the name: new flows are allowed, the old one stays blocked.
        inspector.replaceEngine(VerdictEngine(rules: try! makeStore([]), policy: Policy()))
        for offset in [0, 1, 500] {
            let late = inspector.inspect(client.data(at: offset, clientHelloRecords("allowed.example")), now: 2)
            #expect(late.verdict == .drop && late.finality == .repeatedDecision)
        }
        #expect(inspector.resolve(flow: (try! IPPacketParser.parse(client.syn)).flowKey!, now: 3) == nil)
        let fresh = TCPClient(clientPort: 41_000)
        _ = inspector.inspect(fresh.syn, now: 4)
        #expect(inspector.inspect(fresh.data(at: 0, clientHelloRecords("www.blocked.example")), now: 5).verdict == .allow)
    }

    @Test func needRulesHoldsTheFlowUntilResolved() throws {
        var inspector = inspector(policy: Policy(unknown: .ask))
        let client = TCPClient()
        _ = inspector.inspect(client.syn, now: 0)
        let asked = inspector.inspect(client.data(at: 0, clientHelloRecords("new.example")), now: 1)
        #expect(asked.verdict == .needRules && asked.finality == .undecided && asked.findings.name == "new.example")
        let flow = try #require(asked.flow)
        #expect(inspector.table.stage(of: try #require(inspector.table.slot(for: flow))) == .waitingForRules)
        // Retransmissions while waiting are held too.
        #expect(inspector.inspect(client.data(at: 0, clientHelloRecords("new.example")), now: 2).verdict == .needRules)
        // Same rules: still needRules.
        #expect(inspector.resolve(flow: flow, now: 3)?.verdict == .needRules)
        // filter-control answered: the name is now in a blocked category.
        inspector.replaceEngine(VerdictEngine(rules: try makeStore([("new.example", "adult")]), policy: Policy(unknown: .ask)))
        let resolved = try #require(inspector.resolveWaitingFlows(now: 4).first)
        #expect(resolved.verdict == .drop && resolved.finality == .firstDecision && resolved.flow == flow)
        #expect(inspector.inspect(client.data(at: 0, [1]), now: 5).finality == .repeatedDecision)
        #expect(inspector.resolveWaitingFlows(now: 6).isEmpty)
    }

    @Test func dnsQueriesOnOneFlowAreJudgedOneByOne() {
        var inspector = inspector()
        let first = inspector.inspect(udpPacket(Build.dnsQuery("blocked.example")), now: 0)
        #expect(first.verdict == .drop && first.finality == .packetDecision && first.kind == .dns && first.createdFlow)
        #expect(first.facts.nameSource == .dnsQuestion && first.facts.transport == .udp)
        let second = inspector.inspect(udpPacket(Build.dnsQuery("Wikipedia.ORG", id: 2)), now: 1)
        #expect(second.verdict == .allow && second.finality == .packetDecision && !second.createdFlow)
        #expect(second.findings.name == "wikipedia.org")
        let third = inspector.inspect(udpPacket(Build.dnsQuery("www.blocked.example", id: 3)), now: 2)
        #expect(third.verdict == .drop)
        let response = inspector.inspect(udpPacket(dnsResponse("www.blocked.example", id: 3), fromServer: true), now: 3)
        #expect(response.direction == .serverToClient && response.verdict == .drop && response.finality == .packetDecision)
        #expect(inspector.counters.queryDecisions == 3 && inspector.counters.flowsCreated == 1)
    }

    @Test func aDNSResponseSeenFirstMakesItsReceiverTheClient() {
        var inspector = inspector()
        let response = inspector.inspect(udpPacket(dnsResponse("www.l.google.com"), fromServer: true), now: 0)
        #expect(response.createdFlow && response.direction == .serverToClient && response.flow?.destinationPort == 53)
        let query = inspector.inspect(udpPacket(Build.dnsQuery("blocked.example")), now: 1)
        #expect(!query.createdFlow && query.verdict == .drop)
    }

    @Test func unreadableDNSQueryIsNameless() {
        var inspector = inspector(policy: Policy(noName: .block))
        var query = Build.dnsQuery("www.allyourbase.cn")
        query[17] = 0x04  // a control byte inside the second label
        let inspection = inspector.inspect(udpPacket(query), now: 0)
        #expect(inspection.verdict == .drop && inspection.decision.reason.source == .noName && inspection.kind == .dns)
    }

    @Test func quicInitialIsOpenedAndJudged() {
        var inspector = inspector()
        let store = try! makeStore([("example.com", "test")])
        inspector.replaceEngine(VerdictEngine(rules: store, policy: Policy()))
        let inspection = inspector.inspect(udpPacket(sourcePort: 50_000, destinationPort: 443, rfc9001ClientInitial), now: 0)
        #expect(inspection.verdict == .drop && inspection.kind == .quic && inspection.findings.name == "example.com")
        #expect(inspection.facts.nameSource == .quicServerName && inspection.finality == .firstDecision)
        // A short-header packet later is a late packet of a decided flow.
        let later = inspector.inspect(udpPacket(sourcePort: 50_000, destinationPort: 443, [0x41, 1, 2, 3, 4, 5]), now: 1)
        #expect(later.verdict == .drop && later.finality == .repeatedDecision)
    }

    @Test func aNewQUICConnectionOnADecidedFlowsPortsIsJudgedAgain() {
        let store = try! makeStore([("example.com", "test")])
        var inspector = FlowInspector(engine: VerdictEngine(rules: store, policy: Policy()))
        // A datagram that shows no name is allowed (noName: allow) and decides the flow...
        let junk = inspector.inspect(udpPacket(sourcePort: 50_010, destinationPort: 443, [0x23] + [UInt8](repeating: 0, count: 47)), now: 0)
        #expect(junk.verdict == .allow && junk.finality == .firstDecision)
        // ... but a QUIC Initial from the same port opens a connection of its own, judged by its name.
        let initial = inspector.inspect(udpPacket(sourcePort: 50_010, destinationPort: 443, rfc9001ClientInitial), now: 1)
        #expect(initial.verdict == .drop && initial.finality == .firstDecision && initial.findings.name == "example.com")
        #expect(inspector.counters.reopenedQUICFlows == 1)
        // A later Initial of the connection (under the server's connection ID, so it does not
        // open with its own keys) and a short-header packet get the decision.
        var later = rfc9001ClientInitial
        later[6] ^= 0x01  // another Destination Connection ID
        #expect(inspector.inspect(udpPacket(sourcePort: 50_010, destinationPort: 443, later), now: 2).finality == .repeatedDecision)
        #expect(inspector.inspect(udpPacket(sourcePort: 50_010, destinationPort: 443, [0x41, 1, 2, 3, 4, 5]), now: 3).finality == .repeatedDecision)
        #expect(inspector.counters.reopenedQUICFlows == 1)
        // The first Initial sent again is judged again, to the same decision.
        let again = inspector.inspect(udpPacket(sourcePort: 50_010, destinationPort: 443, rfc9001ClientInitial), now: 4)
        #expect(again.verdict == .drop && again.finality == .firstDecision)
        #expect(inspector.counters.reopenedQUICFlows == 2)
    }

    @Test func laterInitialsUnderTheOriginalConnectionIDKeepTheDecision() {
        // A server may keep the client's connection ID (quiche does, for Chrome's 8-byte
        // IDs): the client's later Initials then open with their own keys, but carry ACKs,
        // not the ClientHello. They must not start the flow over.
        let dcid: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let hello = Build.clientHello(extensions: [Build.sniExtension("fine.example")])
        var inspector = inspector(policy: Policy(blockedCategories: .only(["adult"])))
        let first = inspector.inspect(udpPacket(sourcePort: 50_020, destinationPort: 443,
                                                QUICSealing.initial(frames: QUICSealing.cryptoFrame(offset: 0, hello), dcid: dcid)), now: 0)
        #expect(first.verdict == .allow && first.findings.name == "fine.example" && first.finality == .firstDecision)
        let ack = inspector.inspect(udpPacket(sourcePort: 50_020, destinationPort: 443,
                                              QUICSealing.initial(frames: QUICSealing.ackFrame, dcid: dcid, packetNumber: 1)), now: 1)
        #expect(ack.verdict == .allow && ack.finality == .repeatedDecision)
        // CRYPTO past offset 0 (the rest of a ClientHello sent again) does not either.
        let rest = inspector.inspect(udpPacket(sourcePort: 50_020, destinationPort: 443,
                                               QUICSealing.initial(frames: QUICSealing.cryptoFrame(offset: 40, Array(hello[40...])), dcid: dcid, packetNumber: 2)), now: 2)
        #expect(rest.finality == .repeatedDecision)
        #expect(inspector.counters.reopenedQUICFlows == 0)
        // A new connection under the same connection ID, with a blocked name: judged on it.
        let other = Build.clientHello(extensions: [Build.sniExtension("www.blocked.example")])
        let reused = inspector.inspect(udpPacket(sourcePort: 50_020, destinationPort: 443,
                                                 QUICSealing.initial(frames: QUICSealing.cryptoFrame(offset: 0, other), dcid: dcid)), now: 3)
        #expect(reused.verdict == .drop && reused.finality == .firstDecision && reused.findings.name == "www.blocked.example")
    }

    @Test func googleQUICsLaterPacketsKeepTheDecision() {
        // Q046 carries its version tag in every long-header packet: only a handshake piece at offset 0 starts over.
        var inspector = inspector()
        let message = GoogleQUICTests.chlo([("PAD\u{0}", [0x2D, 0x2D]), ("SNI\u{0}", Array("fine.example".utf8))])
        let first = inspector.inspect(udpPacket(sourcePort: 50_030, destinationPort: 443, GoogleQUICTests.q046Packet(message)), now: 0)
        #expect(first.verdict == .allow && first.findings.name == "fine.example")
        let later = inspector.inspect(udpPacket(sourcePort: 50_030, destinationPort: 443, GoogleQUICTests.q046Packet(message, offset: 1_024)), now: 1)
        #expect(later.finality == .repeatedDecision)
    }

    @Test func otherUDPIsJudgedAtOnceWithoutAName() {
        var inspector = inspector(policy: Policy(noName: .block))
        let inspection = inspector.inspect(udpPacket(sourcePort: 5000, destinationPort: 123, [0x23] + [UInt8](repeating: 0, count: 47)), now: 0)
        #expect(inspection.verdict == .drop && inspection.kind == FlowKind.none && inspection.finality == .firstDecision)
    }

    @Test func peekBoundReachedWithoutANameAppliesNoName() {
        var settings = FlowInspectorSettings()
        settings.limits.streamPeekBound = 256
        var inspector = inspector(policy: Policy(noName: .block), settings: settings)
        let client = TCPClient(serverPort: 80)
        _ = inspector.inspect(client.syn, now: 0)
        // An HTTP request line that never ends, sent in 64-byte pieces.
        let line = Array("GET /".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 400)
        var verdicts: [Verdict] = []
        for start in stride(from: 0, to: line.count, by: 64) {
            verdicts.append(inspector.inspect(client.data(at: start, Array(line[start..<min(line.count, start + 64)])), now: 1).verdict)
        }
        #expect(verdicts.prefix(3).allSatisfy { $0 == .needMoreData })
        #expect(verdicts[3] == .drop, "the fourth piece fills the 256-byte bound")
        #expect(verdicts.dropFirst(4).allSatisfy { $0 == .drop })

        // A ClientHello larger than the bound is still read whole, and judged by its name.
        let huge = Build.records(Build.clientHello(extensions: [(21, [UInt8](repeating: 0, count: 600)), Build.sniExtension("www.blocked.example")]))
        let tls = TCPClient(clientPort: 40_002)
        _ = inspector.inspect(tls.syn, now: 2)
        let start = inspector.inspect(tls.data(at: 0, Array(huge[0..<20])), now: 3)
        #expect(start.verdict == .needMoreData, "\(start.decision) \(start.kind)")
        let end = inspector.inspect(tls.data(at: 20, Array(huge[20...])), now: 3)
        #expect(end.verdict == .drop && end.decision.reason.source == .category && end.kind == .tls && end.findings.name == "www.blocked.example")
    }

    /// A ClientHello grown past the 16 KiB peek bound by a 20 KB extension, in
    /// two records and the segments of a 1,500-byte path, as a student's own
    /// client can send it (servers accept it): judged by its name.
    @Test func aPaddedClientHelloIsJudgedByItsName() {
        for (name, verdict) in [("www.blocked.example", Verdict.drop), ("www.allowed.example", .allow)] {
            var inspector = inspector(policy: Policy(blockedCategories: .only(["adult"])))
            let client = TCPClient()
            let stream = Build.records(TLSClientHelloTests.paddedHello(name))
            #expect(stream.count > StreamPeek.defaultCapacity)
            _ = inspector.inspect(client.syn, now: 0)
            var last: Inspection?
            for start in stride(from: 0, to: stream.count, by: 1_448) {
                let inspection = inspector.inspect(client.data(at: start, Array(stream[start..<min(stream.count, start + 1_448)])), now: 1)
                if start + 1_448 < stream.count {
                    #expect(inspection.verdict == .needMoreData, "\(name): segment at \(start)")
                    #expect(inspector.table.largeHelloCount == 1)
                }
                last = inspection
            }
            #expect(last?.verdict == verdict && last?.kind == .tls && last?.findings.name == name, "\(name): \(String(describing: last?.decision))")
            #expect(inspector.table.largeHelloCount == 0 && inspector.table.inspectingCount == 0)
        }
    }

    /// The same hello in one packet larger than the peek bound (the queue hands
    /// over GSO packets of up to 64 KiB; a large MSS does the same): its bytes
    /// past the bound are kept, and it is judged by its name.
    @Test func aPaddedClientHelloInOnePacketIsJudgedByItsName() {
        for (name, verdict) in [("www.blocked.example", Verdict.drop), ("www.allowed.example", .allow)] {
            var inspector = inspector(policy: Policy(blockedCategories: .only(["adult"])))
            let client = TCPClient()
            let stream = Build.records(TLSClientHelloTests.paddedHello(name))
            _ = inspector.inspect(client.syn, now: 0)
            let inspection = inspector.inspect(client.data(at: 0, stream), now: 1)
            #expect(inspection.verdict == verdict && inspection.kind == .tls && inspection.findings.name == name, "\(name): \(inspection.decision)")
        }
        // Not a TLS stream: the bound holds (an HTTP request head past it is judged on what it showed).
        var inspector = inspector(policy: Policy(noName: .block))
        let client = TCPClient(serverPort: 80)
        _ = inspector.inspect(client.syn, now: 0)
        let head = Array("GET /".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 20_000)
        let inspection = inspector.inspect(client.data(at: 0, head), now: 1)
        #expect(inspection.verdict == .drop && inspection.kind == .http && inspector.table.largeHelloCount == 0)
    }

    /// A hello that declares more than 64 KiB, and one whose bytes past the peek
    /// bound came before the ones that declare its size, are never read: blocked
    /// as a way around the filter (`bypass.tunnels`), allowed where it allows them.
    @Test func aHelloTooLargeToReadIsABypass() {
        let tooLarge = Build.records(TLSClientHelloTests.paddedHello("www.allowed.example", padding: 70_000), recordSize: 16_384)
        for tunnels in [BypassPolicy.Action.block, .allow] {
            var policy = Policy(blockedCategories: .only(["adult"]))
            policy.bypass.tunnels = tunnels
            var inspector = inspector(policy: policy)
            let client = TCPClient()
            _ = inspector.inspect(client.syn, now: 0)
            let first = inspector.inspect(client.data(at: 0, Array(tooLarge[0..<1_448])), now: 1)
            #expect(first.kind == .oversizedHello && first.finality == .firstDecision)
            if tunnels == .block {
                #expect(first.verdict == .drop && first.decision.reason.source == .bypass)
                #expect(first.decision.reason.category == "tunnels" && first.decision.reason.rule == "oversizedHello")
            } else {
                // Left to the rules: no name, so policy.noName (allow by default).
                #expect(first.verdict == .allow && first.decision.reason.source == .noName)
            }

            // The end of a 20 KB hello first, then its start: the end went by unread.
            let padded = Build.records(TLSClientHelloTests.paddedHello("www.allowed.example"))
            let reordered = TCPClient(clientPort: 40_001)
            _ = inspector.inspect(reordered.syn, now: 2)
            let tail = inspector.inspect(reordered.data(at: 17_000, Array(padded[17_000...])), now: 3)
            #expect(tail.verdict == .needMoreData)
            let head = inspector.inspect(reordered.data(at: 0, Array(padded[0..<1_448])), now: 3)
            #expect(head.kind == .oversizedHello && head.verdict == (tunnels == .block ? .drop : .allow))
        }
    }

    /// At most `maximumLargeHelloFlows` flows read a large hello at once; one
    /// more is judged as a hello not read. A flow that finishes frees its place.
    @Test func largeHellosAreBoundedInNumber() {
        var settings = FlowInspectorSettings()
        settings.maximumLargeHelloFlows = 2
        var inspector = inspector(policy: Policy(blockedCategories: .only(["adult"])), settings: settings)
        let stream = Build.records(TLSClientHelloTests.paddedHello("www.allowed.example"))
        let clients = (0..<3).map { TCPClient(clientPort: 42_000 + $0) }
        for (index, client) in clients.enumerated() {
            _ = inspector.inspect(client.syn, now: 0)
            let first = inspector.inspect(client.data(at: 0, Array(stream[0..<1_448])), now: 1)
            if index < 2 {
                #expect(first.verdict == .needMoreData && inspector.table.largeHelloCount == index + 1)
            } else {
                #expect(first.kind == .oversizedHello && first.verdict == .drop, "the third large hello at once")
            }
        }
        // The first finishes its hello: it is judged by its name, and a new one may be read.
        let rest = inspector.inspect(clients[0].data(at: 1_448, Array(stream[1_448...])), now: 2)
        #expect(rest.verdict == .allow && rest.kind == .tls && inspector.table.largeHelloCount == 1)
        let next = TCPClient(clientPort: 42_010)
        _ = inspector.inspect(next.syn, now: 3)
        #expect(inspector.inspect(next.data(at: 0, Array(stream[0..<1_448])), now: 3).verdict == .needMoreData)
        #expect(inspector.table.largeHelloCount == 2)
        // Cut short (the end of a capture): a large hello not read whole is no nameless TLS flow.
        let finished = inspector.finishInspections(now: 4)
        #expect(finished.count == 2 && finished.allSatisfy { $0.kind == .oversizedHello && $0.verdict == .drop })
        #expect(inspector.table.largeHelloCount == 0)
    }

    @Test func tooManyInspectingFlowsCutsTheOldestShort() {
        var settings = FlowInspectorSettings()
        settings.maximumInspectingFlows = 2
        var inspector = inspector(settings: settings)
        let clients = (0..<3).map { TCPClient(clientPort: 41_000 + $0) }
        for (index, client) in clients.enumerated() { _ = inspector.inspect(client.syn, now: UInt64(index)) }
        #expect(inspector.counters.inspectionsCutShort == 1 && inspector.table.inspectingCount == 2)
        // The first flow was judged nameless: its ClientHello comes too late.
        let late = inspector.inspect(clients[0].data(at: 0, clientHelloRecords("blocked.example")), now: 4)
        #expect(late.verdict == .allow && late.finality == .repeatedDecision && late.decision.reason.source == .noName)
        #expect(inspector.inspect(clients[2].data(at: 0, clientHelloRecords("blocked.example")), now: 5).verdict == .drop)
    }

    @Test func fullTableEvictsAndIdleFlowsExpire() {
        var settings = FlowInspectorSettings()
        settings.table.capacity = 4
        var inspector = inspector(settings: settings)
        for port in 0..<10 {
            _ = inspector.inspect(udpPacket(sourcePort: 6000 + port, destinationPort: 9999, [1, 2, 3]), now: UInt64(port))
        }
        #expect(inspector.table.count == 4 && inspector.counters.evictions == 6)
        // 61 s later every UDP flow has expired.
        #expect(inspector.removeExpiredFlows(now: 61 * second) == 4)
        #expect(inspector.counters.expirations == 4 && inspector.table.count == 0)
    }

    @Test func malformedAndUntrackedPacketsAreAcceptedAndCounted() {
        var inspector = inspector(policy: Policy(noName: .block))
        let samples: [[UInt8]] = [
            [], [0x45], [0x60, 0, 0], [0x12, 0x34, 0x56],
            Build.ipv4(protocolNumber: 6, payload: [1, 2, 3]),               // TCP header cut short
            Build.ipv4(protocolNumber: 1, payload: [8, 0, 0, 0, 0, 1, 0, 1]), // ICMP echo
            Build.ipv4(protocolNumber: 17, payload: Build.udp(payload: [1, 2]), flagsAndOffset: 0x2000), // first fragment
        ]
        for sample in samples {
            let inspection = inspector.inspect(sample, now: 0)
            #expect(inspection.verdict == .allow && inspection.finality == .untracked && inspection.flow == nil)
        }
        #expect(inspector.counters.parseErrors == 5 && inspector.counters.untrackedPackets == 2)
        #expect(inspector.counters.packets == 7 && inspector.table.count == 0)
    }

    @Test func mutatedPacketsNeverCrash() {
        var inspector = inspector()
        let client = TCPClient()
        let packets = [client.syn, client.data(at: 0, clientHelloRecords("www.blocked.example")),
                       udpPacket(Build.dnsQuery("blocked.example")), udpPacket(sourcePort: 1, destinationPort: 443, rfc9001ClientInitial)]
        var now: UInt64 = 0
        for packet in packets {
            forEachMutation(of: packet, rounds: 400, seed: now + 7) { mutant in
                now += 1
                _ = inspector.inspect(mutant, now: now)
            }
            for length in 0..<packet.count where length % 7 == 0 {
                now += 1
                _ = inspector.inspect(Array(packet[0..<length]), now: now)
            }
        }
        #expect(inspector.counters.packets > 1_000)
    }
}

extension FlowInspectorTests {
    @Test func answersFromTheLookupDecideWaitingFlows() throws {
        let policy = Policy(blockedCategories: .only(["gambling"]), unknown: .ask, askDefault: .block)
        var inspector = inspector(policy: policy)
        var flows: [String: FlowKey] = [:]
        for (index, name) in ["casino.example", "school.example", "nobody.example", "late.example"].enumerated() {
            let client = TCPClient(clientPort: 42_000 + index)
            _ = inspector.inspect(client.syn, now: 0)
            let asked = inspector.inspect(client.data(at: 0, clientHelloRecords(name)), now: 1)
            #expect(asked.verdict == .needRules, "\(name)")
            flows[name] = try #require(asked.flow)
        }
        inspector.recordAnswer(.init(categories: ["gambling", "games"], expires: 100), for: try HostName("casino.example"))
        inspector.recordAnswer(.init(categories: ["education"], expires: 100), for: try HostName("school.example"))
        inspector.recordAnswer(.init(categories: [], expires: 100), for: try HostName("nobody.example"))

        let casinoResult = inspector.resolve(flow: flows["casino.example"]!, now: 2)
        let casino = try #require(casinoResult)
        #expect(casino.verdict == .drop && casino.decision.reason == Reason(source: .lookup, category: "gambling"))
        let schoolResult = inspector.resolve(flow: flows["school.example"]!, now: 2)
        let school = try #require(schoolResult)
        #expect(school.verdict == .allow && school.decision.reason.source == .lookup)
        // Known to the lookup but in no category: policy.askDefault.
        let nobodyResult = inspector.resolve(flow: flows["nobody.example"]!, now: 2)
        let nobody = try #require(nobodyResult)
        #expect(nobody.verdict == .drop && nobody.decision.reason.source == .lookupUnknown)
        // No answer: still waiting, until the caller settles it with the default.
        #expect(inspector.resolve(flow: flows["late.example"]!, now: 2)?.verdict == .needRules)
        let settledResult = inspector.settle(flow: flows["late.example"]!, with: inspector.engine.askDefault(Reason(source: .askTimeout)), now: 3)
        let settled = try #require(settledResult)
        #expect(settled.verdict == .drop && settled.finality == .firstDecision && settled.decision.reason.source == .askTimeout)
        // A settled flow is decided: settling again or resolving does nothing.
        #expect(inspector.settle(flow: flows["late.example"]!, with: Decision(.allow, Reason(source: .askTimeout)), now: 4) == nil)

        // Answers are kept for their time to live only.
        #expect(inspector.removeExpiredAnswers(now: 99) == 0)
        #expect(inspector.removeExpiredAnswers(now: 100) == 3)
    }
}
