import Foundation

/// The view models of the sign-in page, the dashboard, the records, the
/// timeline and the machines: plain values made by pure functions from what
/// the storage answered, so that the tests check what a page shows apart
/// from the HTML (and the templates only lay them out).

struct SignInPage {
    let next: String
    let error: Bool
    /// The sign-in through the school's OpenID provider came back without a
    /// sign-in (`error=oidc-...`: cancelled, refused, or no role here).
    let openIDError: Bool
    let openID: Bool
    /// The link to the provider's sign-in. A link, not a form: the pages'
    /// `form-action 'self'` would stop a form's redirect to the provider.
    let openIDStart: String
    /// Whether the password form is offered (`signIn.local`).
    let local: Bool

    /// `next` only when it is a path of the console (no other site, no `//host`).
    static func make(next: String?, error: String?, openID: Bool, local: Bool = true) -> SignInPage {
        let next = ConsolePaths.localNext(next) ?? "/console/"
        return SignInPage(
            next: next, error: error == "1", openIDError: error?.hasPrefix("oidc-") == true, openID: openID,
            openIDStart: "/console/oidc/start?next=" + ConsoleForm.encode(next), local: local)
    }
}

enum ConsolePaths {
    /// `text` when it is a path of this server's console, else nil: a
    /// redirect after signing in or choosing a language never leaves it.
    static func localNext(_ text: String?) -> String? {
        SignInRoutes.localPath(text)
    }
}

/// "rooms lab1, lab2; groups year7" for a scoped principal; nil for the whole school.
func scopeNote(_ scope: Scope, _ t: [String: String]) -> String? {
    guard !scope.isWholeSchool else { return nil }
    let none = t["none"] ?? "-"
    return ConsoleText.fill(
        t["scopeNote"] ?? "", [
            "rooms": scope.rooms.isEmpty ? none : scope.rooms.joined(separator: ", "),
            "groups": scope.groups.isEmpty ? none : scope.groups.joined(separator: ", "),
        ])
}

// MARK: Dashboard

struct DashboardPage {
    struct StateCount {
        let state: String
        let label: String
        let count: Int
        let href: String?
    }

    struct NameCount {
        let label: String
        let count: Int64
        let href: String?
    }

    let scopeText: String?
    let hasMachines: Bool
    let machineStates: [StateCount]
    let windowText: String
    let hasBlocks: Bool
    let blocksByCategory: [NameCount]
    let topBlocked: [NameCount]
    /// The access requests waiting in the principal's scope; nil when the principal answers none.
    var requests: RequestsPanel? = nil
    /// The new (untriaged) danger alerts in the principal's scope, as the
    /// card says it; nil when the principal sees no alerts.
    var dangerAlerts: DangerAlerts? = nil

    struct DangerAlerts {
        let count: String
        let text: String
        let none: Bool
        /// The queue of the new danger alerts.
        static let href = "/console/alerts?state=new&severity=danger"
        let href = DangerAlerts.href
        /// Counted no further: the card says "1000+".
        static let cap = 1000

        static func make(count: Int64, t: [String: String]) -> DangerAlerts {
            let shown = count >= Int64(cap) ? "\(cap)+" : String(count)
            return DangerAlerts(count: shown, text: ConsoleText.fill(t["dashboardNewDanger"] ?? "", ["count": shown]), none: count == 0)
        }
    }

    static let topCount = 10
    static let window: Int64 = 3_600_000

    /// Machines counted by state (every state shown, zeros too, in the order
    /// of how much each needs someone), the last hour's blocks by category,
    /// and the most blocked names; all in the principal's scope already.
    static func make(
        principal: Principal, machines: [StoredMachine], publishedVersion: Int64, staleAfter: Int, blocks: [BlockCount],
        nowMilliseconds: Int64, time: ConsoleTime, t: [String: String]
    ) -> DashboardPage {
        let now = nowMilliseconds / 1000
        var counts: [MachineState: Int] = [:]
        for machine in machines where principal.scope.contains(room: machine.room) {
            counts[MachineState.of(machine, now: now, staleAfter: staleAfter, publishedVersion: publishedVersion), default: 0] += 1
        }
        let order: [MachineState] = [.unfiltered, .stale, .behind, .ok, .revoked]
        let canMachines = principal.may(.viewMachines)
        let states = order.map { state in
            StateCount(
                state: state.rawValue, label: stateLabel(state, t), count: counts[state] ?? 0,
                href: canMachines ? "/console/machines?state=\(state.rawValue)" : nil)
        }
        var byCategory: [String?: Int64] = [:]
        var byHost: [String: Int64] = [:]
        for block in blocks {
            byCategory[block.category, default: 0] += block.count
            if let host = block.host { byHost[host, default: 0] += block.count }
        }
        let canRecords = principal.may(.viewRecords)
        let today = time.day(nowMilliseconds)
        let categories = byCategory.sorted { ($0.value, $1.key ?? "") > ($1.value, $0.key ?? "") }.map { category, count in
            NameCount(
                label: category ?? (t["noCategory"] ?? "-"), count: count,
                href: canRecords && category != nil
                    ? "/console/records" + ConsoleForm.query([("since", today), ("until", today), ("category", category), ("action", "block")])
                    : nil)
        }
        let hosts = byHost.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.prefix(topCount).map {
            NameCount(label: $0.key, count: $0.value, href: nil)
        }
        let windowText = ConsoleText.fill(
            t["windowText"] ?? "",
            ["from": time.clock(nowMilliseconds - window), "to": time.clock(nowMilliseconds), "zone": time.zoneName])
        return DashboardPage(
            scopeText: scopeNote(principal.scope, t), hasMachines: !counts.isEmpty, machineStates: states, windowText: windowText,
            hasBlocks: !blocks.isEmpty, blocksByCategory: categories, topBlocked: Array(hosts))
    }

    static func stateLabel(_ state: MachineState, _ t: [String: String]) -> String {
        let key: String =
            switch state {
            case .ok: "stateOk"
            case .stale: "stateStale"
            case .unfiltered: "stateUnfiltered"
            case .behind: "stateBehind"
            case .revoked: "stateRevoked"
            }
        return t[key] ?? state.rawValue
    }
}

// MARK: Records and the timeline

/// The records page's filters as the form sends them, checked: the dates
/// as days of the server's time zone, each filter bounded.
struct RecordsFilter: Sendable, Hashable {
    var since: String
    var until: String
    var user: String?
    var machine: String?
    var room: String?
    var group: String?
    var category: String?
    var kind: String?
    var action: String?
    var after: RecordCursor?

    static let maxLengths: [String: Int] = [
        "user": 256, "machine": 22, "room": 64, "group": 256, "category": 256, "kind": 32, "action": 5, "since": 10, "until": 10,
        "after": 128,
    ]
    /// The days the records page shows when none are asked: today and the six before.
    static let defaultDays: Int64 = 7

    enum Problem: String, Error, Sendable {
        case dates = "errorDates"
        case machine = "errorMachineID"
        case tooLong = "errorTooLong"
        case cursor = "errorCursor"
    }

    /// The filter a form asks for, or the problem with it (and the filter as far as it read, to show again).
    static func parse(_ form: ConsoleForm, nowMilliseconds: Int64, time: ConsoleTime) -> (RecordsFilter, Problem?) {
        var filter = RecordsFilter(
            since: time.day(nowMilliseconds - (defaultDays - 1) * RecordTime.millisecondsPerDay), until: time.day(nowMilliseconds))
        var problem: Problem?
        func value(_ name: String) -> String? {
            guard let text = form.text(name) else { return nil }
            guard text.unicodeScalars.count <= maxLengths[name] ?? 64, text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f })
            else {
                problem = problem ?? .tooLong
                return nil
            }
            return text
        }
        if let since = value("since") { filter.since = since }
        if let until = value("until") { filter.until = until }
        filter.user = value("user")
        filter.room = value("room")
        filter.group = value("group")
        filter.category = value("category")
        filter.kind = value("kind")
        if let machine = value("machine") {
            filter.machine = machine
            if !Secrets.isMachineID(machine) { problem = problem ?? .machine }
        }
        if let action = value("action"), action == "block" || action == "allow" { filter.action = action }
        if let token = value("after") {
            if let cursor = RecordCursor(token: token) { filter.after = cursor } else { problem = problem ?? .cursor }
        }
        if filter.range(time) == nil { problem = problem ?? .dates }
        return (filter, problem)
    }

    /// The range in Unix ms: from the start of `since` to the end of `until`.
    func range(_ time: ConsoleTime) -> (since: Int64, until: Int64)? {
        guard let start = time.startOfDay(since), let end = time.endOfDay(until), start < end else { return nil }
        return (start, end)
    }

    /// The storage's query: this filter, in `scope`, for `user` as resolved
    /// (a pseudonym's name), `limit` records a page.
    func query(time: ConsoleTime, scope: Scope, user: String?, limit: Int) -> RecordQuery? {
        guard let range = range(time) else { return nil }
        return RecordQuery(
            since: range.since, until: range.until, user: user, machine: machine, room: room, group: group, action: action,
            category: category, kind: kind, after: after, limit: limit, scope: scope)
    }

    /// The link to this filter's page starting after `after` (nil: the first), as CSV with `csv`.
    func link(_ path: String, after: RecordCursor?, csv: Bool = false) -> String {
        path
            + ConsoleForm.query([
                ("since", since), ("until", until), ("user", user), ("machine", machine), ("room", room), ("group", group),
                ("category", category), ("kind", kind), ("action", action), ("after", after?.token), ("format", csv ? "csv" : nil),
            ])
    }
}

/// A person's name as a principal sees it: the name, or its pseudonym.
struct NameShown: Sendable {
    let pseudonyms: Pseudonyms?

    func show(_ user: String?) -> String? {
        guard let user else { return nil }
        return pseudonyms?.of(user) ?? user
    }

    /// A record as the CSV gives it to this principal: with pseudonyms, no
    /// name and no uid (a uid names a person as well as a name does).
    func forExport(_ record: QueriedRecord) -> QueriedRecord {
        guard let pseudonyms else { return record }
        var shown = record
        shown.stored.record.user = record.stored.record.user.map { pseudonyms.of($0) }
        shown.stored.record.uid = nil
        return shown
    }
}

struct RecordTable {
    struct Row {
        let iso: String
        let time: String
        let user: String
        let timelineLink: String?
        let hostname: String
        let room: String
        let group: String
        let kind: String
        let host: String
        let url: String?
        let action: String
        let actionLabel: String
        let category: String
        let reason: String
    }

    let caption: String
    let showUser: Bool
    let hasRows: Bool
    let rows: [Row]
    let firstLink: String?
    let nextLink: String?
    /// Stored, not computed: the templates read values through Mirror.
    let hasPages: Bool

    static func make(
        _ page: RecordPage, names: NameShown, showUser: Bool, timelineFor filter: RecordsFilter?, canTimeline: Bool, time: ConsoleTime,
        caption: String, firstLink: String?, nextLink: String?, t: [String: String]
    ) -> RecordTable {
        let rows = page.records.map { queried in
            let record = queried.stored.record
            let shown = names.show(record.user)
            var timeline: String?
            if canTimeline, let shown, let filter {
                timeline = "/console/timeline" + ConsoleForm.query([("user", shown), ("since", filter.since), ("until", filter.until)])
            }
            return Row(
                iso: RecordTime.format(milliseconds: queried.stored.timeMilliseconds), time: time.dateTime(queried.stored.timeMilliseconds),
                user: shown ?? "", timelineLink: timeline, hostname: queried.hostname, room: queried.room, group: record.group ?? "",
                kind: record.kind ?? "", host: record.host ?? record.destination ?? "", url: record.url, action: record.action,
                actionLabel: record.action == "block" ? (t["actionBlock"] ?? "block") : record.action == "allow" ? (t["actionAllow"] ?? "allow") : record.action,
                category: record.category ?? "", reason: record.reason ?? "")
        }
        return RecordTable(
            caption: caption, showUser: showUser, hasRows: !rows.isEmpty, rows: rows, firstLink: firstLink, nextLink: nextLink,
            hasPages: firstLink != nil || nextLink != nil)
    }
}

struct RecordsPage {
    struct Filters {
        struct Option {
            let value: String
            let label: String
            let selected: Bool
        }

        let timeZoneNote: String
        let since: String
        let until: String
        let user: String
        let machine: String
        let room: String
        let group: String
        let category: String
        let kind: String
        let actions: [Option]
    }

    let scopeText: String?
    let pseudonymous: Bool
    let filters: Filters
    let error: String?
    let csvLink: String
    let table: RecordTable?

    static let pageSize = 100

    static func make(
        filter: RecordsFilter, problem: String?, page: RecordPage?, principal: Principal, names: NameShown, time: ConsoleTime,
        t: [String: String]
    ) -> RecordsPage {
        let actions = [("", "actionAny"), ("block", "actionBlock"), ("allow", "actionAllow")].map { value, key in
            Filters.Option(value: value, label: t[key] ?? value, selected: (filter.action ?? "") == value)
        }
        let filters = Filters(
            timeZoneNote: ConsoleText.fill(t["timeZoneNote"] ?? "", ["zone": time.zoneName]), since: filter.since, until: filter.until,
            user: filter.user ?? "", machine: filter.machine ?? "", room: filter.room ?? "", group: filter.group ?? "",
            category: filter.category ?? "", kind: filter.kind ?? "", actions: actions)
        var table: RecordTable?
        if let page {
            table = RecordTable.make(
                page, names: names, showUser: true, timelineFor: filter, canTimeline: principal.may(.viewTimeline), time: time,
                caption: t["recordsCaption"] ?? "", firstLink: filter.after != nil ? filter.link("/console/records", after: nil) : nil,
                nextLink: page.next.map { filter.link("/console/records", after: $0) }, t: t)
        }
        return RecordsPage(
            scopeText: scopeNote(principal.scope, t), pseudonymous: names.pseudonyms != nil, filters: filters, error: problem,
            csvLink: filter.link("/console/records", after: filter.after, csv: true), table: table)
    }
}

struct TimelinePage {
    let scopeText: String?
    let userQuery: String
    let timeZoneNote: String
    let since: String
    let until: String
    let error: String?
    /// The person's export (`/console/timeline/export`), for a role that may make it and sees names.
    let exportLink: String?
    let table: RecordTable?

    static let pageSize = 200

    static func make(
        filter: RecordsFilter, shownUser: String, problem: String?, page: RecordPage?, principal: Principal, names: NameShown,
        time: ConsoleTime, t: [String: String]
    ) -> TimelinePage {
        var table: RecordTable?
        if let page {
            var linked = filter
            linked.user = shownUser
            table = RecordTable.make(
                page, names: names, showUser: false, timelineFor: nil, canTimeline: false, time: time, caption: t["timelineCaption"] ?? "",
                firstLink: filter.after != nil ? linked.link("/console/timeline", after: nil) : nil,
                nextLink: page.next.map { linked.link("/console/timeline", after: $0) }, t: t)
        }
        return TimelinePage(
            scopeText: scopeNote(principal.scope, t), userQuery: shownUser,
            timeZoneNote: ConsoleText.fill(t["timeZoneNote"] ?? "", ["zone": time.zoneName]), since: filter.since, until: filter.until,
            error: problem,
            exportLink: page != nil && principal.may(.exportPerson) && names.pseudonyms == nil
                ? "/console/timeline/export" + ConsoleForm.query([("user", shownUser)]) : nil,
            table: table)
    }
}

// MARK: Machines

struct MachinesPage {
    struct Option {
        let value: String
        let label: String
        let selected: Bool
    }

    struct Row {
        let id: String
        let hostname: String
        let room: String
        let state: String
        let stateLabel: String
        let rulesVersion: String
        let lastCheckIn: String
        let restarts: String
        let queueDrops: String
        let recordsDropped: String
        let revokeAction: String?
    }

    let scopeText: String?
    let states: [Option]
    let publishedText: String
    let canRevoke: Bool
    let hasMachines: Bool
    let rows: [Row]

    static func make(
        principal: Principal, machines: [StoredMachine], state wanted: MachineState?, publishedVersion: Int64, staleAfter: Int,
        nowMilliseconds: Int64, time: ConsoleTime, t: [String: String]
    ) -> MachinesPage {
        let now = nowMilliseconds / 1000
        let canRevoke = principal.may(.revokeMachine)
        var rows: [Row] = []
        for machine in machines where principal.scope.contains(room: machine.room) {
            let state = MachineState.of(machine, now: now, staleAfter: staleAfter, publishedVersion: publishedVersion)
            if let wanted, state != wanted { continue }
            let checkIn = machine.lastCheckIn
            rows.append(
                Row(
                    id: machine.id, hostname: machine.hostname, room: machine.room, state: state.rawValue,
                    stateLabel: DashboardPage.stateLabel(state, t), rulesVersion: checkIn.map { String($0.rulesVersion) } ?? "",
                    lastCheckIn: machine.checkInAt.map { time.dateTime($0 * 1000) } ?? (t["never"] ?? "-"),
                    restarts: checkIn.map { String($0.filterDataRestarts) } ?? "", queueDrops: checkIn.map { String($0.queueDrops) } ?? "",
                    recordsDropped: String(machine.recordsDropped),
                    revokeAction: canRevoke && machine.revokedAt == nil ? "/console/machines/\(machine.id)/revoke" : nil))
        }
        var states = [Option(value: "", label: t["stateAll"] ?? "", selected: wanted == nil)]
        for state in [MachineState.unfiltered, .stale, .behind, .ok, .revoked] {
            states.append(Option(value: state.rawValue, label: DashboardPage.stateLabel(state, t), selected: state == wanted))
        }
        return MachinesPage(
            scopeText: scopeNote(principal.scope, t), states: states,
            publishedText: ConsoleText.fill(t["machinesPublished"] ?? "", ["version": String(publishedVersion)]), canRevoke: canRevoke,
            hasMachines: !rows.isEmpty, rows: rows)
    }
}
