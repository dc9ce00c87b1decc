@testable import FilterData
import HallpassWire
import HallpassIPC
import Testing
import VerdictCore

@Suite struct HeldPacketsTests {
    let flowA = FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.1")!, sourcePort: 40000, destination: IPAddress("10.0.0.2")!, destinationPort: 443)
    let flowB = FlowKey(protocolNumber: 6, source: IPAddress("10.0.0.1")!, sourcePort: 40001, destination: IPAddress("10.0.0.2")!, destinationPort: 443)
    let flowC = FlowKey(protocolNumber: 17, source: IPAddress("10.0.0.1")!, sourcePort: 40002, destination: IPAddress("10.0.0.2")!, destinationPort: 443)

    @Test func oneQuestionPerNameAndPacketsPerFlow() throws {
        var held = HeldPackets(capacity: 8)
        let name = try HostName("new.example")
        #expect(held.hold(packet: 1, flow: flowA, question: .host(name), uid: 1000, now: 10, deadline: 100) == .held(newQuestion: true))
        #expect(held.hold(packet: 2, flow: flowA, question: .host(name), uid: 1000, now: 11, deadline: 200) == .held(newQuestion: false))
        #expect(held.hold(packet: 3, flow: flowB, question: .host(name), uid: 1000, now: 12, deadline: 150) == .held(newQuestion: false))
        #expect(held.hold(packet: 4, flow: flowC, question: .host(try HostName("other.example")), uid: 1000, now: 13, deadline: 50) == .held(newQuestion: true))
        #expect(held.packetCount == 4 && held.flowCount == 3)
        let waiting = try #require(held.waiting(for: .host(name)))
        #expect(waiting.asked == 10 && Set(waiting.flows) == [flowA, flowB])
        #expect(held.nextDeadline == 50)
        #expect(held.expired(now: 99) == [flowC])
        #expect(held.release(flowA) == [1, 2])
        #expect(held.release(flowA) == [])
        #expect(held.waiting(for: .host(name))?.flows == [flowB])
        #expect(held.release(flowB) == [3])
        #expect(held.waiting(for: .host(name)) == nil)
        #expect(held.packetCount == 1)
    }

    @Test func aUserQuestionIsAskedOnceForAllTheUsersFlows() throws {
        var held = HeldPackets(capacity: 8)
        #expect(held.hold(packet: 1, flow: flowA, question: .user(20_001), uid: 20_001, now: 5, deadline: 100) == .held(newQuestion: true))
        #expect(held.hold(packet: 2, flow: flowB, question: .user(20_001), uid: 20_001, now: 6, deadline: 100) == .held(newQuestion: false))
        #expect(held.hold(packet: 3, flow: flowC, question: .user(20_002), uid: 20_002, now: 7, deadline: 100) == .held(newQuestion: true))
        #expect(Set(held.waiting(for: .user(20_001))?.flows ?? []) == [flowA, flowB])
        #expect(held.uid(of: flowC) == 20_002 && held.uid(of: flowA) == 20_001)
    }

    @Test func theBoundRefusesMorePackets() throws {
        var held = HeldPackets(capacity: 2)
        let name = try HostName("new.example")
        #expect(held.hold(packet: 1, flow: flowA, question: .host(name), uid: 1000, now: 0, deadline: 9) == .held(newQuestion: true))
        #expect(held.hold(packet: 2, flow: flowA, question: .host(name), uid: 1000, now: 0, deadline: 9) == .held(newQuestion: false))
        #expect(held.hold(packet: 3, flow: flowB, question: .host(name), uid: 1000, now: 0, deadline: 9) == .full)
        #expect(held.packetCount == 2 && !held.contains(flowB))
    }
}
