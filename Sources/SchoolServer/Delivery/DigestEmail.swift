import Foundation

/// A safeguarding digest as an email (RFC 5322 with MIME, RFC 2045-2047,
/// 2183): multipart/mixed holding a multipart/alternative of the text and
/// the HTML, then the PDF as an attachment; every part in base64 (lines of
/// 76), the subject as `AlertEmail` writes a header's text, LF line ends.
///
/// The headers hold the server's own words and checked values only: the
/// address (`MailAddress`), the subject through `AlertEmail.headerText`
/// (control characters made spaces, anything beyond plain ASCII as
/// encoded-words, at most 400 characters), the file name cut to letters,
/// digits, `.`, `_` and `-`. What the records say (people's names, rules)
/// is in the bodies only, in base64, the HTML's escaped by `DigestDocument`.
public struct DigestEmail: Sendable {
    public var document: DigestDocument
    public var from: AlertsConfiguration.Sender
    public var to: String
    /// The outbox row's id: the Message-ID, so a message sent twice is one to the reader.
    public var deliveryID: String
    /// Unix seconds: the Date header (when the digest was made).
    public var date: Int64

    /// Throws when `to` is not an address the server sends to.
    public init(document: DigestDocument, from: AlertsConfiguration.Sender, to: String, deliveryID: String, date: Int64) throws(ServerError) {
        if let refusal = MailAddress.refusal(to) { throw ServerError(code: "digests.address", message: refusal) }
        guard (1...128).contains(deliveryID.utf8.count), deliveryID.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f && $0 != ">" })
        else { throw ServerError(code: "digests.message", message: "a delivery's id is 1 to 128 printable ASCII characters") }
        self.document = document
        self.from = from
        self.to = to
        self.deliveryID = deliveryID
        self.date = date
    }

    /// The attachment's file name: `hallpass-weekly-2026-11-23.pdf`, cut to safe characters.
    var fileName: String {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-".unicodeScalars)
        var safe = String.UnicodeScalarView()
        safe.append(contentsOf: document.pdfName.unicodeScalars.filter { allowed.contains($0) }.prefix(80))
        return safe.isEmpty ? "hallpass-digest.pdf" : String(safe)
    }

    /// The whole message, headers and body, LF line ends.
    public func render() -> String {
        // Base64 holds no `=_` (`=` only ends it), and the preambles are the server's own:
        // neither boundary appears anywhere else.
        let tag = Secrets.sha256(Array(deliveryID.utf8)).prefix(16)
        // Short enough that `Content-Type: multipart/alternative; boundary="..."` is within 78.
        let mixed = "=_hallpass_m_" + tag
        let alternative = "=_hallpass_a_" + tag
        var lines = [
            "From: " + AlertEmail.mailbox(from),
            "To: " + to,
            "Subject: " + AlertEmail.headerText(document.subject),
            "Date: " + AlertEmail.date(date),
            "Message-ID: <" + deliveryID + "@" + MailAddress.domain(from.address) + ">",
            "MIME-Version: 1.0",
            // RFC 3834: no vacation replies or bounces to an automatic message.
            "Auto-Submitted: auto-generated",
            "X-Auto-Response-Suppress: All",
            "Content-Type: multipart/mixed; boundary=\"\(mixed)\"",
            "",
            "This is a MIME message: the digest as text and HTML, and as a PDF attached.",
            "",
            "--" + mixed,
            "Content-Type: multipart/alternative; boundary=\"\(alternative)\"",
            "",
        ]
        for (type, body) in [("text/plain", document.text), ("text/html", document.html)] {
            lines += [
                "--" + alternative, "Content-Type: \(type); charset=UTF-8", "Content-Transfer-Encoding: base64", "",
                AlertEmail.base64Lines(Array(body.utf8)), "",
            ]
        }
        lines += [
            "--" + alternative + "--",
            "",
            "--" + mixed,
            "Content-Type: application/pdf; name=\"\(fileName)\"",
            "Content-Transfer-Encoding: base64",
            "Content-Disposition: attachment; filename=\"\(fileName)\"",
            "",
            AlertEmail.base64Lines(document.pdf),
            "",
            "--" + mixed + "--",
        ]
        return lines.joined(separator: "\n") + "\n"
    }
}
