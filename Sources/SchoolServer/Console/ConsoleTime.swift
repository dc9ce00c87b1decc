import Foundation

/// Times as the console shows and reads them: in the server's time zone
/// (the records are kept in UTC milliseconds; a person thinks in school days).
/// The zone is passed in, so tests choose one.
struct ConsoleTime: Sendable {
    let timeZone: TimeZone

    /// The zone's name as the pages say it (`Europe/London`, `UTC`).
    var zoneName: String { timeZone.identifier }

    private func local(_ milliseconds: Int64) -> String {
        let offset = Int64(timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(milliseconds) / 1000)))
        // `2025-11-28T09:15:02.250Z` of the wall clock's time.
        return RecordTime.format(milliseconds: milliseconds + offset * 1000)
    }

    /// `2025-11-28 09:15:02`.
    func dateTime(_ milliseconds: Int64) -> String {
        let text = local(milliseconds)
        return String(text.prefix(10)) + " " + String(text.dropFirst(11).prefix(8))
    }

    /// `09:15`.
    func clock(_ milliseconds: Int64) -> String { String(local(milliseconds).dropFirst(11).prefix(5)) }

    /// `2025-11-28`: the day `milliseconds` falls in, here.
    func day(_ milliseconds: Int64) -> String { String(local(milliseconds).prefix(10)) }

    /// Where the day `text` (`2025-11-28`) begins here, in Unix ms; nil for
    /// anything but a real day written so. Daylight saving time is the
    /// calendar's: a day may be 23 or 25 hours long.
    func startOfDay(_ text: String) -> Int64? {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            parts.allSatisfy({ $0.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } }),
            let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
            (1970...9999).contains(year), (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        guard let date = calendar.date(from: DateComponents(year: year, month: month, day: day)) else { return nil }
        // 2025-02-30 is not a day: the calendar would make it 2 March.
        let back = calendar.dateComponents([.year, .month, .day], from: date)
        guard back.year == year, back.month == month, back.day == day else { return nil }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    /// Where the day after `text` begins (the end of a range that includes `text`).
    func endOfDay(_ text: String) -> Int64? {
        guard let start = startOfDay(text) else { return nil }
        // Noon of the next day, then its day's start: right across a change of clocks.
        return startOfDay(day(start + 36 * 3_600_000))
    }
}
