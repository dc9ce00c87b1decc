import HallpassIPC
import Testing
import VerdictCore

@Suite struct InspectionSetsTests {
    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined() }

    /// The bytes ipset(8)'s protocol takes (checked against the kernel: `ipset list` showed the address with its timeout).
    @Test func addRequestsAreIpsetsOwn() {
        let v4 = InspectionSets.addRequest(IPAddress("10.77.0.9")!, timeout: 120, sequence: 7)
        #expect(
            Self.hex(v4)
                == "4c0000000906010007000000000000000200000005000100070000001600020068616c6c706173732d696e737065637434000000180007800c000180080001400a4d00090800064000000078"
        )
        let v6 = InspectionSets.addRequest(IPAddress("fd77::9")!, timeout: 300, sequence: 8)
        #expect(
            Self.hex(v6)
                == "580000000906010008000000000000000200000005000100070000001600020068616c6c706173732d696e737065637436000000240007801800018014000240fd770000000000000000000000000009080006400000012c"
        )
    }

    @Test func timeoutsAreBounded() {
        #expect(InspectionSets.timeout(forTTL: 0) == 60)
        #expect(InspectionSets.timeout(forTTL: 300) == 300)
        #expect(InspectionSets.timeout(forTTL: 86_400) == 3600)
    }
}
