@testable import FilterData
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
        #expect(DataPath.kernelVerdict(for: inspection(.firstDecision, .allow), marks: marks) == .repeatWithMark(marks.allow))
        #expect(DataPath.kernelVerdict(for: inspection(.firstDecision, .drop), marks: marks) == .repeatWithMark(marks.block))
        #expect(DataPath.kernelVerdict(for: inspection(.repeatedDecision, .drop), marks: marks) == .repeatWithMark(marks.block))
    }

    @Test func perPacketAndUndecidedVerdictsLeaveTheConnectionUnmarked() {
        let marks = FlowMarks()
        #expect(DataPath.kernelVerdict(for: inspection(.packetDecision, .drop), marks: marks) == .drop)
        #expect(DataPath.kernelVerdict(for: inspection(.packetDecision, .allow), marks: marks) == .accept)
        #expect(DataPath.kernelVerdict(for: inspection(.undecided, .needMoreData), marks: marks) == .accept)
        #expect(DataPath.kernelVerdict(for: inspection(.untracked, .allow), marks: marks) == .accept)
    }

    @Test func marksStayInsideTheirMask() {
        let marks = FlowMarks()
        #expect(marks.allow & ~marks.mask == 0 && marks.block & ~marks.mask == 0 && marks.allow != marks.block)
    }
}
