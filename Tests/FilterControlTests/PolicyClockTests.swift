@testable import FilterControl
import Foundation
import Testing
import VerdictCore

@Suite struct PolicyClockTests {
    let london = PolicyClock(zoneName: "Europe/London")

    /// Seconds since 1970 for a UTC date and time.
    func utc(_ text: String) -> Date {
        let formatter = ISO8601DateFormatter()
        return formatter.date(from: text)!
    }

    @Test func weekdaysAreISOAndMinutesLocal() {
        // Monday 23 November 2026, 08:30 in London (GMT, UTC+0).
        #expect(london.localTime(at: utc("2026-11-23T08:30:00Z")) == LocalTime(weekday: .monday, hour: 8, minute: 30))
        #expect(london.localTime(at: utc("2026-11-29T23:59:00Z")) == LocalTime(weekday: .sunday, hour: 23, minute: 59))
        let tokyo = PolicyClock(zoneName: "Asia/Tokyo")
        #expect(tokyo.localTime(at: utc("2026-11-29T23:59:00Z")) == LocalTime(weekday: .monday, hour: 8, minute: 59))
    }

    @Test func daylightSavingTimeMovesTheSchoolDayWithTheClock() {
        // On 29 March 2026 London moves from GMT to BST at 01:00 UTC.
        #expect(london.localTime(at: utc("2026-03-30T07:30:00Z")) == LocalTime(weekday: .monday, hour: 8, minute: 30), "08:30 BST")
        #expect(london.localTime(at: utc("2026-03-27T08:30:00Z")) == LocalTime(weekday: .friday, hour: 8, minute: 30), "08:30 GMT")
        let lessons = Schedule(days: [.monday, .friday], times: [try! TimeRange("08:30-12:00")])
        #expect(lessons.isActive(at: london.localTime(at: utc("2026-03-30T07:30:00Z"))))
        #expect(!lessons.isActive(at: london.localTime(at: utc("2026-03-30T07:29:00Z"))))
        // Back to GMT on 25 October 2026: 01:30 local happens twice, both inside a 01:00-02:00 range.
        let night = Schedule(days: [.sunday], times: [try! TimeRange("01:00-02:00")])
        #expect(night.isActive(at: london.localTime(at: utc("2026-10-25T00:30:00Z"))))
        #expect(night.isActive(at: london.localTime(at: utc("2026-10-25T01:30:00Z"))))
    }

    @Test func aSteppedClockIsReadAgain() {
        // The clock jumps an hour ahead (NTP step): the next reading is simply the new time.
        let before = london.localTime(at: utc("2026-11-23T11:59:00Z"))
        let after = london.localTime(at: utc("2026-11-23T12:59:00Z"))
        let lunch = Schedule(days: [.monday], times: [try! TimeRange("12:00-13:00")])
        #expect(!lunch.isActive(at: before) && lunch.isActive(at: after))
    }

    @Test func checkAtTakesALocalDateAndTime() {
        #expect(london.date(parsing: "2026-11-25T10:15") == utc("2026-11-25T10:15:00Z"))
        #expect(london.date(parsing: "2026-06-25 10:15") == utc("2026-06-25T09:15:00Z"), "BST")
        #expect(london.date(parsing: "2026-11-25") == nil)
        #expect(london.date(parsing: "tomorrow 10:15") == nil)
        #expect(london.describe(utc("2026-11-25T10:15:00Z")) == "Wed 2026-11-25 10:15 Europe/London")
    }
}
