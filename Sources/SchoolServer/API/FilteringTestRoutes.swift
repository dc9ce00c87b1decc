import Foundation
import Hummingbird
import VerdictCore

/// The filtering test for the school's tools (`/api/v1/filtering-tests`):
/// a token that may `runFilteringTest` (admin) starts a run; one that may
/// `viewReview` (admin, safeguarding, auditor) lists the runs and reads one
/// with its results. Each route maps the request to one call of the
/// `FilteringTestDesk`, which the console uses too.
struct FilteringTestRoutes {
    let desk: FilteringTestDesk

    func add(to router: Router<ServerRequestContext>) {
        router.group("/api/v1/filtering-tests").add(middleware: APITokenMiddleware(storage: desk.storage, permission: .runFilteringTest))
            .post { _, context in
                EditedResponse(status: .created, response: RunView(try await desk.start(by: try AlertRoutes.principal(context))))
            }
        let reading = router.group("/api/v1/filtering-tests").add(middleware: APITokenMiddleware(storage: desk.storage, permission: .viewReview))
        reading.get { _, context in
            ListResponse(runs: try await desk.runs(for: try AlertRoutes.principal(context)).map(RunView.init))
        }
        reading.get(":id") { _, context in
            guard let id = context.parameters.get("id") else { throw FilteringTestDesk.notFound }
            let found = try await desk.run(id, for: try AlertRoutes.principal(context))
            return RunResults(
                run: RunView(found.run), answers: found.answers.map(AnswerView.init), results: found.results.map(ResultView.init))
        }
    }

    struct ListResponse: ResponseEncodable {
        let runs: [RunView]
    }

    struct RunResults: ResponseEncodable {
        let run: RunView
        let answers: [AnswerView]
        let results: [ResultView]
    }

    /// A run as the API shows it.
    struct RunView: ResponseEncodable, Decodable, Sendable {
        let id: String
        let number: Int64
        let created: String
        let createdBy: String
        let expires: String
        let bundleVersion: Int64
        let policyVersion: Int64?
        let groups: [String]
        let names: [FilteringTest.Name]
        /// Group to the categories expected to be blocked.
        let blocked: [String: [String]]

        init(_ run: StoredFilteringRun) {
            id = run.id
            number = run.number
            created = RecordTime.format(milliseconds: run.createdAt * 1000)
            createdBy = run.createdBy
            expires = RecordTime.format(milliseconds: run.expiresAt * 1000)
            bundleVersion = run.bundleVersion
            policyVersion = run.policyVersion
            groups = run.plan.groups
            names = run.plan.names
            blocked = run.plan.blocked
        }
    }

    struct AnswerView: Codable, Sendable {
        let machine: String
        let room: String
        let answered: String
        let bundleVersion: Int64
        let failures: Int64
        let alert: String?

        init(_ answer: StoredFilteringAnswer) {
            machine = answer.machine
            room = answer.room
            answered = RecordTime.format(milliseconds: answer.answeredAt * 1000)
            bundleVersion = answer.bundleVersion
            failures = answer.failures
            alert = answer.alertID
        }
    }

    struct ResultView: Codable, Sendable {
        let machine: String
        let group: String
        let name: String
        let category: String
        let expected: String
        let actual: String
        let actualCategory: String?
        let reason: String
        let bundleVersion: Int64
        let failed: Bool

        init(_ result: StoredFilteringResult) {
            machine = result.machine
            group = result.group
            name = result.name
            category = result.category
            expected = result.expected
            actual = result.actual
            actualCategory = result.actualCategory
            reason = result.reason
            bundleVersion = result.bundleVersion
            failed = result.failed
        }
    }
}
