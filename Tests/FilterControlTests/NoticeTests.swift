import FilterControl
import Foundation
import Logging
import Synchronization
import Testing
import VerdictCore

@Suite struct NoticeTests {
    func decision(_ host: String, uid: UInt32? = 1001, kind: String = "tls", verdict: Verdict = .drop) -> AuditRecord {
        var report = sampleReport(kind: kind, host: host, uid: uid, verdict: verdict)
        report.reason.rule = host
        return AuditRecord(report: report, time: Date())
    }

    @Test func onePerPersonAndNameWithinTheInterval() {
        var rule = NoticeRule(interval: 600, noticeForDNS: false)
        let start = Date(timeIntervalSince1970: 1000)
        #expect(rule.admit(decision("a.example"), now: start) == .notify)
        #expect(rule.admit(decision("a.example"), now: start.addingTimeInterval(599)) == .rateLimited)
        #expect(rule.admit(decision("a.example", uid: 1002), now: start.addingTimeInterval(1)) == .notify, "another person")
        #expect(rule.admit(decision("a.example"), now: start.addingTimeInterval(601)) == .notify)
    }

    @Test func aBurstOfNamesIsCappedPerPersonAndMinute() {
        var rule = NoticeRule(interval: 600, noticeForDNS: false)
        let start = Date(timeIntervalSince1970: 1000)
        let outcomes = (0..<5).map { rule.admit(decision("n\($0).example"), now: start.addingTimeInterval(Double($0))) }
        #expect(outcomes == [.notify, .notify, .notify, .rateLimited, .rateLimited])
        #expect(rule.admit(decision("n9.example"), now: start.addingTimeInterval(61)) == .notify)
    }

    @Test func onlyBlockedFlowsWithoutABlockPageWantANotice() {
        var rule = NoticeRule(interval: 600, noticeForDNS: false)
        let now = Date()
        #expect(rule.admit(decision("a.example", verdict: .allow), now: now) == .notWanted)
        #expect(rule.admit(decision("a.example", kind: "dns"), now: now) == .notWanted, "the rewritten answer leads to the block page")
        #expect(rule.admit(decision("a.example", uid: nil), now: now) == .notWanted, "no uid")
        #expect(rule.admit(decision("q.example", kind: "quic"), now: now) == .notify)
        var withoutCA = NoticeRule(interval: 600, noticeForDNS: true)
        #expect(withoutCA.admit(decision("a.example", kind: "dns"), now: now) == .notify)
    }

    @Test func theTextNamesTheSiteTheReasonTheSchoolAndTheWayToAsk() {
        let text = NoticeText(organization: "Example School", requestAccessURL: "https://help.example.org/unblock?host={host}&u={user}", blockPageURL: "http://127.0.0.1:8080/")
        let blocked = decision("casino.example")
        #expect(text.summary(for: blocked) == "Blocked: casino.example")
        #expect(
            text.body(for: blocked, user: "alice")
                == "Example School blocked casino.example: it is in the category gambling.\nTo ask for access: https://help.example.org/unblock?host=casino.example&amp;u=alice")
        let builtin = NoticeText(organization: "Example School", requestAccessURL: "builtin", blockPageURL: "http://127.0.0.1:8080/")
        #expect(builtin.body(for: blocked, user: nil).hasSuffix("To ask for access: http://127.0.0.1:8080/?url=https%3A%2F%2Fcasino.example%2F"))
        // Plain HTTP: the link carries the URL, made of the report's host and path.
        let http = AuditRecord(report: sampleReport(kind: "http", path: "/play?game=1"), time: Date())
        #expect(builtin.body(for: http, user: nil).hasSuffix("?url=http%3A%2F%2Fcasino.example%2Fplay%3Fgame%3D1"))
        let none = NoticeText(organization: "Example School", requestAccessURL: nil, blockPageURL: "")
        #expect(none.body(for: blocked, user: nil).hasSuffix("If you need it for your work, ask your teacher."))
    }

    @Test func theNotifyCallHasTheSpecificationsSignatureAndReadsBack() throws {
        let text = NoticeText(organization: "Example School", requestAccessURL: nil, blockPageURL: "")
        var call = text.notifyCall(for: decision("casino.example"), user: nil)
        call.serial = 2
        #expect(call.bodySignature == "susssasa{sv}i")
        let bytes = call.encoded()
        #expect(bytes.count % 8 == 0 || bytes.count > 16)
        #expect(try DBusMessage.messageLength(bytes[...]) == bytes.count)
        let decoded = try DBusMessage(decoding: bytes)
        #expect(decoded == call)
        #expect(decoded.member == "Notify" && decoded.destination == "org.freedesktop.Notifications")
    }

    @Test func helloEncodesAsTheSpecificationSays() {
        let hello = DBusMessage(serial: 1, path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "Hello", destination: "org.freedesktop.DBus")
        let bytes = hello.encoded()
        // l, method call, no flags, version 1, empty body, serial 1.
        #expect(Array(bytes[0..<12]) == [0x6c, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0])
        #expect(bytes.count % 8 == 0, "a message without a body ends at the header's 8-byte padding")
        // The first header field: code 1 (path), signature "o", the path.
        #expect(Array(bytes[16..<20]) == [1, 1, UInt8(ascii: "o"), 0])
    }

    /// The uids the notifier looked for a session bus of, in order; none has one.
    final class Located: Sendable {
        let uids = Mutex<[UInt32]>([])
    }

    func notifier(_ located: Located) -> DesktopNotifier {
        DesktopNotifier(
            rule: NoticeRule(interval: 600, noticeForDNS: false),
            text: NoticeText(organization: "Example School", requestAccessURL: nil, blockPageURL: ""),
            logger: Logger(label: "hallpass.notice.test"),
            locate: { uid in
                located.uids.withLock { $0.append(uid) }
                return nil
            })
    }

    @Test func sixtyFourWaitAndFinishStillDeliversThemInOrder() async {
        let located = Located()
        let notifier = notifier(located)
        // Another person each time: no rate limit holds one back.
        for uid in UInt32(2000)..<2070 { notifier.consider(decision("a.example", uid: uid)) }
        #expect(notifier.counters().dropped == 6, "the queue holds \(DesktopNotifier.queueCapacity)")
        notifier.finish()
        notifier.consider(decision("b.example", uid: 3000))
        await notifier.run()
        let counters = notifier.counters()
        #expect(counters.noSession == 64 && counters.dropped == 6 && counters.sent == 0 && counters.failed == 0, "\(counters)")
        #expect(located.uids.withLock { $0 } == Array(UInt32(2000)..<2064), "in the order they came, none after finish()")
    }

    @Test func runDeliversWhatComesWhileItWaitsUntilFinish() async {
        let located = Located()
        let notifier = notifier(located)
        let running = Task { await notifier.run() }
        notifier.consider(decision("a.example", uid: 2000))
        notifier.consider(decision("a.example", uid: 2000))  // the same person and name: rate limited
        notifier.consider(decision("b.example", uid: 2001))
        for _ in 0..<3000 where notifier.counters().noSession < 2 { try? await Task.sleep(for: .milliseconds(10)) }
        notifier.finish()
        await running.value
        let counters = notifier.counters()
        #expect(counters.noSession == 2 && counters.rateLimited == 1 && counters.dropped == 0, "\(counters)")
        #expect(located.uids.withLock { $0 } == [2000, 2001])
    }

    @Test func aCancelledRunStillDeliversWhatWasQueued() async {
        let located = Located()
        let notifier = notifier(located)
        for uid in UInt32(2000)..<2005 { notifier.consider(decision("a.example", uid: uid)) }
        let running = Task { await notifier.run() }
        running.cancel()
        await running.value
        #expect(notifier.counters().noSession == 5)
        notifier.consider(decision("b.example", uid: 3000))
        #expect(notifier.counters().dropped == 0, "after the cancellation as after finish(): not taken, not counted")
        #expect(located.uids.withLock { $0 } == Array(UInt32(2000)..<2005))
    }
}
