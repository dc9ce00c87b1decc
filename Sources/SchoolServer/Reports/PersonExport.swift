import Foundation
import NIOCore

/// Everything the server holds about one user name, as one JSON document,
/// for a subject access request (docs/safeguarding.md, "A person's
/// records"): their connection records (oldest first), the safeguarding
/// alerts about them with their triage (newest first) and their access
/// requests with the decisions on them (newest first), within the scope of
/// whoever asks. Written a page at a time, so that a person with a year of
/// records never sits in memory whole. A name that holds nothing gives the
/// document with empty lists.
struct PersonExport: Sendable {
    let storage: any ServerStorage

    /// Rows a page: each is a few hundred bytes of JSON.
    static let pageSize = 500
    /// The longest user name asked for, in characters (as the records query's `user`).
    static let maxUserCharacters = 256

    /// The document's opening fields.
    struct Heading: Encodable {
        let user: String
        let exported: String
        let exportedBy: String
        let scope: Scope
    }

    /// A user name from a path or a form: percent-decoded, not empty, at
    /// most `maxUserCharacters`, no control character (below U+0020, U+007F).
    static func userName(_ text: String?, percentEncoded: Bool) -> String? {
        guard let text, let name = percentEncoded ? text.removingPercentEncoding : text else { return nil }
        guard !name.isEmpty, name.count <= maxUserCharacters, !name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else { return nil }
        return name
    }

    /// A file name for the download: the user's name when it is plain, else `person`.
    static func fileName(_ user: String) -> String {
        let plain = user.utf8.count <= 64 && user.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "._-".unicodeScalars.contains($0)) }
        return "hallpass-export-\(plain && !user.hasPrefix(".") ? user : "person").json"
    }

    /// Writes the document to `sink`, a page at a time.
    func write(user: String, scope: Scope, by author: String, now: Int64, to sink: (ByteBuffer) async throws -> Void) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        func json(_ value: some Encodable) throws -> String { String(decoding: try encoder.encode(value), as: UTF8.self) }
        // The heading's fields, then the lists, each its own key.
        let heading = try json(Heading(user: user, exported: RecordTime.format(milliseconds: now * 1000), exportedBy: author, scope: scope))
        try await sink(ByteBuffer(string: String(heading.dropLast()) + ",\"records\":["))

        var first = true
        func page(_ items: [String]) -> ByteBuffer {
            var text = ""
            for item in items {
                if !first { text += "," }
                first = false
                text += item
            }
            return ByteBuffer(string: text)
        }

        var recordCursor: RecordCursor?
        repeat {
            let records = try await storage.queryRecords(RecordQuery(user: user, after: recordCursor, limit: Self.pageSize, scope: scope))
            try await sink(page(try records.records.map { try json(RecordRoutes.RecordView($0)) }))
            recordCursor = records.next
        } while recordCursor != nil

        try await sink(ByteBuffer(string: "],\"alerts\":["))
        first = true
        var alertCursor: AlertCursor?
        repeat {
            let alerts = try await storage.alerts(AlertQuery(user: user, after: alertCursor, limit: Self.pageSize, scope: scope))
            try await sink(page(try alerts.alerts.map { try json(AlertView($0)) }))
            alertCursor = alerts.next
        } while alertCursor != nil

        try await sink(ByteBuffer(string: "],\"accessRequests\":["))
        first = true
        var requestCursor: AccessRequestCursor?
        while true {
            let requests = try await storage.accessRequests(
                AccessRequestQuery(state: nil, user: user, scope: scope, limit: Self.pageSize, before: requestCursor))
            try await sink(page(try requests.map { try json(AccessRequestRoutes.RequestView($0)) }))
            guard requests.count == Self.pageSize, let last = requests.last else { break }
            requestCursor = AccessRequestCursor(last)
        }
        try await sink(ByteBuffer(string: "]}"))
    }
}
