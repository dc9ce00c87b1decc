/// Record times: RFC 3339 text on the wire, Unix milliseconds in storage
/// (so that the engines compare and index plain numbers), and days in UTC
/// for retention. Pure arithmetic, no calendar or locale.
public enum RecordTime {
    public static let millisecondsPerDay: Int64 = 86_400_000

    /// `2025-03-01T09:15:02.250Z`, `2025-03-01T09:15:02Z` or with an offset
    /// (`+01:00`); nil for anything else.
    public static func milliseconds(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20 else { return nil }
        func number(_ start: Int, _ count: Int) -> Int64? {
            guard start + count <= bytes.count else { return nil }
            var value: Int64 = 0
            for byte in bytes[start..<start + count] {
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            return value
        }
        guard let year = number(0, 4), bytes[4] == 45, let month = number(5, 2), bytes[7] == 45, let day = number(8, 2),
            bytes[10] == 84 || bytes[10] == 116 || bytes[10] == 32,
            let hour = number(11, 2), bytes[13] == 58, let minute = number(14, 2), bytes[16] == 58, let second = number(17, 2),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var index = 19
        var fraction: Int64 = 0
        if index < bytes.count, bytes[index] == 46 {
            index += 1
            var digits = 0
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                if digits < 3 { fraction = fraction * 10 + Int64(bytes[index] - 48) }
                digits += 1
                index += 1
            }
            guard digits > 0 else { return nil }
            // `.25` is 250 ms; digits past the third are dropped above.
            if digits < 3 { for _ in digits..<3 { fraction *= 10 } }
        }
        guard index < bytes.count else { return nil }
        var offsetSeconds: Int64 = 0
        switch bytes[index] {
        case 90, 122:
            index += 1
        case 43, 45:
            guard let offsetHour = number(index + 1, 2), bytes.count > index + 3, bytes[index + 3] == 58,
                let offsetMinute = number(index + 4, 2), offsetHour < 24, offsetMinute < 60
            else { return nil }
            offsetSeconds = (offsetHour * 3600 + offsetMinute * 60) * (bytes[index] == 43 ? 1 : -1)
            index += 6
        default:
            return nil
        }
        guard index == bytes.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return seconds * 1000 + fraction
    }

    /// `2025-03-01T09:15:02.250Z`.
    public static func format(milliseconds: Int64) -> String {
        let days = floorDivide(milliseconds, millisecondsPerDay)
        let inDay = milliseconds - days * millisecondsPerDay
        let (year, month, day) = civilFromDays(days)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let hour = inDay / 3_600_000
        let minute = inDay / 60_000 % 60
        let second = inDay / 1000 % 60
        let fraction = inDay % 1000
        let millis = fraction < 10 ? "00\(fraction)" : fraction < 100 ? "0\(fraction)" : "\(fraction)"
        return "\(year)-\(two(month))-\(two(day))T\(two(hour)):\(two(minute)):\(two(second)).\(millis)Z"
    }

    /// The start (Unix ms) of the UTC day `milliseconds` falls in.
    public static func startOfDay(_ milliseconds: Int64) -> Int64 {
        floorDivide(milliseconds, millisecondsPerDay) * millisecondsPerDay
    }

    static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
        a >= 0 ? a / b : -((-a + b - 1) / b)
    }

    /// Howard Hinnant's days_from_civil: days since 1970-01-01 of a proleptic Gregorian date.
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = floorDivide(y, 400)
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func civilFromDays(_ days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = floorDivide(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
