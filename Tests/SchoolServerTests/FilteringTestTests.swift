import Foundation
import NIOHTTP1
@testable import SchoolServer
import Testing
import VerdictCore

/// The filtering test (docs/server.md, "The filtering test") on both
/// engines: a run expects what the published policy blocks; only an admin
/// starts one and the review's roles read it; a machine gets the run with
/// its live state, answers once, only with the run's names and groups; a
/// machine that lets through a category the policy blocks raises one
/// danger alert, which goes to the admins too.
@Suite(.timeLimit(.minutes(10))) struct FilteringTestTests {
    static let now = PublishingStorageTests.now

    static func principal(_ role: Role) -> Principal {
        Principal(kind: .person(role.rawValue), role: role, scope: .school)
    }

    /// Publishes a policy that blocks gambling (listed) and adult (not listed) for everyone.
    static func publishGambling(_ storage: SQLStorage) async throws {
        let gambling = PublishingStorageTests.content("pokerstars.com\n888casino.com\n")
        _ = try await storage.addPolicyVersion(
            NewPolicyVersion(
                author: "cli:root", reason: "gambling blocked", policy: "policy:\n  block: [gambling, adult]\n  unknown: allow\n",
                lists: [PolicyList(category: "gambling", sha256: gambling.sha256, names: 2)], contents: [gambling]),
            now: now)
        _ = try await storage.addPublication(PublishingStorageTests.newPublication("store"), now: now) {
            SignedManifest(manifest: Array("m\($0)".utf8), signature: [1])
        }
    }

    static func desk(_ storage: SQLStorage, clock: TestClock, signal: AlertSignal? = nil) -> FilteringTestDesk {
        FilteringTestDesk(storage: storage, schoolNames: [], protections: [], live: nil, alerts: signal, clock: { clock.now })
    }

    static func answer(_ run: StoredFilteringRun, bundle: Int64 = 1, _ action: (FilteringTest.Name) -> String) -> FilteringTest.Answer {
        FilteringTest.Answer(
            run: run.id, bundleVersion: bundle,
            results: run.plan.groups.flatMap { group in
                run.plan.names.map { FilteringTest.Result(group: group, name: $0.name, action: action($0), category: $0.category, reason: "test") }
            })
    }

    @Test(arguments: Engine.allCases)
    func aRunExpectsWhatThePublishedPolicyBlocksAndOnlyAnAdminStartsIt(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let clock = TestClock(Self.now)
            let desk = Self.desk(storage, clock: clock)
            // Nothing published: nothing to compare with.
            await #expect(throws: APIError.self) { try await desk.start(by: Self.principal(.admin)) }
            try await Self.publishGambling(storage)
            for role in [Role.safeguarding, .teacher, .auditor] {
                await #expect(throws: APIError.self, "\(role) may not start a run") { try await desk.start(by: Self.principal(role)) }
            }
            let run = try await desk.start(by: Self.principal(.admin))
            #expect(run.number == 1 && run.bundleVersion == 1 && run.policyVersion == 1 && run.expiresAt == Self.now + FilteringTestDesk.openFor)
            #expect(run.plan.groups == [FilteringTest.noGroup])
            #expect(run.plan.names == FilteringTestNames.shipped)
            // Adult is blocked but no list of the bundle holds it: no name is expected to be blocked for it.
            #expect(run.plan.blocked == [FilteringTest.noGroup: ["gambling"]])
            #expect(run.plan.expected(group: FilteringTest.noGroup, category: "gambling") == "block")
            #expect(run.plan.expected(group: FilteringTest.noGroup, category: "dating") == "allow")
            #expect(try await storage.filteringRun(id: run.id) == run)
            let second = try await desk.start(by: Self.principal(.admin))
            #expect(second.number == 2)
            #expect(Set(try await storage.filteringRuns(limit: 10).map(\.id)) == [second.id, run.id])
            let events = try await storage.auditEvents(AuditQuery(action: "filtering-test.start")).events
            #expect(events.count == 2 && events.allSatisfy { $0.event.actor == "person:admin" })
            // The review's roles read runs; a teacher does not.
            #expect(try await desk.runs(for: Self.principal(.auditor)).count == 2)
            await #expect(throws: APIError.self) { try await desk.runs(for: Self.principal(.teacher)) }
            await #expect(throws: APIError.self) { try await desk.run(run.id, for: Self.principal(.teacher)) }
        }
    }

    /// A run that would ask each machine for more checks (groups times
    /// names) than one answer may carry is refused with the reason, and
    /// leaves no run and no audit event behind.
    @Test(arguments: Engine.allCases)
    func aRunOfMoreChecksThanAnAnswerCarriesIsRefused(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            // Fifteen groups and the one of no group, each with the shipped names and 400 of the school's own.
            let groups = (1...15).map { "  g\($0):\n    unixGroups: [g\($0)]\n" }.joined()
            let gambling = PublishingStorageTests.content("pokerstars.com\n")
            _ = try await storage.addPolicyVersion(
                NewPolicyVersion(
                    author: "cli:root", reason: "many groups", policy: "policy:\n  block: [gambling]\ngroups:\n" + groups,
                    lists: [PolicyList(category: "gambling", sha256: gambling.sha256, names: 1)], contents: [gambling]),
                now: Self.now)
            _ = try await storage.addPublication(PublishingStorageTests.newPublication("store"), now: Self.now) {
                SignedManifest(manifest: Array("m\($0)".utf8), signature: [1])
            }
            let school = (1...FilteringTestNames.maximumSchoolNames).map { FilteringTest.Name(name: "casino\($0).example", category: "gambling") }
            let clock = TestClock(Self.now)
            let many = FilteringTestDesk(storage: storage, schoolNames: school, protections: [], live: nil, alerts: nil, clock: { clock.now })
            do {
                _ = try await many.start(by: Self.principal(.admin))
                Issue.record("a run of 16 groups times \(school.count + FilteringTestNames.shipped.count) names was started")
            } catch let error as APIError {
                #expect(error.status == .conflict && error.code == "too-many-checks", "\(error)")
                #expect(error.message.contains("\(16 * (school.count + FilteringTestNames.shipped.count)) checks"), "\(error.message)")
            }
            #expect(try await storage.filteringRuns(limit: 10).isEmpty)
            #expect(try await storage.auditEvents(AuditQuery(action: "filtering-test.start")).events.isEmpty)
            // The same groups with the shipped names alone fit.
            let run = try await Self.desk(storage, clock: clock).start(by: Self.principal(.admin))
            #expect(run.plan.groups.count == 16 && run.plan.groups.contains("g15"))
        }
    }

    @Test(arguments: Engine.allCases)
    func aMachineAnswersOnceWithTheRunsNamesAndALetThroughRaisesOneDangerAlert(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let clock = TestClock(Self.now)
            let signal = AlertSignal()
            let desk = Self.desk(storage, clock: clock, signal: signal)
            try await Self.publishGambling(storage)
            let old = try #require(try await storage.machine(id: try await StorageTests.enrol(storage, hostname: "lab2-pc01")))
            let new = try #require(try await storage.machine(id: try await StorageTests.enrol(storage, hostname: "lab2-pc02")))
            let run = try await desk.start(by: Self.principal(.admin))
            #expect(try await desk.pending(machine: old.id)?.id == run.id)

            // Refused, and nothing kept: another run, names or groups not asked, a name twice, an action that is not one.
            var other = Self.answer(run) { _ in "allow" }
            other.run = "ft-unknown"
            await #expect(throws: APIError.self) { try await desk.answer(other, from: old) }
            var notAsked = Self.answer(run) { _ in "block" }
            notAsked.results.append(FilteringTest.Result(group: FilteringTest.noGroup, name: "anything.example", action: "allow", category: nil, reason: "x"))
            await #expect(throws: APIError.self) { try await desk.answer(notAsked, from: old) }
            var otherGroup = Self.answer(run) { _ in "block" }
            otherGroup.results[0].group = "year13"
            await #expect(throws: APIError.self) { try await desk.answer(otherGroup, from: old) }
            var twice = Self.answer(run) { _ in "block" }
            twice.results.append(twice.results[0])
            await #expect(throws: APIError.self) { try await desk.answer(twice, from: old) }
            var odd = Self.answer(run) { _ in "block" }
            odd.results[0].action = "maybe"
            await #expect(throws: APIError.self) { try await desk.answer(odd, from: old) }
            // A partial answer would stand as evidence of checks never made.
            var partial = Self.answer(run) { _ in "block" }
            partial.results.removeLast()
            await #expect(throws: APIError.self) { try await desk.answer(partial, from: old) }
            #expect(try await storage.filteringAnswers(run: run.id).isEmpty)
            #expect(try await storage.filteringResults(run: run.id, failedOnly: false, limit: 100).isEmpty)

            // The machine on the older bundle lets gambling through: two failures, one danger alert.
            let failed = try await desk.answer(Self.answer(run, bundle: 1) { _ in "allow" }, from: old)
            #expect(failed.failures == 2 && failed.bundleVersion == 1 && failed.room == "lab2")
            let alertID = try #require(failed.alertID)
            let alert = try #require(try await storage.alert(id: alertID))
            #expect(alert.ruleID == SafeguardingPolicy.filteringTestRuleID && alert.severity == .danger && alert.action == "allow")
            #expect(alert.machine == old.id && alert.category == "gambling" && alert.group == FilteringTest.noGroup && alert.user == nil)
            #expect(alert.recordSequence == -run.number && alert.state == .new && !alert.dispatched)
            #expect(["pokerstars.com", "888casino.com"].contains(alert.host ?? ""))
            // Answering again is refused; still one alert.
            await #expect(throws: APIError.self) { try await desk.answer(Self.answer(run) { _ in "allow" }, from: old) }
            #expect(try await storage.alerts(AlertQuery()).alerts.filter { $0.ruleID == "filtering-test" }.count == 1)
            #expect(try await desk.pending(machine: old.id) == nil)

            // The machine on the new bundle blocks gambling: no failure, no alert.
            let passed = try await desk.answer(Self.answer(run, bundle: 2) { $0.category == "gambling" ? "block" : "allow" }, from: new)
            #expect(passed.failures == 0 && passed.alertID == nil)
            let found = try await desk.run(run.id, for: Self.principal(.safeguarding))
            #expect(found.answers.count == 2)
            let letThrough = found.results.filter(\.failed)
            #expect(Set(letThrough.map(\.name)) == ["pokerstars.com", "888casino.com"])
            #expect(letThrough.allSatisfy { $0.machine == old.id && $0.bundleVersion == 1 && $0.expected == "block" && $0.actual == "allow" })
            #expect(found.results.count == 2 * FilteringTestNames.shipped.count)

            // A name the group's own allow list lets through is the school's choice, not a failure.
            let listed = try #require(try await storage.machine(id: try await StorageTests.enrol(storage, hostname: "lab2-pc04")))
            var allowListed = Self.answer(run) { $0.category == "gambling" ? "block" : "allow" }
            for index in allowListed.results.indices where allowListed.results[index].name == "pokerstars.com" {
                allowListed.results[index].action = "allow"
                allowListed.results[index].source = Reason.Source.localAllowList.rawValue
            }
            let chosen = try await desk.answer(allowListed, from: listed)
            #expect(chosen.failures == 0 && chosen.alertID == nil)

            // After the run's hour, no machine is asked and no answer is taken.
            let late = try #require(try await storage.machine(id: try await StorageTests.enrol(storage, hostname: "lab2-pc03")))
            #expect(try await desk.pending(machine: late.id)?.id == run.id)
            clock.advance(FilteringTestDesk.openFor)
            #expect(try await desk.pending(machine: late.id) == nil)
            await #expect(throws: APIError.self) { try await desk.answer(Self.answer(run) { _ in "block" }, from: late) }
        }
    }

    @Test func aFailedFilteringTestGoesToTheAdminsAsWellAsTheLeadsInScope() {
        func person(_ login: String, _ role: Role, _ scope: Scope = .school, email: String?) -> StoredPerson {
            StoredPerson(login: login, displayName: login, role: role, scope: scope, method: .local, disabledAt: nil, createdBy: "t", createdAt: 0, email: email)
        }
        let people = [
            person("admin", .admin, email: "it@school.example"),
            person("dsl", .safeguarding, email: "dsl@school.example"),
            person("dsl-lab9", .safeguarding, Scope(rooms: ["lab9"]), email: "lab9@school.example"),
            person("teacher", .teacher, email: "t@school.example"),
        ]
        let message = AlertMessage(
            id: "al-1", time: Self.now * 1000, severity: .danger, rule: SafeguardingPolicy.filteringTestRuleID, group: FilteringTest.noGroup,
            room: "lab1", machine: "m-abc", action: "allow", host: "pokerstars.com", category: "gambling")
        #expect(AlertRecipients.plan(message, people: people, alerts: AlertsConfiguration()).map(\.target) == ["it@school.example", "dsl@school.example"])
        // Any other rule's danger alert does not page the admin.
        var other = message
        other.rule = "self-harm-search"
        #expect(AlertRecipients.plan(other, people: people, alerts: AlertsConfiguration()).map(\.target) == ["dsl@school.example"])
    }

    @Test func theSchoolsTestNamesAreReadAndCheckedAndTheRuleIDIsReserved() throws {
        let configuration = try ServerConfiguration(yaml: "filteringTest:\n  adult: [ pornhub.com, xvideos.com ]\n  gambling: [ casino.test ]\n")
        #expect(
            configuration.filteringTest == [
                .init(name: "pornhub.com", category: "adult"), .init(name: "xvideos.com", category: "adult"),
                .init(name: "casino.test", category: "gambling"),
            ])
        #expect(FilteringTestNames.all(school: configuration.filteringTest).count == FilteringTestNames.shipped.count + 3)
        // The shipped names and the school's: each once.
        #expect(FilteringTestNames.all(school: [FilteringTestNames.shipped[0]]).count == FilteringTestNames.shipped.count)
        for (yaml, words) in [
            ("filteringTest:\n  adult: [ 'not a name' ]\n", "host name"),
            ("filteringTest:\n  adult: []\n", "at least one name"),
            ("filteringTest:\n  'bad category': [ a.example ]\n", "category"),
            ("filteringTest: [ a.example ]\n", "mapping"),
            ("filteringTest:\n  adult: [ UPPER.example ]\n", "lower case"),
        ] {
            #expect {
                try ServerConfiguration(yaml: yaml)
            } throws: { error in
                "\(error)".contains("filteringTest") && "\(error)".contains(words)
            }
        }
        // A school's own safeguarding rule cannot take the test's id.
        #expect {
            try LivePolicy(yaml: "safeguarding:\n  rules:\n    - { id: filtering-test, severity: danger, categories: [games] }\n")
        } throws: { error in
            "\(error)".contains("filtering-test")
        }
    }

    // MARK: The routes

    @Test(arguments: Engine.allCases)
    func theRoutesCheckRolesAndAMachineGetsItsRunWithItsLiveState(engine: Engine) async throws {
        try await LiveTests.withLiveServer(engine) { setup async throws in
            let server = setup.server
            func api(_ method: HTTPMethod, _ path: String, _ token: String) async throws -> PinnedHTTPSClient.Answer {
                try await server.client.request(method, path, headers: [("Authorization", "Bearer \(token)")])
            }
            #expect(try await api(.POST, "/api/v1/filtering-tests", setup.publishing.auditor).status == 403)
            #expect(try await api(.POST, "/api/v1/filtering-tests", setup.teacher2).status == 403)
            let started = try await api(.POST, "/api/v1/filtering-tests", setup.publishing.admin)
            #expect(started.status == 201, "\(started.text)")
            struct Run: Decodable {
                let id: String
                let names: [FilteringTest.Name]
                let blocked: [String: [String]]
            }
            let run = try JSONDecoder().decode(Run.self, from: Data(started.body))
            #expect(run.blocked[FilteringTest.noGroup]?.contains("gambling") == true)
            #expect(try await api(.GET, "/api/v1/filtering-tests", setup.teacher2).status == 403)
            #expect(try await api(.GET, "/api/v1/filtering-tests", setup.publishing.auditor).status == 200)
            #expect(try await api(.GET, "/api/v1/filtering-tests/\(run.id)", setup.teacher2).status == 403)
            #expect(try await api(.GET, "/api/v1/filtering-tests/ft-nothing", setup.publishing.auditor).status == 404)

            // A machine that does not take tests is not sent one (held, then 204); one that does gets it at once.
            #expect(try await LiveTests.poll(server, setup.machine, after: 0, wait: 1).status == 204)
            let asked = try await server.post("/api/v1/machine/live", #"{"after":0,"wait":30,"tested":""}"#, signedBy: setup.machine)
            #expect(asked.status == 200, "\(asked.text)")
            struct Carrier: Decodable { let filteringTest: FilteringTest.Request? }
            let request = try #require(try JSONDecoder().decode(Carrier.self, from: Data(asked.body)).filteringTest)
            #expect(request.run == run.id && request.names == run.names && request.groups == [FilteringTest.noGroup] && request.refusal == nil)
            // The state beside it is the machine's, signed as ever.
            #expect(try LiveTests.payload(asked, key: setup.live.key).sequence == 0)
            // Having answered it, the machine is held again.
            let held = try await server.post("/api/v1/machine/live", #"{"after":0,"wait":1,"tested":"\#(run.id)"}"#, signedBy: setup.machine)
            #expect(held.status == 204)

            // The answer: signed by the machine, only the run's names, once.
            func post(_ answer: FilteringTest.Answer) async throws -> PinnedHTTPSClient.Answer {
                try await server.post("/api/v1/machine/filtering-test", String(decoding: try JSONEncoder().encode(answer), as: UTF8.self), signedBy: setup.machine)
            }
            let results = run.names.map { FilteringTest.Result(group: FilteringTest.noGroup, name: $0.name, action: "allow", category: nil, reason: "none") }
            #expect(try await server.post("/api/v1/machine/filtering-test", "{}").status == 401, "unsigned")
            let stranger = FilteringTest.Result(group: FilteringTest.noGroup, name: "stranger.example", action: "allow", category: nil, reason: "x")
            #expect(try await post(FilteringTest.Answer(run: run.id, bundleVersion: 1, results: results + [stranger])).status == 400)
            #expect(try await post(FilteringTest.Answer(run: run.id, bundleVersion: 1, results: results)).status == 204)
            #expect(try await post(FilteringTest.Answer(run: run.id, bundleVersion: 1, results: results)).status == 409)
            let read = try await api(.GET, "/api/v1/filtering-tests/\(run.id)", setup.publishing.auditor)
            #expect(read.status == 200 && read.text.contains(#""failed":true"#) && read.text.contains(#""name":"pokerstars.com""#), "\(read.text)")
            #expect(try await server.storage.alerts(AlertQuery()).alerts.filter { $0.ruleID == "filtering-test" && $0.machine == setup.machine.id }.count == 1)
            // A body past the bound is refused before it is read.
            let huge = String(repeating: " ", count: APILimits.maxBodyBytes + 10)
            #expect(try await server.post("/api/v1/machine/filtering-test", huge, signedBy: setup.machine).status == 413)
        }
    }

    // MARK: The console

    @Test(arguments: Engine.allCases)
    func theReviewPageAndItsPDFShowTheEvidenceAndARecordedReviewStartsTheNextOnesChanges(engine: Engine) async throws {
        try await withConsoleServer(engine) { console async throws in
            let storage = console.storage
            try await Self.publishGambling(storage)
            _ = try await ServerAdministration.createAPIToken(storage: storage, role: .auditor, createdBy: "cli:root", now: Self.now)
            // A run, answered by a machine that lets gambling through.
            let machine = try #require(try await storage.machine(id: try await StorageTests.enrol(storage)))
            let started = try await console.post("/console/filtering-tests", as: .admin)
            #expect(started.status == 303, "\(started.text.prefix(300))")
            let location = try #require(started.header("Location"))
            #expect(location.hasPrefix("/console/filtering-tests/ft-") && location.hasSuffix("?done=filtering-test-started"))
            let run = try #require(try await storage.filteringRuns(limit: 1).first)
            // The run was started with the bundles' built-in lists too (doh, blocked by default): the machine blocks those.
            #expect(run.plan.blocked[FilteringTest.noGroup] == ["doh", "gambling"])
            _ = try await Self.desk(storage, clock: TestClock(Self.now)).answer(
                Self.answer(run) { $0.category == "gambling" ? "allow" : "block" }, from: machine)

            // Who may do what: the safeguarding lead may not start a run; a teacher sees nothing; a form needs its CSRF token.
            #expect(try await console.post("/console/filtering-tests", as: .safeguarding).status == 403)
            #expect(try await console.get("/console/review", as: .teacher, rooms: ["lab2"]).status == 403)
            #expect(try await console.get("/console/filtering-tests/\(run.id)", as: .teacher, rooms: ["lab2"]).status == 403)
            #expect(try await console.post("/console/review", as: .auditor, [("note", "looked")]).status == 403)
            #expect(try await console.post("/console/review", as: .safeguarding, [("note", "looked")], csrf: false).status == 403)

            let page = try await console.get("/console/review", as: .auditor)
            #expect(page.status == 200, "\(page.text.prefix(300))")
            for words in [
                "gambling", "(no group)", "gambling blocked", "pokerstars.com", "1 machine(s) answered; 2 check(s) let through", "No review has been recorded yet",
                "filtering-test.start",
            ] {
                #expect(page.text.contains(words), "the review page does not say \(words)")
            }
            #expect(!page.text.contains(#"id="review-form""#) && !page.text.contains(#"id="filtering-test-form""#), "an auditor records and runs nothing")
            let results = try await console.get("/console/filtering-tests/\(run.id)", as: .safeguarding)
            #expect(results.status == 200 && results.text.contains("LET THROUGH") && results.text.contains("lab2-pc07"), "\(results.text.prefix(300))")
            #expect(try await console.get("/console/filtering-tests/ft-nothing", as: .safeguarding).status == 404)
            let list = try await console.get("/console/filtering-tests", as: .admin)
            #expect(list.status == 200 && list.text.contains("/console/filtering-tests/\(run.id)"))

            let pdf = try await console.get("/console/review.pdf", as: .safeguarding)
            #expect(pdf.status == 200 && pdf.header("Content-Type") == "application/pdf" && pdf.body.starts(with: Array("%PDF-".utf8)))
            let text = String(decoding: pdf.body, as: UTF8.self)
            #expect(text.contains("pokerstars.com") && text.contains("gambling blocked"), "the PDF names what was let through and the policy's reason")

            // Recorded: in the audit trail with its note; the next review starts from it.
            #expect(try await console.post("/console/review", as: .safeguarding, [("note", "  ")]).status == 422)
            let recorded = try await console.post("/console/review", as: .safeguarding, [("note", "all groups checked; lab2 fixed")])
            #expect(recorded.status == 303 && recorded.header("Location") == "/console/review?done=review-recorded")
            let reviews = try await storage.reviews(limit: 5)
            #expect(reviews.count == 1 && reviews.first?.note == "all groups checked; lab2 fixed" && reviews.first?.reviewer == "person:t-safeguarding")
            let audited = try await storage.auditEvents(AuditQuery(action: "review.record")).events
            #expect(audited.count == 1 && audited.first?.event.reason == "all groups checked; lab2 fixed")
            let after = try await console.get("/console/review?done=review-recorded", as: .admin)
            #expect(after.text.contains("all groups checked; lab2 fixed") && after.text.contains("The review is recorded"))
        }
    }
}
