import Foundation
import Hummingbird
import NIOCore
import VerdictCore

/// The safeguarding alerts for the school's tools (`/api/v1/alerts`): the
/// queue and each alert for a token that may view alerts, and the triage
/// steps for one that may triage them, within the token's scope. Each route
/// maps the request to one call of the `AlertDesk`, which the console uses too.
struct AlertRoutes {
    let desk: AlertDesk

    func add(to router: Router<ServerRequestContext>) {
        let reading = router.group("/api/v1/alerts").add(middleware: APITokenMiddleware(storage: desk.storage, permission: .viewAlerts))
        reading.get { request, context in try await list(request, context) }
        reading.get(":id") { _, context in
            guard let alert = try await desk.alert(try Self.id(context), for: try Self.principal(context)) else { throw AlertDesk.notFound }
            return AlertView(alert)
        }
        let triage = router.group("/api/v1/alerts").add(middleware: APITokenMiddleware(storage: desk.storage, permission: .triageAlerts))
        for step in AlertDesk.Step.allCases {
            triage.post(":id/\(step.rawValue)") { request, context in
                let note = try await Self.note(request, context)
                return AlertView(try await desk.triage(try Self.id(context), step, note: note, by: try Self.principal(context)))
            }
        }
    }

    static func principal(_ context: ServerRequestContext) throws -> Principal {
        guard let principal = context.principal else { throw APIError.unauthorized }
        return principal
    }

    static func id(_ context: ServerRequestContext) throws -> String {
        guard let id = context.parameters.get("id") else { throw AlertDesk.notFound }
        return id
    }

    struct NoteBody: Decodable {
        let note: String?
    }

    /// The step's note: from a form (`note=...`, as a page's form posts it)
    /// or JSON (`{"note": "..."}`); an empty body has none.
    static func note(_ request: Request, _ context: ServerRequestContext) async throws -> String? {
        var request = request
        let body: ByteBuffer
        do {
            // 2,000 characters of up to 4 bytes each, escaped, and the rest of a small form.
            body = try await request.collectBody(upTo: 64 << 10)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError(.contentTooLarge, "too-large", "a triage step's body is at most 64 KiB")
        }
        let bytes = Array(buffer: body)
        guard bytes.contains(where: { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }) else { return nil }
        let contentType = request.headers[.contentType]?.lowercased() ?? ""
        if contentType.hasPrefix("application/x-www-form-urlencoded") {
            guard let text = String(validating: bytes, as: UTF8.self), let form = ConsoleForm(text) else {
                throw APIError.badRequest("the form does not decode (percent-escapes of UTF-8 text)")
            }
            return form["note"]
        }
        do {
            return try JSONDecoder().decode(NoteBody.self, from: Data(bytes)).note
        } catch let error as DecodingError {
            throw APIError.badRequest("the JSON body does not fit: \(DecodingErrorText.describe(error))")
        }
    }

    // MARK: The list

    struct ListResponse: ResponseEncodable {
        let alerts: [AlertView]
        /// Absent on the last page.
        let next: String?
    }

    func list(_ request: Request, _ context: ServerRequestContext) async throws -> ListResponse {
        let parameters = request.uri.queryParameters.map { (String($0.key), String($0.value)) }
        let query = try AlertsRequest.parse(parameters).get()
        let page = try await desk.alerts(query, for: try Self.principal(context))
        return ListResponse(alerts: page.alerts.map(AlertView.init), next: page.next?.token)
    }
}

/// An alert as the API shows it.
struct AlertView: ResponseEncodable, Decodable, Sendable {
    let id: String
    /// The record's time (RFC 3339, milliseconds).
    let time: String
    let created: String
    let machine: String
    let room: String
    let user: String?
    let group: String?
    let rule: String
    let severity: SafeguardingSeverity
    let action: String
    let host: String?
    let url: String?
    let category: String?
    let searchTerm: String?
    let sequence: Int64
    let state: StoredAlert.State
    let note: String?
    let updated: String?
    let updatedBy: String?

    init(_ alert: StoredAlert) {
        id = alert.id
        time = RecordTime.format(milliseconds: alert.time)
        created = RecordTime.format(milliseconds: alert.createdAt * 1000)
        machine = alert.machine
        room = alert.room
        user = alert.user
        group = alert.group
        rule = alert.ruleID
        severity = alert.severity
        action = alert.action
        host = alert.host
        url = alert.url
        category = alert.category
        searchTerm = alert.searchTerm
        sequence = alert.recordSequence
        state = alert.state
        note = alert.note
        updated = alert.updatedAt.map { RecordTime.format(milliseconds: $0 * 1000) }
        updatedBy = alert.updatedBy
    }
}

/// An alerts list as the query string asks it, checked before anything
/// reaches the storage (as `RecordsRequest`).
struct AlertsRequest {
    /// Each parameter and its longest value, in characters (docs/api/openapi.yaml says the same).
    static let maxLengths: [String: Int] = [
        "state": 12, "severity": 8, "user": 256, "since": 64, "until": 64, "limit": 4, "cursor": 128,
    ]
    static let defaultLimit = 100
    static let maxLimit = 1000

    static func parse(_ parameters: [(String, String)]) -> Result<AlertQuery, APIError> {
        var values: [String: String] = [:]
        for (name, value) in parameters where !(name.isEmpty && value.isEmpty) {
            guard let maxLength = maxLengths[name] else {
                let known = maxLengths.keys.sorted().joined(separator: ", ")
                return .failure(.badRequest("unknown query parameter '\(name.prefix(40))'; the alerts list takes \(known)"))
            }
            guard values[name] == nil else { return .failure(.badRequest("the query parameter \(name) is given more than once")) }
            guard !value.isEmpty else { return .failure(.badRequest("the query parameter \(name) is empty")) }
            guard value.unicodeScalars.count <= maxLength else {
                return .failure(.badRequest("the query parameter \(name) is longer than \(maxLength) characters"))
            }
            guard value.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
                return .failure(.badRequest("the query parameter \(name) holds a control character"))
            }
            values[name] = value
        }
        var query = AlertQuery(limit: defaultLimit)
        if let state = values["state"] {
            switch state {
            case "all": query.states = nil
            // The queue: what still asks for someone.
            case "open": query.states = [.new, .acknowledged, .escalated]
            default:
                guard let one = StoredAlert.State(rawValue: state) else {
                    return .failure(.badRequest("state must be new, acknowledged, escalated, closed, open or all"))
                }
                query.states = [one]
            }
        }
        if let severity = values["severity"] {
            guard let parsed = SafeguardingSeverity(rawValue: severity) else {
                return .failure(.badRequest("severity must be danger, caution or advisory"))
            }
            query.severity = parsed
        }
        query.user = values["user"]
        for name in ["since", "until"] {
            guard let text = values[name] else { continue }
            guard let milliseconds = RecordTime.milliseconds(text) else {
                return .failure(.badRequest("\(name) must be an RFC 3339 time such as 2025-11-28T08:00:00Z, not '\(text)'"))
            }
            if name == "since" { query.since = milliseconds } else { query.until = milliseconds }
        }
        if let text = values["limit"] {
            guard text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let limit = Int(text), (1...maxLimit).contains(limit) else {
                return .failure(.badRequest("limit must be a whole number from 1 to \(maxLimit)"))
            }
            query.limit = limit
        }
        if let token = values["cursor"] {
            guard let cursor = AlertCursor(token: token) else {
                return .failure(.badRequest("cursor is not one this server gave out; pass the next value of the page before unchanged"))
            }
            query.after = cursor
        }
        return .success(query)
    }
}
