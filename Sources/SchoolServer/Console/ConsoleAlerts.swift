import Foundation
import Hummingbird
import NIOCore
import VerdictCore

/// The safeguarding alerts in the console (docs/console.md, "Alerts"): the
/// queue of the principal's scope, newest first, filtered by state and
/// severity, and an alert's page with what the record showed, a link to the
/// student's timeline, where its email and webhook stand, and the triage
/// forms (acknowledge, escalate, close with a note). Every step goes
/// through the `AlertDesk`, as the API's do, and so into the audit trail.
extension ConsoleRoutes {
    static let alertsShown = 50

    func addAlerts(to console: RouterGroup<ServerRequestContext>) {
        console.get("alerts") { request, context in try await page(request, context, .viewAlerts) { try await alerts(request, $0, $1) } }
        console.get("alerts/{id}") { request, context in
            try await page(request, context, .viewAlerts) { try await alert(context, $0, $1, status: .ok, problem: nil) }
        }
        for step in AlertDesk.Step.allCases {
            console.post("alerts/{id}/\(step.rawValue)") { request, context in
                try await change(request, context, .triageAlerts) { try await triage(context, $0, $1, $2, step: step) }
            }
        }
    }

    var alertDesk: AlertDesk { AlertDesk(storage: storage, clock: clock) }

    /// The strings' key for a value: `severityDanger` for ("severity", "danger"); keys are letters and digits.
    static func stringKey(_ prefix: String, _ value: String) -> String {
        prefix + value.prefix(1).uppercased() + value.dropFirst()
    }

    /// Which states the queue shows: `open` (everything not closed, the
    /// default), one state, or `all`.
    static func alertStates(_ text: String?) -> (key: String, states: Set<StoredAlert.State>?)? {
        switch text {
        case nil, "", "open": return ("open", [.new, .acknowledged, .escalated])
        case "all": return ("all", nil)
        case let text?:
            guard let state = StoredAlert.State(rawValue: text) else { return nil }
            return (text, [state])
        }
    }

    func alerts(_ request: Request, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        guard let form = ConsoleForm(request.uri.query ?? ""), let states = Self.alertStates(form["state"]) else {
            return renderer.message(status: .badRequest, titleKey: "titleRefused", messageKey: "errorForm", viewer: viewer)
        }
        var severity: SafeguardingSeverity?
        if let text = form["severity"], !text.isEmpty {
            guard let chosen = SafeguardingSeverity(rawValue: text) else {
                return renderer.message(status: .badRequest, titleKey: "titleRefused", messageKey: "errorForm", viewer: viewer)
            }
            severity = chosen
        }
        var after: AlertCursor?
        if let token = form["after"] {
            guard let cursor = AlertCursor(token: token) else {
                return renderer.message(status: .badRequest, titleKey: "titleRefused", messageKey: "errorForm", viewer: viewer)
            }
            after = cursor
        }
        let page = try await alertDesk.alerts(
            AlertQuery(states: states.states, severity: severity, after: after, limit: Self.alertsShown), for: principal)
        let names = try await names(for: principal)
        let rows = page.alerts.map { alert in
            AlertsPage.Row(
                id: alert.id, href: "/console/alerts/" + alert.id, time: time.dateTime(alert.time), severity: alert.severity.rawValue,
                severityLabel: t[Self.stringKey("severity", alert.severity.rawValue)] ?? alert.severity.rawValue, rule: alert.ruleID,
                user: names.show(alert.user) ?? "-", group: alert.group ?? "-", room: alert.room,
                what: alert.searchTerm.map { "“\($0)”" } ?? alert.host ?? "-", action: t[Self.stringKey("action", alert.action)] ?? alert.action,
                state: alert.state.rawValue, stateLabel: t[Self.stringKey("alertState", alert.state.rawValue)] ?? alert.state.rawValue)
        }
        func query(_ state: String, _ severity: String?, _ after: String?) -> String {
            var parts = ["state=" + state]
            if let severity { parts.append("severity=" + severity) }
            if let after { parts.append("after=" + (after.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? after)) }
            return "/console/alerts?" + parts.joined(separator: "&")
        }
        let stateOptions = ["open", "new", "acknowledged", "escalated", "closed", "all"].map {
            AlertsPage.Option(value: $0, label: t[Self.stringKey("alertFilter", $0)] ?? $0, selected: $0 == states.key)
        }
        let severityOptions = [AlertsPage.Option(value: "", label: t["alertFilterAnySeverity"] ?? "", selected: severity == nil)]
            + SafeguardingSeverity.allCases.map {
                AlertsPage.Option(value: $0.rawValue, label: t[Self.stringKey("severity", $0.rawValue)] ?? $0.rawValue, selected: $0 == severity)
            }
        let deliveries = try await deliverySummary(t)
        let model = AlertsPage(
            scopeText: scopeNote(principal.scope, t), states: stateOptions, severities: severityOptions, hasRows: !rows.isEmpty, rows: rows,
            next: page.next.map { query(states.key, severity?.rawValue, $0.token) }, deliveries: deliveries)
        return renderer.response("alerts", title: t["titleAlerts"] ?? "", page: model, viewer: viewer, current: .alerts)
    }

    /// "3 emails waiting to be sent, 1 failed" (nil when nothing waits or failed).
    func deliverySummary(_ t: [String: String]) async throws -> String? {
        let counts = try await storage.alertDeliveryCounts()
        let waiting = counts.filter { $0.state == .waiting }.reduce(0) { $0 + $1.count }
        let failed = counts.filter { $0.state == .failed }.reduce(0) { $0 + $1.count }
        guard waiting > 0 || failed > 0 else { return nil }
        return ConsoleText.fill(t["alertDeliveriesProblem"] ?? "", ["waiting": String(waiting), "failed": String(failed)])
    }

    func alert(
        _ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer, status: HTTPResponse.Status, problem: String?
    ) async throws -> Response {
        let t = renderer.table(viewer)
        guard let id = context.parameters.get("id"), let alert = try await alertDesk.alert(id, for: principal) else {
            return renderer.notFound(viewer)
        }
        let names = try await names(for: principal)
        let shown = names.show(alert.user)
        var timeline: String?
        if let shown, principal.may(.viewTimeline) {
            // The day of the alert: the record and what came just before it.
            let day = time.day(alert.time)
            timeline = "/console/timeline?user=" + (shown.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? shown)
                + "&since=\(day)&until=\(day)"
        }
        let hostname = try await storage.machine(id: alert.machine)?.hostname ?? alert.machine
        var pairs: [AlertPageModel.Pair] = [
            .init(label: t["alertTime"] ?? "", value: time.dateTime(alert.time)),
            .init(label: t["alertSeverity"] ?? "", value: t[Self.stringKey("severity", alert.severity.rawValue)] ?? alert.severity.rawValue),
            .init(label: t["alertRule"] ?? "", value: alert.ruleID),
            .init(label: t["user"] ?? "", value: shown ?? "-"),
            .init(label: t["group"] ?? "", value: alert.group ?? "-"),
            .init(label: t["room"] ?? "", value: alert.room),
            .init(label: t["machine"] ?? "", value: hostname),
            .init(label: t["alertFlow"] ?? "", value: t[Self.stringKey("action", alert.action)] ?? alert.action),
        ]
        if let term = alert.searchTerm { pairs.append(.init(label: t["alertSearchTerm"] ?? "", value: term)) }
        if let host = alert.host { pairs.append(.init(label: t["host"] ?? "", value: host)) }
        if let url = alert.url { pairs.append(.init(label: t["alertURL"] ?? "", value: url)) }
        if let category = alert.category { pairs.append(.init(label: t["category"] ?? "", value: category)) }
        pairs.append(.init(label: t["alertStateLabel"] ?? "", value: t[Self.stringKey("alertState", alert.state.rawValue)] ?? alert.state.rawValue))
        if let note = alert.note { pairs.append(.init(label: t["alertNote"] ?? "", value: note)) }
        if let by = alert.updatedBy, let at = alert.updatedAt {
            pairs.append(.init(label: t["alertLastStep"] ?? "", value: "\(by), \(time.dateTime(at * 1000))"))
        }
        let deliveries = try await storage.alertDeliveries(alertID: alert.id).map { delivery in
            AlertPageModel.Delivery(
                channel: t[Self.stringKey("deliveryChannel", delivery.channel.rawValue)] ?? delivery.channel.rawValue,
                // An address names a member of staff; only the roles that manage people see whom it went to.
                target: principal.may(.viewPeople) ? delivery.target : "",
                state: delivery.state.rawValue, stateLabel: t[Self.stringKey("deliveryState", delivery.state.rawValue)] ?? delivery.state.rawValue,
                attempts: String(delivery.attempts), detail: delivery.lastError ?? delivery.sentAt.map { time.dateTime($0 * 1000) } ?? "")
        }
        let canTriage = principal.may(.triageAlerts) && alert.state != .closed
        let model = AlertPageModel(
            id: alert.id, pairs: pairs, timeline: timeline, deliveries: deliveries, hasDeliveries: !deliveries.isEmpty, problem: problem,
            canAcknowledge: canTriage && alert.state == .new, canEscalate: canTriage && alert.state != .escalated, canClose: canTriage,
            acknowledgePath: "/console/alerts/\(alert.id)/acknowledge", escalatePath: "/console/alerts/\(alert.id)/escalate",
            closePath: "/console/alerts/\(alert.id)/close")
        return renderer.response(
            "alert", status: status, title: ConsoleText.fill(t["titleAlert"] ?? "", ["rule": alert.ruleID]), page: model, viewer: viewer,
            current: .alerts)
    }

    func triage(
        _ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm, step: AlertDesk.Step
    ) async throws -> Response {
        guard let id = context.parameters.get("id") else { return renderer.notFound(viewer) }
        do {
            _ = try await alertDesk.triage(id, step, note: form["note"], by: principal)
        } catch let error as APIError where error.status == .notFound {
            return renderer.notFound(viewer)
        } catch let error as APIError {
            // The page again, with why (a note missing, someone else's step first).
            return try await alert(context, principal, viewer, status: error.status, problem: error.message)
        }
        return Self.redirect("/console/alerts/\(id)?done=alert-\(step.rawValue)")
    }
}

/// The queue of alerts.
struct AlertsPage {
    struct Option {
        let value: String
        let label: String
        let selected: Bool
    }

    struct Row {
        let id: String
        let href: String
        let time: String
        let severity: String
        let severityLabel: String
        let rule: String
        let user: String
        let group: String
        let room: String
        /// The search term in quotes, or the host.
        let what: String
        let action: String
        let state: String
        let stateLabel: String
    }

    let scopeText: String?
    let states: [Option]
    let severities: [Option]
    let hasRows: Bool
    let rows: [Row]
    let next: String?
    /// Emails or webhooks waiting or failed, said on the queue so that nobody trusts a silent mailbox.
    let deliveries: String?
}

/// One alert and its triage forms.
struct AlertPageModel {
    struct Pair {
        let label: String
        let value: String
    }

    struct Delivery {
        let channel: String
        let target: String
        let state: String
        let stateLabel: String
        let attempts: String
        let detail: String
    }

    let id: String
    let pairs: [Pair]
    let timeline: String?
    let deliveries: [Delivery]
    let hasDeliveries: Bool
    let problem: String?
    let canAcknowledge: Bool
    let canEscalate: Bool
    let canClose: Bool
    let acknowledgePath: String
    let escalatePath: String
    let closePath: String
}
