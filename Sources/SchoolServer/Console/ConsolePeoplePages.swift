import Foundation

/// A console account as the people page shows it. The accounts' storage
/// fills these (the lead connects it through `ConsoleRoutes.Sources`).
public struct ConsolePerson: Sendable, Hashable {
    public var login: String
    public var displayName: String?
    public var role: Role
    public var scope: Scope
    /// `local` or `oidc`.
    public var method: String
    public var disabled: Bool
    /// Unix seconds.
    public var lastSignInAt: Int64?
    /// Where the person's alert emails go.
    public var email: String?

    public init(
        login: String, displayName: String?, role: Role, scope: Scope, method: String, disabled: Bool, lastSignInAt: Int64?,
        email: String? = nil
    ) {
        self.email = email
        self.login = login
        self.displayName = displayName
        self.role = role
        self.scope = scope
        self.method = method
        self.disabled = disabled
        self.lastSignInAt = lastSignInAt
    }
}

/// One event of the audit trail as its page shows it.
public struct ConsoleAuditEvent: Sendable, Hashable {
    /// Unix seconds.
    public var time: Int64
    /// `person:LOGIN`, `token:ID`, `cli:USER`, `address:IP`.
    public var actor: String
    /// Dotted: `policy.set`, `timeline.open`, ...
    public var action: String
    public var target: String?
    public var reason: String?

    public init(time: Int64, actor: String, action: String, target: String?, reason: String?) {
        self.time = time
        self.actor = actor
        self.action = action
        self.target = target
        self.reason = reason
    }
}

/// What the audit page asks for: its filters (newest first) and where the page starts.
public struct ConsoleAuditQuery: Sendable, Hashable {
    public var actor: String?
    public var action: String?
    /// Unix seconds, from the start of the first day to the end of the last.
    public var since: Int64?
    public var until: Int64?
    /// The opaque `next` of the page before; nil: the newest.
    public var after: String?
    public var limit: Int

    public init(actor: String? = nil, action: String? = nil, since: Int64? = nil, until: Int64? = nil, after: String? = nil, limit: Int) {
        self.actor = actor
        self.action = action
        self.since = since
        self.until = until
        self.after = after
        self.limit = limit
    }
}

/// A page of the audit trail, and the opaque cursor of the next (nil on the last).
public struct ConsoleAuditPage: Sendable, Hashable {
    public var events: [ConsoleAuditEvent]
    public var next: String?

    public init(events: [ConsoleAuditEvent], next: String?) {
        self.events = events
        self.next = next
    }
}

struct PeoplePage {
    struct Option {
        let value: String
        let label: String
        let selected: Bool
    }

    struct Row {
        let index: Int
        let login: String
        let name: String
        let roleLabel: String
        let rooms: String
        let groups: String
        let email: String
        let method: String
        let status: String
        let enabled: Bool
        let lastSignIn: String
        let changeAction: String
        let roles: [Option]
    }

    let canManage: Bool
    let hasPeople: Bool
    let rows: [Row]
    let newRoles: [Option]
    /// Why the last change was refused: the sentence of a code the console sends (`error=`), never words from the link.
    let error: String?

    static let errorKeys = [
        "login": "peopleErrorLogin", "role": "peopleErrorRole", "password": "peopleErrorPassword", "exists": "peopleErrorExists",
        "name": "peopleErrorName", "self": "peopleErrorSelf", "no-change": "peopleErrorNoChange", "scope": "peopleErrorScope",
        "email": "peopleErrorEmail",
    ]

    static func make(principal: Principal, people: [ConsolePerson], time: ConsoleTime, t: [String: String], error: String? = nil) -> PeoplePage {
        let rows = people.enumerated().map { index, person in
            Row(
                index: index, login: person.login, name: person.displayName ?? "", roleLabel: ConsoleRenderer.roleLabel(person.role, t),
                rooms: person.scope.rooms.joined(separator: ", "), groups: person.scope.groups.joined(separator: ", "), email: person.email ?? "",
                method: person.method,
                status: person.disabled ? (t["peopleDisabled"] ?? "") : (t["peopleActive"] ?? ""), enabled: !person.disabled,
                lastSignIn: person.lastSignInAt.map { time.dateTime($0 * 1000) } ?? (t["never"] ?? ""),
                changeAction: "/console/people/" + ConsoleForm.encode(person.login),
                roles: Role.personRoles.map { Option(value: $0.rawValue, label: ConsoleRenderer.roleLabel($0, t), selected: $0 == person.role) })
        }
        return PeoplePage(
            canManage: principal.may(.managePeople), hasPeople: !rows.isEmpty, rows: rows,
            newRoles: Role.personRoles.map { Option(value: $0.rawValue, label: ConsoleRenderer.roleLabel($0, t), selected: false) },
            error: error.flatMap { errorKeys[$0] }.flatMap { t[$0] })
    }
}

struct AuditTrailPage {
    struct Row {
        let iso: String
        let time: String
        let actor: String
        let action: String
        let target: String
        let reason: String
    }

    let timeZoneNote: String
    let actor: String
    let action: String
    let since: String
    let until: String
    let error: String?
    let hasEvents: Bool
    let rows: [Row]
    let firstLink: String?
    let nextLink: String?
    let hasPages: Bool

    /// The filter form's values, checked.
    struct Filter: Sendable, Hashable {
        var actor: String?
        var action: String?
        var since: String?
        var until: String?
        var after: String?

        static func parse(_ form: ConsoleForm) -> Filter {
            func bounded(_ name: String, _ limit: Int) -> String? {
                guard let text = form.text(name), text.unicodeScalars.count <= limit,
                    text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f })
                else { return nil }
                return text
            }
            return Filter(
                actor: bounded("actor", 200), action: bounded("action", 64), since: bounded("since", 10), until: bounded("until", 10),
                after: bounded("after", 200))
        }

        /// The storage's query; nil when the dates are not days.
        func query(time: ConsoleTime, limit: Int) -> ConsoleAuditQuery? {
            var query = ConsoleAuditQuery(actor: actor, action: action, after: after, limit: limit)
            if let since {
                guard let start = time.startOfDay(since) else { return nil }
                query.since = start / 1000
            }
            if let until {
                guard let end = time.endOfDay(until) else { return nil }
                query.until = end / 1000
            }
            return query
        }

        func link(after: String?) -> String {
            "/console/audit"
                + ConsoleForm.query([("actor", actor), ("action", action), ("since", since), ("until", until), ("after", after)])
        }
    }

    static let pageSize = 100
    /// The actions whose target is a pupil's user name.
    static let namesPerson: Set<String> = ["timeline.open", "person.export"]

    /// An event's target as the viewer sees it: with pseudonyms, the user
    /// name a `timeline.open` or a `person.export` names, and the `user` of a
    /// `records.export`'s address (its filters as typed, which for a role that
    /// sees names may be a name), are shown as pseudonyms.
    static func target(of event: ConsoleAuditEvent, names: NameShown) -> String? {
        guard names.pseudonyms != nil, let target = event.target else { return event.target }
        if namesPerson.contains(event.action) { return names.show(target) }
        guard event.action == "records.export", let mark = target.firstIndex(of: "?"),
            let form = ConsoleForm(String(target[target.index(after: mark)...])), form.pairs.contains(where: { $0.name == "user" })
        else { return target }
        let pairs: [(String, String?)] = form.pairs.map { pair in
            (pair.name, pair.name == "user" && !Pseudonyms.isPseudonym(pair.value) ? names.show(pair.value) : Optional(pair.value))
        }
        return String(target[..<mark]) + ConsoleForm.query(pairs)
    }

    /// With pseudonyms, a person's user name in a target is shown as its
    /// pseudonym (`target(of:names:)`): the audit trail must not undo them.
    static func make(
        filter: Filter, problem: String?, page: ConsoleAuditPage?, names: NameShown, time: ConsoleTime, t: [String: String]
    ) -> AuditTrailPage {
        let rows = (page?.events ?? []).map { event in
            Row(
                iso: RecordTime.format(milliseconds: event.time * 1000), time: time.dateTime(event.time * 1000), actor: event.actor,
                action: event.action, target: Self.target(of: event, names: names) ?? "",
                reason: event.reason ?? "")
        }
        return AuditTrailPage(
            timeZoneNote: ConsoleText.fill(t["timeZoneNote"] ?? "", ["zone": time.zoneName]), actor: filter.actor ?? "",
            action: filter.action ?? "", since: filter.since ?? "", until: filter.until ?? "", error: problem, hasEvents: !rows.isEmpty,
            rows: rows, firstLink: filter.after != nil ? filter.link(after: nil) : nil, nextLink: page?.next.map { filter.link(after: $0) },
            hasPages: filter.after != nil || page?.next != nil)
    }
}
