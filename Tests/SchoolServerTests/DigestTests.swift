import Foundation
@testable import SchoolServer
import Testing
import VerdictCore

/// The safeguarding digest's periods, figures and documents (docs/safeguarding.md, "Digests").
@Suite struct DigestTests {
    let london = ConsoleTime(timeZone: TimeZone(identifier: "Europe/London")!)

    func alert(_ id: String, user: String?, group: String? = "year7", rule: String, _ severity: SafeguardingSeverity, at time: Int64, state: StoredAlert.State = .new)
        -> StoredAlert
    {
        StoredAlert(
            id: id, time: time, createdAt: time / 1000, machine: "m1", room: "lab1", user: user, group: group, ruleID: rule, severity: severity,
            action: "block", host: "example.org", url: nil, category: nil, searchTerm: nil, recordSequence: 1, state: state, note: nil,
            updatedAt: nil, updatedBy: nil, dispatched: true)
    }

    @Test func aWeeklyDigestOnAnyDayCoversTheLastWholeWeekFromMondayAndTheWeekBefore() throws {
        // Sunday 29 November 2026, 10:00 in London (UTC in winter): the last whole week is Mon 16 to Sun 22.
        let sunday = london.startOfDay("2026-11-29")! / 1000 + 10 * 3600
        let weekly = try #require(DigestKind.weekly.periods(now: sunday, time: london))
        #expect(london.day(weekly.current.lowerBound) == "2026-11-16")
        #expect(weekly.current.upperBound == london.startOfDay("2026-11-23"))
        #expect(london.day(weekly.previous.lowerBound) == "2026-11-09")
        #expect(weekly.previous.upperBound == weekly.current.lowerBound)
        // On a Monday morning the week just ended is the one.
        let monday = london.startOfDay("2026-11-30")! / 1000 + 7 * 3600
        let fromMonday = try #require(DigestKind.weekly.periods(now: monday, time: london))
        #expect(london.day(fromMonday.current.lowerBound) == "2026-11-23")
        #expect(fromMonday.current.upperBound == london.startOfDay("2026-11-30"))
        let daily = try #require(DigestKind.daily.periods(now: monday, time: london))
        #expect(london.day(daily.current.lowerBound) == "2026-11-29")
        #expect(london.day(daily.previous.lowerBound) == "2026-11-28")
    }

    @Test func aWeekAcrossTheClockChangeIsItsCalendarDays() throws {
        // British Summer Time ended on Sunday 25 October 2026: that week had 169 hours.
        let monday = london.startOfDay("2026-10-26")! / 1000 + 8 * 3600
        let weekly = try #require(DigestKind.weekly.periods(now: monday, time: london))
        #expect(weekly.current.upperBound - weekly.current.lowerBound == 169 * 3_600_000)
        #expect(london.day(weekly.current.lowerBound) == "2026-10-19")
    }

    @Test func theFiguresCountBySeverityRuleAndStudentAgainstThePeriodBefore() throws {
        let current: Range<Int64> = 1_000_000..<2_000_000
        let previous: Range<Int64> = 0..<1_000_000
        let alerts = [
            alert("al-1", user: "alice", rule: "self-harm-search", .danger, at: 1_100_000),
            alert("al-2", user: "alice", rule: "adult", .caution, at: 1_200_000, state: .acknowledged),
            alert("al-3", user: "bob", rule: "adult", .caution, at: 1_300_000),
            alert("al-4", user: "bob", rule: "adult", .caution, at: 1_400_000),
            alert("al-5", user: nil, group: nil, rule: "gambling", .advisory, at: 1_500_000, state: .closed),
        ]
        let before = [alert("al-0", user: "carol", rule: "adult", .caution, at: 500_000)]
        let figures = DigestFigures(
            kind: .weekly, current: current, previous: previous, alerts: alerts, previousAlerts: before,
            bypass: [BypassAttempts(user: "bob", group: "year7", count: 3), BypassAttempts(user: "dan", group: "year8", count: 9)], cut: false)
        #expect(figures.severities.map(\.name) == ["danger", "caution", "advisory"])
        #expect(figures.severities.map(\.current) == [1, 3, 1])
        #expect(figures.severities.map(\.previous) == [0, 1, 0])
        #expect(figures.rules.first?.name == "adult" && figures.rules.first?.current == 3 && figures.rules.first?.previous == 1)
        // A danger flag puts alice before bob, who has more flags.
        #expect(figures.students.map(\.user) == ["alice", "bob", "machine:m1"])
        #expect(figures.students[1].caution == 2)
        #expect(figures.bypass.map(\.user) == ["dan", "bob"])
        #expect(figures.untriaged == 3)
    }

    @Test func theDocumentEscapesHTMLShowsPseudonymsAndCarriesAReadablePDF() throws {
        let figures = DigestFigures(
            kind: .daily, current: 1_000_000..<2_000_000, previous: 0..<1_000_000,
            alerts: [alert("al-1", user: "<script>mallory", rule: "self-harm-search", .danger, at: 1_100_000)], previousAlerts: [], bypass: [],
            cut: false)
        let document = DigestDocument(
            figures: figures, schoolName: "Lakeside & Co", scopeText: "groups year7", consoleURL: "https://hallpass.school.example",
            time: london, created: 1_796_000_000, names: { "pupil-" + String($0.count) })
        #expect(document.subject.hasPrefix("[hallpass] Lakeside & Co: daily safeguarding digest, 1970-01-01"))
        #expect(document.subject.contains("1 danger"))
        #expect(!document.html.contains("<script>"))
        #expect(document.html.contains("Lakeside &amp; Co"))
        #expect(document.html.contains("pupil-15"))
        #expect(!document.text.contains("mallory") && !document.html.contains("mallory"))
        #expect(document.text.contains("https://hallpass.school.example/console/alerts"))
        #expect(document.pdf.starts(with: Array("%PDF-1.4".utf8)))
        #expect(document.pdfName.hasPrefix("hallpass-daily-"))
    }
}
