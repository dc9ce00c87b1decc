import Foundation
import VerdictCore

/// The safeguarding digest (docs/safeguarding.md, "Digests"): for one
/// person and the groups and rooms of their scope, what the alerts of a day
/// or a week showed, against the period before: flags by severity and by
/// rule, the most-flagged students, the attempts at ways round the filter.
/// Pastoral staff read it on a Monday morning; the safeguarding lead has
/// seen each danger alert as it happened.
public enum DigestKind: String, Sendable, Hashable, CaseIterable, Codable {
    case daily, weekly

    /// The period a digest sent at `now` covers, in the school's time zone:
    /// yesterday (daily), or the seven days to the most recent Monday
    /// (weekly), and the period before it for the trend. Days are the
    /// calendar's, so a week across a change of clocks is 167 or 169 hours.
    func periods(now: Int64, time: ConsoleTime) -> (current: Range<Int64>, previous: Range<Int64>)? {
        let nowMilliseconds = now * 1000
        guard let today = time.startOfDay(time.day(nowMilliseconds)) else { return nil }
        func daysBefore(_ start: Int64, _ count: Int) -> Int64? {
            var day = start
            for _ in 0..<count {
                // Noon of the day before, then its start: right across a change of clocks.
                guard let earlier = time.startOfDay(time.day(day - 12 * 3_600_000)) else { return nil }
                day = earlier
            }
            return day
        }
        switch self {
        case .daily:
            guard let start = daysBefore(today, 1), let before = daysBefore(start, 1) else { return nil }
            return (start..<today, before..<start)
        case .weekly:
            // Back to the most recent Monday's start (today when today is Monday).
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = time.timeZone
            let weekday = calendar.component(.weekday, from: Date(timeIntervalSince1970: Double(today) / 1000))  // 1 Sunday ... 7 Saturday
            guard let monday = daysBefore(today, (weekday + 5) % 7), let start = daysBefore(monday, 7), let before = daysBefore(start, 7)
            else { return nil }
            return (start..<monday, before..<start)
        }
    }
}

/// One student's flags in a period.
public struct FlaggedStudent: Sendable, Hashable {
    public var user: String
    public var group: String?
    public var danger: Int
    public var caution: Int
    public var advisory: Int

    public var total: Int { danger + caution + advisory }
}

/// Attempts at ways round the filter (records blocked with reason
/// `bypass`) of one student in a period.
public struct BypassAttempts: Sendable, Hashable {
    public var user: String
    public var group: String?
    public var count: Int64

    public init(user: String, group: String?, count: Int64) {
        self.user = user
        self.group = group
        self.count = count
    }
}

/// What a digest says, worked out from the alerts of two periods.
public struct DigestFigures: Sendable, Hashable {
    public struct Count: Sendable, Hashable {
        public var name: String
        public var current: Int
        public var previous: Int
    }

    public var kind: DigestKind
    public var current: Range<Int64>
    public var previous: Range<Int64>
    /// Danger, caution, advisory, each with the period before's.
    public var severities: [Count]
    /// By rule, most first.
    public var rules: [Count]
    /// Most-flagged first (danger counts first, then the total), at most `topStudents`.
    public var students: [FlaggedStudent]
    public var bypass: [BypassAttempts]
    /// Alerts of the period still new (nobody has acknowledged them).
    public var untriaged: Int
    /// Whether the alerts read were cut at `maximumAlerts` (the figures are then a lower bound).
    public var cut: Bool

    static let topStudents = 10
    static let topRules = 20
    /// The most alerts a digest reads per period: far above a school's week
    /// (each person and rule alerts at most once per `safeguarding.repeat`).
    public static let maximumAlerts = 20_000

    public init(
        kind: DigestKind, current: Range<Int64>, previous: Range<Int64>, alerts: [StoredAlert], previousAlerts: [StoredAlert],
        bypass: [BypassAttempts], cut: Bool
    ) {
        self.kind = kind
        self.current = current
        self.previous = previous
        self.cut = cut
        self.bypass = Array(bypass.sorted { ($0.count, $1.user) > ($1.count, $0.user) }.prefix(Self.topStudents))
        severities = SafeguardingSeverity.allCases.map { severity in
            Count(
                name: severity.rawValue, current: alerts.count { $0.severity == severity },
                previous: previousAlerts.count { $0.severity == severity })
        }
        var byRule: [String: Count] = [:]
        for alert in alerts { byRule[alert.ruleID, default: Count(name: alert.ruleID, current: 0, previous: 0)].current += 1 }
        for alert in previousAlerts { byRule[alert.ruleID, default: Count(name: alert.ruleID, current: 0, previous: 0)].previous += 1 }
        rules = Array(byRule.values.sorted { ($0.current, $0.previous, $1.name) > ($1.current, $1.previous, $0.name) }.prefix(Self.topRules))
        var byStudent: [String: FlaggedStudent] = [:]
        for alert in alerts {
            let person = alert.person
            var student = byStudent[person] ?? FlaggedStudent(user: person, group: alert.group, danger: 0, caution: 0, advisory: 0)
            switch alert.severity {
            case .danger: student.danger += 1
            case .caution: student.caution += 1
            case .advisory: student.advisory += 1
            }
            byStudent[person] = student
        }
        students = Array(
            byStudent.values.sorted { ($0.danger, $0.total, $1.user) > ($1.danger, $1.total, $0.user) }.prefix(Self.topStudents))
        untriaged = alerts.count { $0.state == .new }
    }
}

/// The digest as an email's parts: subject, plain text, HTML and the PDF.
public struct DigestDocument: Sendable {
    public var subject: String
    public var text: String
    public var html: String
    public var pdf: [UInt8]
    /// `hallpass-weekly-2026-11-23.pdf`.
    public var pdfName: String

    /// `scopeText` says whose flags these are ("groups year7, year8" or "the whole school");
    /// `names` turns a user as the alert has it into what this reader is shown (a pseudonym for some roles).
    /// `readsAlerts`: whether the reader may open the console's alerts
    /// (a teacher may not, and is sent to the records of their scope instead).
    init(
        figures: DigestFigures, schoolName: String, scopeText: String, consoleURL: String, time: ConsoleTime, created: Int64,
        readsAlerts: Bool = true, names: (String) -> String
    ) {
        let first = time.day(figures.current.lowerBound)
        let last = time.day(figures.current.upperBound - 1)
        let period = first == last ? first : "\(first) to \(last)"
        let kindWord = figures.kind == .daily ? "Daily" : "Weekly"
        let danger = figures.severities.first { $0.name == "danger" }?.current ?? 0
        // The school and the period first: what a reader's list of mail shows.
        subject =
            "[hallpass] \(schoolName): \(kindWord.lowercased()) safeguarding digest, \(period)"
            + " (\(danger) danger, \(figures.severities.reduce(0) { $0 + $1.current }) in all)"
        let title = "\(kindWord) safeguarding digest"
        let subtitle = "\(schoolName), \(period) (\(time.zoneName)); \(scopeText)"
        func trend(_ count: DigestFigures.Count) -> String {
            let change = count.current - count.previous
            return change == 0 ? "same" : (change > 0 ? "+\(change)" : "\(change)")
        }
        let previousWord = figures.kind == .daily ? "the day before" : "the week before"
        let severityRows = figures.severities.map { [$0.name, "\($0.current)", "\($0.previous)", trend($0)] }
        let ruleRows = figures.rules.map { [$0.name, "\($0.current)", "\($0.previous)", trend($0)] }
        let studentRows = figures.students.map { [names($0.user), $0.group ?? "-", "\($0.danger)", "\($0.caution)", "\($0.advisory)"] }
        let bypassRows = figures.bypass.map { [names($0.user), $0.group ?? "-", "\($0.count)"] }
        let alertsLink = consoleURL + (readsAlerts ? "/console/alerts" : "/console/records")
        var notes: [String] = []
        if figures.untriaged > 0 {
            notes.append(
                "\(figures.untriaged) of this period's alerts are still new (not acknowledged)" + (readsAlerts ? ": \(alertsLink)" : "."))
        }
        if figures.cut { notes.append("This period had more than \(DigestFigures.maximumAlerts) alerts; the figures count the first \(DigestFigures.maximumAlerts).") }

        // The PDF.
        var report = PDFReport(title: title, subtitle: subtitle)
        report.heading("Flags by severity (against \(previousWord))")
        report.table(Self.countColumns("severity"), rows: severityRows)
        report.heading("Flags by rule")
        report.table(Self.countColumns("rule"), rows: ruleRows)
        report.heading("Most-flagged students")
        report.table(Self.studentColumns, rows: studentRows)
        report.heading("Attempts at ways round the filter (blocked)")
        report.table(Self.bypassColumns, rows: bypassRows)
        for note in notes { report.paragraph(note) }
        let consoleNote =
            readsAlerts
            ? "Each student's timeline and every alert are in the console: \(alertsLink)"
            : "The records of your rooms and groups, and each student's timeline, are in the console: \(alertsLink)"
        report.paragraph(consoleNote)
        pdf = report.render(created: created)
        pdfName = "hallpass-\(figures.kind.rawValue)-\(first).pdf"

        // The plain text.
        func textTable(_ columns: [PDFReport.Column], _ rows: [[String]]) -> String {
            var lines = [columns.map { PDFReport.cell($0.title, width: $0.width, alignRight: $0.alignRight) }.joined(separator: " ")]
            for row in rows {
                lines.append(
                    columns.enumerated().map { PDFReport.cell($0.offset < row.count ? row[$0.offset] : "", width: $0.element.width, alignRight: $0.element.alignRight) }
                        .joined(separator: " "))
            }
            if rows.isEmpty { lines.append("(none)") }
            return lines.joined(separator: "\n")
        }
        text = [
            title, subtitle, "",
            "Flags by severity (against \(previousWord))", textTable(Self.countColumns("severity"), severityRows), "",
            "Flags by rule", textTable(Self.countColumns("rule"), ruleRows), "",
            "Most-flagged students", textTable(Self.studentColumns, studentRows), "",
            "Attempts at ways round the filter (blocked)", textTable(Self.bypassColumns, bypassRows), "",
        ].joined(separator: "\n") + notes.map { $0 + "\n" }.joined() + "\n\(consoleNote)\n"

        // The HTML: every value escaped.
        func htmlTable(_ columns: [PDFReport.Column], _ rows: [[String]]) -> String {
            var html = "<table><thead><tr>"
            for column in columns { html += "<th\(column.alignRight ? " class=\"n\"" : "")>\(HTML.escape(column.title))</th>" }
            html += "</tr></thead><tbody>"
            for row in rows {
                html += "<tr>"
                for (index, column) in columns.enumerated() {
                    html += "<td\(column.alignRight ? " class=\"n\"" : "")>\(HTML.escape(index < row.count ? row[index] : ""))</td>"
                }
                html += "</tr>"
            }
            if rows.isEmpty { html += "<tr><td colspan=\"\(columns.count)\">(none)</td></tr>" }
            return html + "</tbody></table>"
        }
        var body = "<h1>\(HTML.escape(title))</h1><p>\(HTML.escape(subtitle))</p>"
        body += "<h2>Flags by severity (against \(HTML.escape(previousWord)))</h2>" + htmlTable(Self.countColumns("severity"), severityRows)
        body += "<h2>Flags by rule</h2>" + htmlTable(Self.countColumns("rule"), ruleRows)
        body += "<h2>Most-flagged students</h2>" + htmlTable(Self.studentColumns, studentRows)
        body += "<h2>Attempts at ways round the filter (blocked)</h2>" + htmlTable(Self.bypassColumns, bypassRows)
        for note in notes { body += "<p>\(HTML.escape(note))</p>" }
        body += "<p><a href=\"\(HTML.escape(alertsLink))\">\(readsAlerts ? "The alerts in the console" : "The records in the console")</a></p>"
        html = """
            <!DOCTYPE html><html><head><meta charset="utf-8"><title>\(HTML.escape(title))</title>
            <style>body{font-family:sans-serif}table{border-collapse:collapse}th,td{padding:2px 8px;text-align:left}\
            .n{text-align:right}thead{border-bottom:1px solid #888}</style></head><body>\(body)</body></html>
            """
    }

    static func countColumns(_ first: String) -> [PDFReport.Column] {
        [.init(first, width: 28), .init("this period", width: 11, alignRight: true), .init("before", width: 8, alignRight: true),
         .init("change", width: 8, alignRight: true)]
    }
    static let studentColumns: [PDFReport.Column] = [
        .init("student", width: 26), .init("group", width: 16), .init("danger", width: 7, alignRight: true),
        .init("caution", width: 7, alignRight: true), .init("advisory", width: 8, alignRight: true),
    ]
    static let bypassColumns: [PDFReport.Column] = [.init("student", width: 26), .init("group", width: 16), .init("blocked", width: 8, alignRight: true)]
}

/// HTML escaping for the documents built outside the console's templates.
enum HTML {
    static func escape(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&#39;"
            default: result.append(character)
            }
        }
        return result
    }
}
