public import Foundation
public import HallpassConfig

/// When the safeguarding digests go out: `alerts.digests` in server.yaml
/// (docs/server.md, "Safeguarding digests"). Times are the school's wall
/// clock, in the server's time zone (the console's): a digest at 07:30 is
/// at 07:30 in winter and in summer.
public struct DigestSchedule: Sendable, Hashable {
    /// A time of day on the wall clock, to the minute.
    public struct TimeOfDay: Sendable, Hashable, CustomStringConvertible {
        public let hour: Int
        public let minute: Int

        public init?(hour: Int, minute: Int) {
            guard (0...23).contains(hour), (0...59).contains(minute) else { return nil }
            self.hour = hour
            self.minute = minute
        }

        /// `07:30` or `7:30`: one or two digits of hour, two of minute.
        public init?(_ text: String) {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2, (1...2).contains(parts[0].utf8.count), parts[1].utf8.count == 2,
                parts.allSatisfy({ $0.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } }), let hour = Int(parts[0]), let minute = Int(parts[1])
            else { return nil }
            self.init(hour: hour, minute: minute)
        }

        public var description: String {
            (hour < 10 ? "0" : "") + "\(hour):" + (minute < 10 ? "0" : "") + "\(minute)"
        }
    }

    /// Monday first, as the policy's schedules count.
    public enum Weekday: Int, Sendable, Hashable, CaseIterable {
        case monday = 1, tuesday, wednesday, thursday, friday, saturday, sunday

        public var name: String { "\(self)" }

        /// Foundation's `.weekday`: Sunday 1 ... Saturday 7.
        var calendarWeekday: Int { rawValue == 7 ? 1 : rawValue + 1 }
    }

    public struct Weekly: Sendable, Hashable, CustomStringConvertible {
        public var weekday: Weekday
        public var time: TimeOfDay

        public init(weekday: Weekday, time: TimeOfDay) {
            self.weekday = weekday
            self.time = time
        }

        public var description: String { "\(weekday.name) \(time)" }
    }

    /// nil: no daily digest (the default: the safeguarding lead has each
    /// danger alert as it happens, and a teacher's day rarely holds enough
    /// for a mail of its own).
    public var daily: TimeOfDay? = nil
    /// nil: no weekly digest. By default Monday 07:30, before the school day.
    public var weekly: Weekly? = Weekly(weekday: .monday, time: TimeOfDay(hour: 7, minute: 30)!)

    public init() {}

    public init(daily: TimeOfDay?, weekly: Weekly?) {
        self.daily = daily
        self.weekly = weekly
    }

    /// The digests that are on, daily first.
    public var kinds: [DigestKind] {
        (daily == nil ? [] : [.daily]) + (weekly == nil ? [] : [.weekly])
    }

    static let keys = ["daily", "weekly"]

    /// Reads `alerts.digests`: `daily: "07:30"` or `off`, `weekly: "monday 07:30"` or `off`.
    public init(_ node: ConfigNode) throws(ConfigurationError) {
        self.init()
        let keys = try node.mapping(allowed: Self.keys)
        if let dailyNode = keys["daily"] {
            let text = try dailyNode.string().trimmingCharacters(in: .whitespaces)
            if text.lowercased() == "off" {
                daily = nil
            } else if let time = TimeOfDay(text) {
                daily = time
            } else {
                throw dailyNode.error("expected a time of day as HH:MM from 00:00 to 23:59 (e.g. \"07:30\"), or off, got '\(text.prefix(60))'")
            }
        }
        if let weeklyNode = keys["weekly"] {
            let text = try weeklyNode.string().trimmingCharacters(in: .whitespaces)
            let words = text.split(separator: " ", omittingEmptySubsequences: true)
            if text.lowercased() == "off" {
                weekly = nil
            } else if words.count == 2, let day = Weekday.allCases.first(where: { $0.name == words[0].lowercased() }),
                let time = TimeOfDay(String(words[1]))
            {
                weekly = Weekly(weekday: day, time: time)
            } else {
                throw weeklyNode.error(
                    "expected a weekday and a time of day (e.g. \"monday 07:30\"; the day's English name, the time HH:MM"
                        + " from 00:00 to 23:59), or off, got '\(text.prefix(60))'")
            }
        }
    }

    // MARK: Due times

    /// The moment (Unix seconds) the digest of `kind` was last due at or
    /// before `now`; nil when that digest is off.
    public func lastDue(_ kind: DigestKind, now: Int64, timeZone: TimeZone) -> Int64? {
        due(kind, now: now, timeZone: timeZone, days: Array((-8...0).reversed())) { $0 <= now }
    }

    /// The first moment after `now` the digest of `kind` is due; nil when it is off.
    public func nextDue(_ kind: DigestKind, after now: Int64, timeZone: TimeZone) -> Int64? {
        due(kind, now: now, timeZone: timeZone, days: Array(0...8)) { $0 > now }
    }

    /// The first due time on the days `days` from today (in that order) that `accept` takes.
    private func due(_ kind: DigestKind, now: Int64, timeZone: TimeZone, days: [Int], accept: (Int64) -> Bool) -> Int64? {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let time: TimeOfDay
        var weekday: Weekday? = nil
        switch kind {
        case .daily:
            guard let daily else { return nil }
            time = daily
        case .weekly:
            guard let weekly else { return nil }
            time = weekly.time
            weekday = weekly.weekday
        }
        // Days are counted from today's noon: every day has a noon, whatever the clocks do at midnight.
        let today = Date(timeIntervalSince1970: TimeInterval(now))
        guard let noon = calendar.date(bySettingHour: 12, minute: 0, second: 0, of: today) else { return nil }
        for offset in days {
            guard let day = calendar.date(byAdding: .day, value: offset, to: noon) else { continue }
            if let weekday, calendar.component(.weekday, from: day) != weekday.calendarWeekday { continue }
            guard let at = Self.due(on: day, at: time, calendar: calendar) else { continue }
            if accept(at) { return at }
        }
        return nil
    }

    /// `time` on the day of `day`, on the wall clock: on the day the clocks
    /// go forward a time they skip is the moment they jump (01:30 in London
    /// is sent at 02:00 BST), and on the day they go back a time that comes
    /// twice is its first.
    static func due(on day: Date, at time: TimeOfDay, calendar: Calendar) -> Int64? {
        let start = calendar.startOfDay(for: day)
        guard
            let at = calendar.date(
                bySettingHour: time.hour, minute: time.minute, second: 0, of: start, matchingPolicy: .nextTime, repeatedTimePolicy: .first,
                direction: .forward)
        else { return nil }
        return Int64(at.timeIntervalSince1970.rounded(.down))
    }
}
