import Testing
@testable import FilterData
import HallpassWire
import HallpassIPC

@Suite struct StreamPeekTests {
    let data: [UInt8] = Array(0..<200).map { UInt8($0) }

    @Test func inOrderAfterSYN() {
        var peek = StreamPeek(capacity: 1000)
        peek.add(sequenceNumber: 999, isSYN: true, payload: [])
        peek.add(sequenceNumber: 1000, isSYN: false, payload: Array(data[0..<50]))
        peek.add(sequenceNumber: 1050, isSYN: false, payload: Array(data[50...]))
        #expect(Array(peek.contiguousPrefix) == data)
        #expect(peek.sawSYN)
    }

    @Test func outOfOrderOverlapAndRetransmissionFirstCopyWins() {
        var peek = StreamPeek(capacity: 1000)
        peek.add(sequenceNumber: 99, isSYN: true, payload: [])
        peek.add(sequenceNumber: 200, isSYN: false, payload: Array(data[100...]))
        #expect(peek.contiguousCount == 0)
        #expect(peek.bytesWaitingBeyondGap == 100)
        // Overlapping segment carrying different bytes for 90..<110: the stored 100..<110 stay.
        var evil = Array(data[0..<110])
        for index in 100..<110 { evil[index] = 0xFF }
        peek.add(sequenceNumber: 100, isSYN: false, payload: evil)
        #expect(Array(peek.contiguousPrefix) == data)
        // A retransmission with other bytes changes nothing.
        peek.add(sequenceNumber: 100, isSYN: false, payload: [UInt8](repeating: 0xAA, count: 200))
        #expect(Array(peek.contiguousPrefix) == data)
        #expect(peek.bytesWaitingBeyondGap == 0)
    }

    @Test func fastOpenDataOnSYN() {
        var peek = StreamPeek()
        peek.add(sequenceNumber: 5000, isSYN: true, payload: Array(data[0..<10]))
        peek.add(sequenceNumber: 5011, isSYN: false, payload: Array(data[10..<20]))
        // The retransmitted Fast Open data (after a SYN-ACK that did not ack it) is a duplicate.
        peek.add(sequenceNumber: 5001, isSYN: false, payload: Array(data[0..<20]))
        #expect(Array(peek.contiguousPrefix) == Array(data[0..<20]))
    }

    @Test func midStreamStartsAtFirstDataSegment() {
        var peek = StreamPeek()
        peek.add(sequenceNumber: 77_000, isSYN: false, payload: Array(data[0..<10]))
        peek.add(sequenceNumber: 76_990, isSYN: false, payload: [UInt8](repeating: 1, count: 15))  // before the start: trimmed
        peek.add(sequenceNumber: 77_010, isSYN: false, payload: Array(data[10..<20]))
        #expect(Array(peek.contiguousPrefix) == Array(data[0..<20]))
        #expect(!peek.sawSYN)
    }

    @Test func sequenceWrapAround() {
        var peek = StreamPeek()
        peek.add(sequenceNumber: UInt32.max - 4, isSYN: true, payload: [])
        peek.add(sequenceNumber: UInt32.max - 3, isSYN: false, payload: Array(data[0..<10]))  // wraps past 0
        peek.add(sequenceNumber: 6, isSYN: false, payload: Array(data[10..<20]))
        #expect(Array(peek.contiguousPrefix) == Array(data[0..<20]))
    }

    @Test func neverGrowsPastCapacity() {
        var peek = StreamPeek(capacity: 64)
        peek.add(sequenceNumber: 0, isSYN: true, payload: [])
        peek.add(sequenceNumber: 1, isSYN: false, payload: data)
        #expect(peek.contiguousCount == 64)
        #expect(peek.isFull)
        #expect(Array(peek.contiguousPrefix) == Array(data[0..<64]))
        // Far-away and far-before segments are ignored.
        let farAhead = peek.add(sequenceNumber: 1_000_000, isSYN: false, payload: data)
        let farBehind = peek.add(sequenceNumber: 2_000_000_000, isSYN: false, payload: data)
        #expect(!farAhead && !farBehind)
        #expect(peek.contiguousCount == 64)
    }

    @Test func oneByteSegmentsInRandomOrderReassembleAClientHello() {
        let stream = Build.records(Build.clientHello(extensions: [Build.sniExtension("tiny.example")]))
        var order = Array(0..<stream.count)
        var generator = SplitMix64(state: 42)
        order.shuffle(using: &generator)
        var peek = StreamPeek()
        peek.add(sequenceNumber: 10, isSYN: true, payload: [])
        for index in order {
            // Each byte twice: a retransmission of every tiny segment.
            peek.add(sequenceNumber: 11 + UInt32(index), isSYN: false, payload: [stream[index]])
            peek.add(sequenceNumber: 11 + UInt32(index), isSYN: false, payload: [0])
        }
        #expect(Array(peek.contiguousPrefix) == stream)
        let outcome = peek.withContiguousPrefix { ClientHelloParser.parse(recordStream: $0) }
        guard case .clientHello(let info) = outcome else {
            Issue.record("expected ClientHello, got \(outcome)")
            return
        }
        #expect(info.serverName == Array("tiny.example".utf8))
    }

    @Test func randomSegmentsNeverCrash() {
        var generator = SplitMix64(state: 9)
        var peek = StreamPeek(capacity: 300)
        for _ in 0..<2000 {
            let sequence = UInt32.random(in: 0...UInt32.max, using: &generator)
            let count = Int.random(in: 0...100, using: &generator)
            peek.add(sequenceNumber: sequence, isSYN: Bool.random(using: &generator), payload: [UInt8](repeating: 1, count: count))
        }
        #expect(peek.contiguousCount <= 300)
    }

    @Test func growsOnlyWhileNothingPastTheBoundWasDropped() {
        let data = (0..<300).map { UInt8($0 & 0xFF) }
        var peek = StreamPeek(capacity: 100)
        peek.add(sequenceNumber: 0, isSYN: false, payload: Array(data[0..<90]))
        #expect(peek.grow(to: 300) && peek.capacity == 300)
        peek.add(sequenceNumber: 90, isSYN: false, payload: Array(data[90...]))
        #expect(Array(peek.contiguousPrefix) == data)

        // A segment reaching past the bound before the growth: those bytes are gone.
        var late = StreamPeek(capacity: 100)
        late.add(sequenceNumber: 0, isSYN: false, payload: Array(data[0..<10]))
        late.add(sequenceNumber: 50, isSYN: false, payload: Array(data[50..<150]))
        #expect(!late.grow(to: 300) && late.capacity == 100)
    }
}
