import Foundation

/// An alert as an email (RFC 5322 with MIME, RFC 2045-2047), written by
/// the server and handed to sendmail: a text and an HTML part of the same
/// words (multipart/alternative), UTF-8 in base64, the subject in
/// encoded-words when it is more than plain ASCII, lines ending in LF (the
/// sendmail interface turns them into CRLF for SMTP).
///
/// Nothing from a record or an alert reaches a header as it is: the
/// subject's values have every control character (CR and LF among them)
/// made a space, and anything beyond printable ASCII, or anything that a
/// mail reader would decode (`=?`), is written as encoded-words, whose
/// base64 cannot hold a line break. The addresses are checked ones
/// (`MailAddress`). In the HTML part every value is escaped and every link
/// built from percent-encoded parts.
public struct AlertEmail: Sendable {
    public var message: AlertMessage
    public var from: AlertsConfiguration.Sender
    public var to: String
    /// `console.url`, without a slash at its end.
    public var consoleURL: String
    /// The delivery's id: the Message-ID, the same on every retry, so that a
    /// message sent twice (sendmail failed after handing it on) is one to the reader.
    public var deliveryID: String
    /// Unix seconds: the Date header.
    public var date: Int64
    /// How the person is named: the user name, or a pseudonym (`console.pseudonyms` with safeguarding).
    public var shownUser: String?

    public init(
        message: AlertMessage, from: AlertsConfiguration.Sender, to: String, consoleURL: String, deliveryID: String, date: Int64,
        shownUser: String?
    ) {
        self.message = message
        self.from = from
        self.to = to
        self.consoleURL = consoleURL
        self.deliveryID = deliveryID
        self.date = date
        self.shownUser = shownUser
    }

    /// The most characters of one value in the subject and the body's table.
    static let longestValue = 300
    static let longestURL = 2000

    /// `[hallpass] DANGER: RULE for USER (room ROOM)`.
    public var subject: String {
        var text = "[hallpass] \(message.severity.rawValue.uppercased()): \(Self.clean(message.rule, 100))"
        text += " for \(Self.clean(shownUser ?? machineName, 100))"
        if let room = message.room { text += " (room \(Self.clean(room, 100)))" }
        return text
    }

    private var machineName: String { message.machine.map { "machine \($0)" } ?? "an unknown person" }

    /// The person's timeline in the console; nil without a user.
    public var timelineLink: String? {
        shownUser.map { consoleURL + "/console/timeline?user=" + ConsoleForm.encode($0) }
    }

    /// The alert in the console's queue.
    public var alertLink: String { consoleURL + "/console/alerts/" + ConsoleForm.encode(message.id) }

    /// The whole message, headers and body, LF line ends.
    public func render() -> String {
        // Base64 lines hold no `=_`, and the preamble is the server's own: the boundary appears nowhere else.
        let boundary = "=_hallpass_" + Secrets.sha256(Array(deliveryID.utf8)).prefix(16)
        var lines = [
            "From: " + Self.mailbox(from),
            "To: " + to,
            "Subject: " + Self.headerText(subject),
            "Date: " + Self.date(date),
            "Message-ID: <" + deliveryID + "@" + MailAddress.domain(from.address) + ">",
            "MIME-Version: 1.0",
            // RFC 3834: no vacation replies or bounces to an automatic message.
            "Auto-Submitted: auto-generated",
            "X-Auto-Response-Suppress: All",
            "Content-Type: multipart/alternative; boundary=\"\(boundary)\"",
            "",
            "This is a MIME message: a text part and an HTML part.",
            "",
        ]
        for (type, body) in [("text/plain", textBody()), ("text/html", htmlBody())] {
            lines += [
                "--" + boundary, "Content-Type: \(type); charset=UTF-8", "Content-Transfer-Encoding: base64", "",
                Self.base64Lines(Array(body.utf8)), "",
            ]
        }
        lines.append("--" + boundary + "--")
        return lines.joined(separator: "\n") + "\n"
    }

    /// The table of what happened: (label, value) with the values cleaned and bounded.
    var facts: [(String, String)] {
        var rows: [(String, String)] = [
            ("Severity", message.severity.rawValue), ("Rule", Self.clean(message.rule, Self.longestValue)),
            ("Person", Self.clean(shownUser ?? "unknown", Self.longestValue)),
        ]
        if let group = message.group { rows.append(("Group", Self.clean(group, Self.longestValue))) }
        if let room = message.room { rows.append(("Room", Self.clean(room, Self.longestValue))) }
        if let machine = message.machine { rows.append(("Machine", Self.clean(machine, Self.longestValue))) }
        rows.append(("When", RecordTime.format(milliseconds: message.time)))
        rows.append(("What the filter did", message.action == "block" ? "blocked it" : message.action == "allow" ? "allowed it" : Self.clean(message.action, 20)))
        if let host = message.host { rows.append(("Site", Self.clean(host, Self.longestValue))) }
        if let url = message.url { rows.append(("Address", Self.clean(url, Self.longestURL))) }
        if let category = message.category { rows.append(("Category", Self.clean(category, Self.longestValue))) }
        if let term = message.searchTerm { rows.append(("Searched for", Self.clean(term, Self.longestValue))) }
        return rows
    }

    static let footer =
        "You receive this as a safeguarding lead for this room or group, or as one of the group's escalation contacts. "
        + "Sent by the school's hallpass server; do not reply to it."

    func textBody() -> String {
        var text = "hallpass safeguarding alert: \(message.severity.rawValue.uppercased())\n\n"
        let width = facts.map(\.0.count).max() ?? 0
        for (label, value) in facts { text += label + ":" + String(repeating: " ", count: width - label.count + 1) + value + "\n" }
        text += "\n"
        if let timelineLink { text += "The person's timeline: \(timelineLink)\n" }
        text += "This alert in the console: \(alertLink)\n\n"
        text += Self.footer + "\n"
        return text
    }

    func htmlBody() -> String {
        let colour = ["danger": "#b00020", "caution": "#8a5300", "advisory": "#1a4f8b"][message.severity.rawValue] ?? "#000000"
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>\(Self.html(subject))</title></head>
            <body style="font-family: sans-serif; line-height: 1.4">
            <h1 style="font-size: 1.3em; color: \(colour)">hallpass safeguarding alert: \(Self.html(message.severity.rawValue.uppercased()))</h1>
            <table style="border-collapse: collapse">

            """
        for (label, value) in facts {
            html += "<tr><th style=\"text-align: left; padding: 2px 12px 2px 0; vertical-align: top\">\(Self.html(label))</th>"
            html += "<td style=\"padding: 2px 0; word-break: break-all\">\(Self.html(value))</td></tr>\n"
        }
        html += "</table>\n"
        if let timelineLink { html += "<p><a href=\"\(Self.html(timelineLink))\">Open the person's timeline in the console</a></p>\n" }
        html += "<p><a href=\"\(Self.html(alertLink))\">Open this alert in the console</a></p>\n"
        html += "<p style=\"color: #555555; font-size: 0.9em\">\(Self.html(Self.footer))</p>\n</body></html>\n"
        return html
    }

    // MARK: Writing values

    /// Every control character (C0, DEL, C1, and the Unicode line and
    /// paragraph separators) made a space, at most `limit` characters.
    static func clean(_ text: String, _ limit: Int) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            let value = scalar.value
            let control = value < 0x20 || (0x7f...0x9f).contains(value) || value == 0x2028 || value == 0x2029
            scalars.append(control ? " " : scalar)
        }
        let cleaned = String(scalars)
        return cleaned.count > limit ? String(cleaned.prefix(limit - 1)) + "…" : cleaned
    }

    /// HTML text and attribute values: the five characters that matter escaped.
    static func html(_ text: String) -> String {
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

    /// A header's free text (RFC 2047): as it is when it is printable ASCII,
    /// short enough for one line, and holds nothing a reader would decode;
    /// else UTF-8 encoded-words of at most 75 characters, one a line, the
    /// lines folded with a space. Control characters become spaces first.
    static func headerText(_ text: String) -> String {
        let cleaned = clean(text, 400)
        let plain = cleaned.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7f }
        if plain, cleaned.utf8.count <= 66, !cleaned.contains("=?") { return cleaned }
        // 42 bytes of UTF-8 are 56 characters of base64: with `=?UTF-8?B?` and `?=` a word of 68,
        // and `Subject: ` before the first, 77: every line within RFC 5322's 78.
        var words: [String] = []
        var chunk: [UInt8] = []
        // Whole characters in each word (RFC 2047 6.3): split between scalars, never inside one's UTF-8.
        for scalar in cleaned.unicodeScalars {
            let bytes = Array(String(scalar).utf8)
            if chunk.count + bytes.count > 42 {
                words.append("=?UTF-8?B?" + Data(chunk).base64EncodedString() + "?=")
                chunk = []
            }
            chunk += bytes
        }
        if !chunk.isEmpty { words.append("=?UTF-8?B?" + Data(chunk).base64EncodedString() + "?=") }
        return words.joined(separator: "\n ")
    }

    /// `From:`'s mailbox: `address`, `Name <address>`, `"Name" <address>` when
    /// the name holds specials, or an encoded-word name when it is not ASCII.
    static func mailbox(_ sender: AlertsConfiguration.Sender) -> String {
        guard let name = sender.name, !name.isEmpty else { return sender.address }
        let cleaned = clean(name, 100)
        let ascii = cleaned.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7f }
        guard ascii, !cleaned.contains("=?") else { return headerText(cleaned).replacingOccurrences(of: "\n ", with: " ") + " <\(sender.address)>" }
        let atext = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~ ".unicodeScalars)
        if cleaned.unicodeScalars.allSatisfy({ atext.contains($0) }) { return "\(cleaned) <\(sender.address)>" }
        // A quoted string: `"` and `\` were refused with the configuration, but are escaped all the same.
        let quoted = cleaned.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        return "\"\(quoted)\" <\(sender.address)>"
    }

    /// RFC 5322 date-time in UTC: `Sun, 29 Nov 2026 10:00:00 +0000`.
    static func date(_ seconds: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss '+0000'"
        return formatter.string(from: Date(timeIntervalSince1970: TimeInterval(seconds)))
    }

    /// Base64 in lines of 76 characters (RFC 2045).
    static func base64Lines(_ bytes: [UInt8]) -> String {
        let text = Data(bytes).base64EncodedString()
        var lines: [Substring] = []
        var start = text.startIndex
        while start < text.endIndex {
            let end = text.index(start, offsetBy: 76, limitedBy: text.endIndex) ?? text.endIndex
            lines.append(text[start..<end])
            start = end
        }
        return lines.joined(separator: "\n")
    }
}
