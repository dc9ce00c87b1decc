// The one 5-tuple: filter-data's flow table and reports, filter-control's connection
// records and cuts, the block page's look-up of who is asking.
import HallpassIPC
import Testing
import VerdictCore

@Suite struct FlowKeyTests {
    let out = FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.2")!, sourcePort: 40_000, destination: IPAddress("192.0.2.7")!, destinationPort: 443)

    @Test func bothDirectionsShareOneKeyAndEveryFieldCounts() {
        #expect(out.reversed.reversed == out && out.reversed != out)
        #expect(out.directionIndependent == out.reversed.directionIndependent)
        #expect(out.directionIndependent.isCanonicalDirection)
        var other = out
        other.sourcePort = 40_001
        #expect(other != out)
        other = out
        other.protocolNumber = 17
        #expect(other != out)
        other = out
        other.destination = IPAddress("192.0.2.8")!
        #expect(other != out)
    }

    @Test func itReadsAsTheLogsWriteAConnection() {
        #expect(out.description == "tcp 10.0.0.2:40000 -> 192.0.2.7:443")
        var udp = out
        udp.protocolNumber = 17
        #expect(udp.description.hasPrefix("udp "))
        udp.protocolNumber = 50
        #expect(udp.description.hasPrefix("proto 50 "))
    }
}
