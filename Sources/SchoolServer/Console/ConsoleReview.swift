import Foundation
import Hummingbird
import NIOCore
import VerdictCore

/// The annual review and the filtering test in the console (docs/console.md,
/// "Review"): the review page and its PDF, the form that records a review
/// (`review.record` in the audit trail, with the reviewer's note), the
/// filtering test's runs, one run's results, and the form that starts a run
/// (through the `FilteringTestDesk`, as the API's route does). The review's
/// roles (admin, safeguarding lead, auditor) read them; the admin starts a
/// run; the admin and the lead record a review.
extension ConsoleRoutes {
    static let runsShown = 50

    func addReview(to console: RouterGroup<ServerRequestContext>) {
        console.get("review") { request, context in try await page(request, context, .viewReview) { try await review($0, $1, problem: nil) } }
        console.get("review.pdf") { request, context in try await page(request, context, .viewReview) { try await reviewPDF($0, $1) } }
        console.post("review") { request, context in
            try await change(request, context, .recordReview) { try await recordReview($0, $1, $2) }
        }
        console.get("filtering-tests") { request, context in try await page(request, context, .viewReview) { try await filteringTests($0, $1) } }
        console.get("filtering-tests/{id}") { request, context in
            try await page(request, context, .viewReview) { try await filteringTest(context, $0, $1) }
        }
        console.post("filtering-tests") { request, context in
            try await change(request, context, .runFilteringTest) { try await startFilteringTest($0, $1, $2) }
        }
    }

    var filteringTestDesk: FilteringTestDesk {
        FilteringTestDesk(
            storage: storage, schoolNames: filteringTestNames, protections: filteringTestProtections, live: roomControl?.live.hub, alerts: nil,
            clock: clock)
    }

    func review(_ principal: Principal, _ viewer: ConsoleViewer, problem: String?, status: HTTPResponse.Status = .ok) async throws -> Response {
        let t = renderer.table(viewer)
        let review = try await AnnualReview.make(storage: storage, now: clock())
        let names = try await names(for: principal)
        let none = t["none"] ?? "-"
        let model = ReviewPage(
            made: ConsoleText.fill(t["reviewMade"] ?? "", ["time": time.dateTime(review.madeAt * 1000)]),
            last: review.lastReview.map {
                ConsoleText.fill(t["reviewLast"] ?? "", ["time": time.dateTime($0.time * 1000), "reviewer": $0.reviewer, "note": $0.note])
            } ?? t["reviewNoneYet"] ?? "",
            hasPolicy: review.hasPolicy,
            groups: review.groups.map {
                ReviewPage.Group(
                    name: $0.name, blocked: review.blockedText($0, t), allowed: review.listText($0.allowed, t), denied: review.listText($0.denied, t))
            },
            locked: ConsoleText.fill(t["reviewLocked"] ?? "", ["categories": review.locked.isEmpty ? none : review.locked.joined(separator: ", ")]),
            history: review.history.map {
                ReviewPage.Version(version: String($0.version), time: time.dateTime($0.createdAt * 1000), author: $0.author, reason: $0.reason)
            },
            publications: review.publications.map {
                ReviewPage.Publication(
                    bundle: String($0.bundleVersion), version: String($0.policyVersion), time: time.dateTime($0.createdAt * 1000), author: $0.author,
                    reason: $0.reason)
            },
            people: review.people.map {
                ReviewPage.Holder(
                    name: $0.login, detail: $0.displayName + ($0.disabledAt == nil ? "" : " (" + (t["reviewDisabled"] ?? "") + ")"),
                    role: ConsoleRenderer.roleLabel($0.role, t), scope: AnnualReview.scope($0.scope, t))
            },
            tokens: review.tokens.map {
                ReviewPage.Holder(
                    name: $0.id, detail: $0.createdBy, role: ConsoleRenderer.roleLabel($0.role, t), scope: AnnualReview.scope($0.scope, t))
            },
            hasChanges: !review.changes.isEmpty,
            changes: review.changes.map {
                ReviewPage.Change(
                    time: time.dateTime($0.event.time * 1000), actor: $0.event.actor, action: $0.event.action,
                    target: AnnualReview.target(of: $0, names: names),
                    reason: $0.event.reason ?? "")
            },
            moreChanges: review.moreChanges,
            testSummary: review.testSummary(t, time: time) ?? t["reviewTestNone"] ?? "",
            testLink: review.latestRun.map { "/console/filtering-tests/" + $0.id },
            allBlocked: review.latestRun != nil && !review.answers.isEmpty && review.failures.isEmpty,
            hasFailures: !review.failures.isEmpty, failures: review.failures.map(Self.failureRow),
            canRecord: principal.may(.recordReview), canStart: principal.may(.runFilteringTest), problem: problem)
        return renderer.response("review", status: status, title: t["titleReview"] ?? "", page: model, viewer: viewer, current: .review)
    }

    static func failureRow(_ result: StoredFilteringResult) -> ReviewPage.Failure {
        ReviewPage.Failure(machine: result.machine, group: result.group, name: result.name, category: result.category, bundle: String(result.bundleVersion))
    }

    func reviewPDF(_ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        let review = try await AnnualReview.make(storage: storage, now: clock())
        let bytes = review.pdf(t, time: time, schoolName: renderer.settings.schoolName, names: try await names(for: principal))
        var headers = HTTPFields()
        headers[.contentType] = "application/pdf"
        headers[.contentDisposition] = "attachment; filename=\"hallpass-review-\(time.day(review.madeAt * 1000)).pdf\""
        headers[.cacheControl] = "no-store"
        headers[.xContentTypeOptions] = "nosniff"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    func recordReview(_ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm) async throws -> Response {
        let note: String?
        do {
            note = try AlertDesk.note(form["note"])
        } catch let error as APIError {
            return try await review(principal, viewer, problem: error.message, status: error.status)
        }
        guard let note else {
            return try await review(principal, viewer, problem: renderer.table(viewer)["reviewNoteRequired"], status: .unprocessableContent)
        }
        let now = clock()
        let id = "rv-" + Secrets.randomBase32(count: 16)
        try await storage.addReview(StoredReview(id: id, time: now, reviewer: principal.author, note: note))
        try await storage.audit(NewAuditEvent(time: now, actor: principal.author, action: "review.record", target: id, reason: note, detail: nil))
        return Self.redirect("/console/review?done=review-recorded")
    }

    func filteringTests(_ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        var rows: [FilteringTestsPage.Row] = []
        for run in try await filteringTestDesk.runs(for: principal, limit: Self.runsShown) {
            let answers = try await storage.filteringAnswers(run: run.id)
            rows.append(
                FilteringTestsPage.Row(
                    number: String(run.number), href: "/console/filtering-tests/" + run.id, time: time.dateTime(run.createdAt * 1000),
                    by: run.createdBy, bundle: String(run.bundleVersion), answers: String(answers.count),
                    failures: String(answers.reduce(0) { $0 + $1.failures }), failed: answers.contains { $0.failures > 0 }))
        }
        let model = FilteringTestsPage(hasRows: !rows.isEmpty, rows: rows, canStart: principal.may(.runFilteringTest))
        return renderer.response("filtering-tests", title: t["titleFilteringTests"] ?? "", page: model, viewer: viewer, current: .review)
    }

    func filteringTest(_ context: ServerRequestContext, _ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        guard let id = context.parameters.get("id") else { return renderer.notFound(viewer) }
        let found: (run: StoredFilteringRun, answers: [StoredFilteringAnswer], results: [StoredFilteringResult])
        do {
            // The failures first; a fleet's every check would be too long a page.
            found = try await filteringTestDesk.run(id, for: principal, limit: 1000)
        } catch let error as APIError where error.status == .notFound {
            return renderer.notFound(viewer)
        }
        var hostnames: [String: String] = [:]
        for answer in found.answers { hostnames[answer.machine] = try await storage.machine(id: answer.machine)?.hostname }
        func machine(_ id: String) -> String { hostnames[id].map { "\($0) (\(id))" } ?? id }
        func action(_ word: String) -> String { t[Self.stringKey("action", word)] ?? word }
        let model = FilteringTestPage(
            summary: ConsoleText.fill(
                t["filteringTestSummary"] ?? "",
                [
                    "time": time.dateTime(found.run.createdAt * 1000), "by": found.run.createdBy, "bundle": String(found.run.bundleVersion),
                    "until": time.dateTime(found.run.expiresAt * 1000),
                ]),
            answers: found.answers.map {
                FilteringTestPage.Answer(
                    machine: machine($0.machine), room: $0.room, time: time.dateTime($0.answeredAt * 1000), bundle: String($0.bundleVersion),
                    failures: String($0.failures), failed: $0.failures > 0, alert: $0.alertID.map { "/console/alerts/" + $0 })
            },
            hasAnswers: !found.answers.isEmpty,
            results: found.results.map {
                FilteringTestPage.Result(
                    machine: machine($0.machine), group: $0.group, name: $0.name, category: $0.category, expected: action($0.expected),
                    actual: action($0.actual), reason: $0.reason, bundle: String($0.bundleVersion), failed: $0.failed)
            })
        return renderer.response(
            "filtering-test", title: ConsoleText.fill(t["titleFilteringTest"] ?? "", ["run": String(found.run.number)]), page: model, viewer: viewer,
            current: .review)
    }

    func startFilteringTest(_ principal: Principal, _ viewer: ConsoleViewer, _ form: ConsoleForm) async throws -> Response {
        do {
            let run = try await filteringTestDesk.start(by: principal)
            return Self.redirect("/console/filtering-tests/\(run.id)?done=filtering-test-started")
        } catch let error as APIError where error.status == .conflict {
            return try await review(principal, viewer, problem: error.message, status: .conflict)
        }
    }
}

/// The review page.
struct ReviewPage {
    struct Group {
        let name: String
        let blocked: String
        let allowed: String
        let denied: String
    }

    struct Version {
        let version: String
        let time: String
        let author: String
        let reason: String
    }

    struct Publication {
        let bundle: String
        let version: String
        let time: String
        let author: String
        let reason: String
    }

    struct Holder {
        let name: String
        let detail: String
        let role: String
        let scope: String
    }

    struct Change {
        let time: String
        let actor: String
        let action: String
        let target: String
        let reason: String
    }

    struct Failure {
        let machine: String
        let group: String
        let name: String
        let category: String
        let bundle: String
    }

    let made: String
    let last: String
    let hasPolicy: Bool
    let groups: [Group]
    let locked: String
    let history: [Version]
    let publications: [Publication]
    let people: [Holder]
    let tokens: [Holder]
    let hasChanges: Bool
    let changes: [Change]
    let moreChanges: Bool
    let testSummary: String
    let testLink: String?
    let allBlocked: Bool
    let hasFailures: Bool
    let failures: [Failure]
    let canRecord: Bool
    let canStart: Bool
    let problem: String?
}

/// The filtering test's runs.
struct FilteringTestsPage {
    struct Row {
        let number: String
        let href: String
        let time: String
        let by: String
        let bundle: String
        let answers: String
        let failures: String
        let failed: Bool
    }

    let hasRows: Bool
    let rows: [Row]
    let canStart: Bool
}

/// One run: who answered, on which bundle, and every name for every group.
struct FilteringTestPage {
    struct Answer {
        let machine: String
        let room: String
        let time: String
        let bundle: String
        let failures: String
        let failed: Bool
        let alert: String?
    }

    struct Result {
        let machine: String
        let group: String
        let name: String
        let category: String
        let expected: String
        let actual: String
        let reason: String
        let bundle: String
        let failed: Bool
    }

    let summary: String
    let answers: [Answer]
    let hasAnswers: Bool
    let results: [Result]
}
