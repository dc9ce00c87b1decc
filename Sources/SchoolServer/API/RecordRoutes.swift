import Foundation
import Hummingbird
import Logging
import NIOCore

/// `GET /api/v1/records`: the school's records, filtered and paged, as JSON
/// or CSV, for API tokens whose role may view records, within the token's scope.
struct RecordRoutes {
    let storage: any ServerStorage

    func add(to router: Router<ServerRequestContext>) {
        router.group("/api/v1/records")
            .add(middleware: APITokenMiddleware(storage: storage, permission: .viewRecords))
            .get { request, context in try await records(request, context) }
    }

    func records(_ request: Request, _ context: ServerRequestContext) async throws -> Response {
        let parameters = request.uri.queryParameters.map { (String($0.key), String($0.value)) }
        var asked = try RecordsRequest.parse(parameters, accept: request.headers[.accept]).get()
        // Nil only if a route forgot its middleware: then nothing, rather than everything.
        let scope = context.principal?.scope ?? Scope(rooms: [""])
        try Self.checkFilters(asked.query, within: scope)
        asked.query.scope = scope
        let page = try await storage.queryRecords(asked.query)
        var headers: HTTPFields = [:]
        // The next page's cursor travels in a header too: the only place a CSV answer has for it.
        if let next = page.next { headers[RecordsRequest.nextHeader] = next.token }
        switch asked.format {
        case .json:
            headers[.contentType] = "application/json"
            let body = RecordsBody(records: page.records.map(RecordView.init), next: page.next?.token)
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(body))))
        case .csv:
            headers[.contentType] = "text/csv; charset=utf-8; header=present"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: RecordsCSV.render(page.records))))
        }
    }

    /// A room or group asked for that the scope can never match (a room
    /// outside a scope of rooms only, a group outside a scope of groups
    /// only) is refused, not answered empty: the asker learns it may not
    /// look there. Other filters are narrowed by the scope in the query.
    static func checkFilters(_ query: RecordQuery, within scope: Scope) throws {
        guard !scope.isWholeSchool else { return }
        if let room = query.room, !scope.rooms.contains(room), scope.groups.isEmpty {
            throw APIError.scopeForbidden("the room \(room.prefix(64)) is not in this token's scope (rooms \(scope.rooms.joined(separator: ", ")))")
        }
        if let group = query.group, !scope.groups.contains(group), scope.rooms.isEmpty {
            throw APIError.scopeForbidden("the group \(group.prefix(64)) is not in this token's scope (groups \(scope.groups.joined(separator: ", ")))")
        }
    }

    struct RecordsBody: Encodable {
        let records: [RecordView]
        /// Absent on the last page.
        let next: String?
    }

    /// A record as the API shows it: the machine's fields and where it came from.
    struct RecordView: Encodable {
        let machine: String
        let room: String
        let hostname: String
        let sequence: Int64
        let time: String
        let uid: Int64?
        let user: String?
        let group: String?
        let kind: String?
        let host: String?
        let url: String?
        let destination: String?
        let port: Int64?
        let action: String
        let category: String?
        let rule: String?
        let reason: String?
        let rulesVersion: Int64?

        init(_ queried: QueriedRecord) {
            let record = queried.stored.record
            machine = queried.stored.machine
            room = queried.room
            hostname = queried.hostname
            sequence = record.sequence
            time = RecordTime.format(milliseconds: queried.stored.timeMilliseconds)
            uid = record.uid
            user = record.user
            group = record.group
            kind = record.kind
            host = record.host
            url = record.url
            destination = record.destination
            port = record.port
            action = record.action
            category = record.category
            rule = record.rule
            reason = record.reason
            rulesVersion = record.rulesVersion
        }
    }
}

/// A records request as the query string and Accept header ask it, checked
/// before anything reaches the storage. Pure, so that the bounds are tested
/// apart from the server.
struct RecordsRequest: Sendable, Hashable {
    enum Format: String, Sendable, Hashable { case json, csv }

    var query: RecordQuery
    var format: Format

    static let nextHeader = HTTPFields.Element.Name("Hallpass-Next")!

    /// Each parameter and its longest value, in characters (docs/api/openapi.yaml says the same).
    static let maxLengths: [String: Int] = [
        "since": 64, "until": 64, "user": 256, "machine": 22, "room": 64, "group": 256, "action": 5, "category": 256,
        "cursor": 128, "limit": 4, "format": 4,
    ]
    static let defaultLimit = 100
    static let maxLimit = 1000

    static func parse(_ parameters: [(String, String)], accept: String?) -> Result<RecordsRequest, APIError> {
        var values: [String: String] = [:]
        // `?` alone, or `&&`: nothing asked.
        for (name, value) in parameters where !(name.isEmpty && value.isEmpty) {
            guard let maxLength = maxLengths[name] else {
                let known = maxLengths.keys.sorted().joined(separator: ", ")
                return .failure(.badRequest("unknown query parameter '\(name.prefix(40))'; the records query takes \(known)"))
            }
            guard values[name] == nil else { return .failure(.badRequest("the query parameter \(name) is given more than once")) }
            guard !value.isEmpty else { return .failure(.badRequest("the query parameter \(name) is empty")) }
            guard value.unicodeScalars.count <= maxLength else {
                return .failure(.badRequest("the query parameter \(name) is longer than \(maxLength) characters"))
            }
            // No control characters: PostgreSQL refuses NUL in text, and no record holds one to match.
            guard value.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
                return .failure(.badRequest("the query parameter \(name) holds a control character"))
            }
            values[name] = value
        }
        var query = RecordQuery(limit: defaultLimit)
        for name in ["since", "until"] {
            guard let text = values[name] else { continue }
            guard let milliseconds = RecordTime.milliseconds(text) else {
                return .failure(.badRequest("\(name) must be an RFC 3339 time such as 2025-11-28T08:00:00Z, not '\(text)'"))
            }
            if name == "since" { query.since = milliseconds } else { query.until = milliseconds }
        }
        query.user = values["user"]
        query.room = values["room"]
        query.group = values["group"]
        query.category = values["category"]
        if let machine = values["machine"] {
            guard Secrets.isMachineID(machine) else { return .failure(.badRequest("machine must be a machine id: m- and 20 of a-z, 2-7")) }
            query.machine = machine
        }
        if let action = values["action"] {
            guard action == "block" || action == "allow" else { return .failure(.badRequest("action must be block or allow")) }
            query.action = action
        }
        if let text = values["limit"] {
            guard text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let limit = Int(text), (1...maxLimit).contains(limit) else {
                return .failure(.badRequest("limit must be a whole number from 1 to \(maxLimit)"))
            }
            query.limit = limit
        }
        if let token = values["cursor"] {
            guard let cursor = RecordCursor(token: token) else {
                return .failure(.badRequest("cursor is not one this server gave out; pass the next value of the page before unchanged"))
            }
            query.after = cursor
        }
        let format: Format
        if let text = values["format"] {
            guard let chosen = Format(rawValue: text) else { return .failure(.badRequest("format must be json or csv")) }
            format = chosen
        } else {
            format = prefersCSV(accept: accept) ? .csv : .json
        }
        return .success(RecordsRequest(query: query, format: format))
    }

    /// CSV when the Accept header names text/csv (with a q above 0) and names
    /// no application/json before it; JSON otherwise, also for `*/*`.
    static func prefersCSV(accept: String?) -> Bool {
        guard let accept else { return false }
        for range in accept.split(separator: ",") {
            let parts = range.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard let type = parts.first else { continue }
            let refused = parts.dropFirst().contains { $0.hasPrefix("q=") && Double($0.dropFirst(2)) == 0 }
            if refused { continue }
            if type == "text/csv" { return true }
            if type == "application/json" { return false }
        }
        return false
    }
}

/// Records as CSV (RFC 4180): a header line, then one line per record,
/// lines ending in CRLF. A cell with a comma, a quote, CR or LF is quoted,
/// its quotes doubled. A cell a spreadsheet would take for a formula (it
/// begins with `=`, `+`, `-`, `@`, a tab or CR) is written with a `'` before
/// it and quoted: the spreadsheet shows the text and runs nothing. The
/// records hold what users typed and what sites are called, so every cell
/// is treated this way, numbers included (a negative number reads `'-5`).
enum RecordsCSV {
    static let columns = [
        "time", "machine", "room", "hostname", "sequence", "uid", "user", "group", "kind", "host", "url", "destination", "port",
        "action", "category", "rule", "reason", "rulesVersion",
    ]

    static func render(_ records: [QueriedRecord]) -> String {
        var text = columns.joined(separator: ",") + "\r\n"
        for queried in records {
            let record = queried.stored.record
            let cells: [String?] = [
                RecordTime.format(milliseconds: queried.stored.timeMilliseconds), queried.stored.machine, queried.room, queried.hostname,
                String(record.sequence), record.uid.map { String($0) }, record.user, record.group, record.kind, record.host, record.url,
                record.destination, record.port.map { String($0) }, record.action, record.category, record.rule, record.reason,
                record.rulesVersion.map { String($0) },
            ]
            text += cells.map { cell($0 ?? "") }.joined(separator: ",") + "\r\n"
        }
        return text
    }

    static func cell(_ value: String) -> String {
        var value = value
        var quote = false
        if let first = value.unicodeScalars.first, ["=", "+", "-", "@", "\t", "\r"].contains(first) {
            value = "'" + value
            quote = true
        }
        if value.unicodeScalars.contains(where: { $0 == "," || $0 == "\"" || $0 == "\r" || $0 == "\n" }) { quote = true }
        guard quote else { return value }
        return "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
