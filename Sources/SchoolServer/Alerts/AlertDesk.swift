import Foundation
import VerdictCore

/// The safeguarding alerts for the API and the console alike: a principal
/// sees the alerts of its scope (the alert's room, or its person's group;
/// any other is not found) when its role may view alerts (`viewAlerts`),
/// and moves them through triage when it may triage (`triageAlerts`). Each
/// step is written to the audit trail with its note (`alert.acknowledge`,
/// `alert.escalate`, `alert.close`); closing needs a note.
public struct AlertDesk: Sendable {
    let storage: any ServerStorage
    let clock: @Sendable () -> Int64

    /// The longest note kept with a step, in characters.
    public static let maximumNote = 2000

    public init(storage: any ServerStorage, clock: @escaping @Sendable () -> Int64) {
        self.storage = storage
        self.clock = clock
    }

    /// A triage step, as the API's paths and the audit trail name them.
    public enum Step: String, Sendable, Hashable, CaseIterable {
        case acknowledge, escalate, close

        public var state: StoredAlert.State {
            switch self {
            case .acknowledge: .acknowledged
            case .escalate: .escalated
            case .close: .closed
            }
        }
    }

    /// One page of the alerts `query` asks for, within the principal's scope (applied in the query).
    public func alerts(_ query: AlertQuery, for principal: Principal) async throws -> AlertPage {
        guard principal.may(.viewAlerts) else { throw APIError.roleForbidden(principal.role) }
        var query = query
        query.scope = principal.scope
        return try await storage.alerts(query)
    }

    /// The alert `id` when the principal may see it; nil otherwise (not found, or not in scope).
    public func alert(_ id: String, for principal: Principal) async throws -> StoredAlert? {
        guard principal.may(.viewAlerts) else { throw APIError.roleForbidden(principal.role) }
        guard Secrets.isAlertID(id), let alert = try await storage.alert(id: id) else { return nil }
        return principal.scope.contains(room: alert.room, group: alert.group) ? alert : nil
    }

    public func triage(_ id: String, _ step: Step, note: String?, by principal: Principal) async throws -> StoredAlert {
        guard principal.may(.triageAlerts) else { throw APIError.roleForbidden(principal.role) }
        let note = try Self.note(note)
        if step == .close, note == nil {
            throw APIError(.unprocessableContent, "note-required", "closing an alert needs a note: what was done, or why nothing needed doing")
        }
        guard let alert = try await alert(id, for: principal) else { throw Self.notFound }
        let now = clock()
        guard let moved = try await storage.triageAlert(id: alert.id, to: step.state, note: note, by: principal.author, now: now) else {
            // Another step came first (two people at once), or the alert is past this step.
            let current = try await storage.alert(id: alert.id) ?? alert
            throw APIError(
                .conflict, "alert-state",
                "the alert is \(current.state.rawValue)\(current.updatedBy.map { " (by \($0))" } ?? ""); it cannot be \(step.state.rawValue) from there")
        }
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: principal.author, action: "alert.\(step.rawValue)", target: moved.id, reason: note,
                // No student's name: the audit trail is read by roles that see pseudonyms (the alert's id leads to it).
                detail: "rule=\(moved.ruleID) severity=\(moved.severity.rawValue) from=\(alert.state.rawValue) room=\(moved.room)"))
        return moved
    }

    static let notFound = APIError(.notFound, "not-found", "no alert has this id in this account's rooms and groups")

    /// Trimmed; nil when empty; at most `maximumNote` characters, no control characters but line ends and tabs.
    static func note(_ text: String?) throws -> String? {
        guard let trimmed = text?.trimmingCharacters(in: .whitespacesAndNewlines), !trimmed.isEmpty else { return nil }
        guard trimmed.count <= maximumNote else { throw APIError.badRequest("note is at most \(maximumNote) characters") }
        guard !trimmed.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && $0 != "\n" && $0 != "\r" && $0 != "\t" })
        else { throw APIError.badRequest("note contains a control character") }
        return trimmed
    }
}
