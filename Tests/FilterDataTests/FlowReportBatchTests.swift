@testable import FilterData
import HallpassIPC
import Testing

@Suite struct FlowReportBatchTests {
    let millisecond: UInt64 = 1_000_000

    /// A line of `size` bytes that names its number first.
    func line(_ number: Int, size: Int = 100) -> (inout [UInt8]) -> Void {
        { bytes in
            let name = Array("line\(number) ".utf8)
            bytes.append(contentsOf: name)
            bytes.append(contentsOf: repeatElement(UInt8(ascii: "x"), count: max(0, size - name.count)))
        }
    }

    /// Sends what is due through a channel with room for `room` messages; returns how many reports went and the messages.
    func send(_ batch: inout FlowReportBatch, now: UInt64, all: Bool = false, room: Int = .max) -> (sent: Int, messages: [FlowReportLines]) {
        var messages: [FlowReportLines] = []
        let sent = batch.send(now: now, all: all) { lines in
            guard messages.count < room else { return false }
            messages.append(lines)
            return true
        }
        return (sent, messages)
    }

    func numbers(_ messages: [FlowReportLines]) -> [Int] {
        messages.flatMap { lines in
            (0..<lines.count).map { Int(String(decoding: lines.line($0).prefix { $0 != 0x20 }.dropFirst(4), as: UTF8.self))! }
        }
    }

    @Test func reportsWaitForTheDelayThenGoInOneMessage() {
        var batch = FlowReportBatch(delay: 50 * millisecond, batchSize: 256)
        #expect(batch.due == nil)
        for number in 0..<3 {
            let added = batch.add(now: 10 * millisecond + UInt64(number), line(number))
            #expect(added)
        }
        #expect(batch.due == 60 * millisecond, "due by the oldest")
        let early = send(&batch, now: 59 * millisecond)
        #expect(early.sent == 0 && early.messages.isEmpty && batch.count == 3)
        let due = send(&batch, now: 60 * millisecond)
        #expect(due.sent == 3 && due.messages.count == 1 && numbers(due.messages) == [0, 1, 2])
        #expect(batch.isEmpty && batch.due == nil)
    }

    @Test func aFullBatchGoesAtOnce() {
        var batch = FlowReportBatch(delay: 50 * millisecond, batchSize: 4)
        for number in 0..<3 { _ = batch.add(now: 0, line(number)) }
        #expect(!batch.isDue(now: 1))
        _ = batch.add(now: 1, line(3))
        #expect(batch.isDue(now: 1))
    }

    @Test func messagesStayUnderTheSizeLimitAndTheLineLimit() {
        var batch = FlowReportBatch(batchSize: 1000)
        // 1,000-byte lines: 8 to a message of 8 KiB.
        for number in 0..<20 { _ = batch.add(now: 0, line(number, size: 1000)) }
        // Short lines: at most 128 to a message, whatever their size.
        for number in 20..<300 { _ = batch.add(now: 0, line(number, size: 20)) }
        let (sent, messages) = send(&batch, now: 0, all: true)
        #expect(sent == 300 && numbers(messages) == Array(0..<300), "every line, in order")
        for lines in messages {
            #expect(DataEvent.reports(lines).encoded.count <= controlMessageMaximumSize)
            #expect(lines.count <= FlowReportLines.maximumPerMessage)
        }
        #expect(messages.prefix(3).map(\.count) == [8, 8, 4 + 124], "as many as fit in each")
    }

    @Test func whatTheChannelHasNoRoomForWaitsAnotherDelay() {
        var batch = FlowReportBatch(delay: 50 * millisecond, batchSize: 1000)
        // 50-byte lines: 128 to a message.
        for number in 0..<200 { _ = batch.add(now: 0, line(number, size: 50)) }
        // Room for one message only.
        let first = send(&batch, now: 50 * millisecond, room: 1)
        #expect(first.sent == 128 && first.messages.count == 1)
        #expect(batch.count == 72 && batch.due == 100 * millisecond, "the rest is tried again a delay later, not at every turn")
        #expect(send(&batch, now: 99 * millisecond).sent == 0)
        let rest = send(&batch, now: 100 * millisecond)
        #expect(rest.sent == 72 && numbers(first.messages + rest.messages) == Array(0..<200))
    }

    @Test func pastItsCapacityAReportIsRefused() {
        var batch = FlowReportBatch(capacity: 2)
        let added = [batch.add(now: 0, line(0)), batch.add(now: 0, line(1)), batch.add(now: 0, line(2))]
        #expect(added == [true, true, false])
        #expect(batch.count == 2)
    }
}
