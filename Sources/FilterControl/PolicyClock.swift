public import Foundation
public import VerdictCore

/// The school's wall clock: turns an instant into the weekday and minute
/// that schedules are written in, in the school's time zone (or the
/// machine's). Daylight saving time is the calendar's business: 08:30 is
/// 08:30 local time on either side of a change. A clock that is stepped (NTP,
/// an admin) is read again at every evaluation, so nothing depends on how
/// much time passed since the last one.
public struct PolicyClock: Sendable {
    public let timeZone: TimeZone
    private let calendar: Calendar

    /// `zoneName` from the school's policy (`timezone:`); nil: the machine's own zone.
    public init(zoneName: String?) {
        timeZone = zoneName.flatMap(TimeZone.init(identifier:)) ?? TimeZone.current
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        self.calendar = calendar
    }

    public func localTime(at date: Date) -> LocalTime {
        let parts = calendar.dateComponents([.weekday, .hour, .minute], from: date)
        // Calendar counts Sunday as 1; schedules use ISO days (Monday 1).
        let weekday = Weekday(rawValue: ((parts.weekday ?? 1) + 5) % 7 + 1)!
        return LocalTime(weekday: weekday, hour: parts.hour ?? 0, minute: parts.minute ?? 0)
    }

    /// `date` as the school's clock shows it, e.g. `Wed 2026-11-25 10:15`.
    public func describe(_ date: Date) -> String {
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        func two(_ value: Int?) -> String { (value ?? 0) < 10 ? "0\(value ?? 0)" : "\(value ?? 0)" }
        let day = localTime(at: date).weekday.shortName.capitalized
        return "\(day) \(parts.year ?? 0)-\(two(parts.month))-\(two(parts.day)) \(two(parts.hour)):\(two(parts.minute)) \(timeZone.identifier)"
    }

    /// `2026-11-25T10:15` (or with seconds) on the school's clock, for `filterctl check --at`.
    public func date(parsing text: String) -> Date? {
        let fields = text.split(whereSeparator: { $0 == "T" || $0 == " " })
        guard fields.count == 2 else { return nil }
        let day = fields[0].split(separator: "-").compactMap { Int($0) }
        let time = fields[1].split(separator: ":").compactMap { Int($0) }
        guard day.count == 3, (2...3).contains(time.count) else { return nil }
        var parts = DateComponents()
        parts.year = day[0]
        parts.month = day[1]
        parts.day = day[2]
        parts.hour = time[0]
        parts.minute = time[1]
        parts.second = time.count == 3 ? time[2] : 0
        guard let date = calendar.date(from: parts), calendar.dateComponents([.hour, .minute], from: date).minute == parts.minute else { return nil }
        return date
    }
}
