@testable import FilterData
import HallpassWire
import HallpassIPC
import Testing
import VerdictCore

@Suite struct DataPathTests {
    func inspection(_ finality: Inspection.Finality, _ verdict: Verdict) -> Inspection {
        Inspection(
            flow: nil, direction: .clientToServer, createdFlow: false, finality: finality,
            decision: Decision(verdict, Reason(source: .unknownHost)), facts: FlowFacts(), findings: FlowFindings(kind: .none))
    }

    @Test func decisionsTravelAsMarksOnARepeatedPacket() {
        let marks = FlowMarks()
        #expect(KernelVerdict(for: inspection(.firstDecision, .allow), marks: marks) == .repeatWithMark(marks.allow))
        #expect(KernelVerdict(for: inspection(.firstDecision, .drop), marks: marks) == .repeatWithMark(marks.block))
        #expect(KernelVerdict(for: inspection(.repeatedDecision, .drop), marks: marks) == .repeatWithMark(marks.block))
    }

    @Test func perPacketAndUndecidedVerdictsLeaveTheConnectionUnmarked() {
        let marks = FlowMarks()
        #expect(KernelVerdict(for: inspection(.packetDecision, .drop), marks: marks) == .drop)
        #expect(KernelVerdict(for: inspection(.packetDecision, .allow), marks: marks) == .accept)
        #expect(KernelVerdict(for: inspection(.undecided, .needMoreData), marks: marks) == .accept)
        #expect(KernelVerdict(for: inspection(.untracked, .allow), marks: marks) == .accept)
    }

    @Test func marksStayInsideTheirMask() {
        let marks = FlowMarks()
        #expect(marks.allow & ~marks.mask == 0 && marks.block & ~marks.mask == 0 && marks.allow != marks.block)
        #expect(marks.dnsAnswer & marks.mask == 0, "the DNS answer bit must not read as a decision")
    }

    func dnsQuery(_ verdict: Verdict, _ direction: Inspection.Direction) -> Inspection {
        Inspection(
            flow: nil, direction: direction, createdFlow: false, finality: .packetDecision,
            decision: Decision(verdict, Reason(source: .unknownHost)), facts: FlowFacts(), findings: FlowFindings(kind: .dns))
    }

    @Test func aBlockedQueryGoesOnMarkedForItsAnswerOnlyWhenAnswersAreRewritten() {
        let marks = FlowMarks()
        #expect(KernelVerdict(for: dnsQuery(.drop, .clientToServer), marks: marks, rewriteDNS: true) == .repeatWithMark(marks.dnsAnswer))
        #expect(KernelVerdict(for: dnsQuery(.drop, .clientToServer), marks: marks, rewriteDNS: false) == .drop)
        // Allowed queries need nothing of their answers: one trip per lookup.
        #expect(KernelVerdict(for: dnsQuery(.allow, .clientToServer), marks: marks, rewriteDNS: true) == .accept)
        // A local server's response never comes back marked (the chain would queue it again).
        #expect(KernelVerdict(for: dnsQuery(.drop, .serverToClient), marks: marks, rewriteDNS: true) == .accept)
    }

    @Test func theDNSMessageIDIsReadAfterTheUDPHeader() {
        // IPv4, 20-byte header, UDP 5353 -> 53, DNS id 0xBEEF.
        var packet: [UInt8] = [0x45, 0, 0, 30, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]
        packet += [0x14, 0xE9, 0, 53, 0, 10, 0, 0, 0xBE, 0xEF]
        #expect(PacketBytes.dnsMessageID(packet.span) == 0xBEEF)
        #expect(PacketBytes.dnsMessageID(Array(packet.prefix(29)).span) == nil)
    }
}
