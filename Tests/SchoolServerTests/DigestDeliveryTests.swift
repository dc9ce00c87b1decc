import Foundation
import HallpassConfig
@testable import SchoolServer
import Synchronization
import Testing
import VerdictCore

/// The safeguarding digests on their schedule (docs/server.md, "Safeguarding
/// digests"): `alerts.digests` in server.yaml, the due times on the school's
/// wall clock across the changes of clocks, the claim that makes each digest
/// once on both engines, the figures kept to a recipient's scope, the email
/// (MIME parsed back, the PDF read by pdftotext), and the server sending one
/// digest to each recipient when its clock passes Monday 07:30.
@Suite(.timeLimit(.minutes(10))) struct DigestDeliveryTests {
    static let london = TimeZone(identifier: "Europe/London")!
    /// Friday 28 November 2025, 09:00 UTC (and London): the tests' servers' clock.
    static let now = StorageTests.now
    /// Monday 1 December 2025, 07:31 in London (UTC in winter): a minute past the weekly digest's time.
    static let mondayMorning: Int64 = 1_764_574_260

    static func utc(_ text: String) -> Int64 {
        Int64(ISO8601DateFormatter().date(from: text)!.timeIntervalSince1970)
    }

    // MARK: The schedule

    @Test func theDigestsAreReadFromAlertsWithTheirDefaults() throws {
        let defaults = try ServerConfiguration(yaml: "alerts:\n  sendmail: [/usr/sbin/sendmail, -t, -oi]\n").alerts.digests
        #expect(defaults.daily == nil)
        #expect(defaults.weekly == .init(weekday: .monday, time: .init(hour: 7, minute: 30)!))
        #expect(defaults.kinds == [.weekly])
        // Unquoted, as people write YAML: `07:30` stays a time (not YAML 1.1's base-60 number), `off` stays off.
        let both = try ServerConfiguration(yaml: "alerts:\n  digests:\n    daily: 07:05\n    weekly: Friday 16:00\n").alerts.digests
        #expect(both.daily == .init(hour: 7, minute: 5) && both.weekly == .init(weekday: .friday, time: .init(hour: 16, minute: 0)!))
        #expect(both.kinds == [.daily, .weekly])
        let none = try ServerConfiguration(yaml: "alerts:\n  digests:\n    daily: off\n    weekly: off\n").alerts.digests
        #expect(none.kinds.isEmpty)
        let quoted = try ServerConfiguration(yaml: "alerts:\n  digests:\n    daily: \"6:45\"\n").alerts.digests
        #expect(quoted.daily?.description == "06:45" && quoted.weekly != nil)
    }

    @Test(arguments: [
        ("alerts:\n  digests:\n    daily: 25:00\n", "alerts.digests.daily", "HH:MM"),
        ("alerts:\n  digests:\n    daily: 7.30\n", "alerts.digests.daily", "HH:MM"),
        ("alerts:\n  digests:\n    daily: 07:3\n", "alerts.digests.daily", "HH:MM"),
        ("alerts:\n  digests:\n    daily: false\n", "alerts.digests.daily", "or off"),
        ("alerts:\n  digests:\n    daily:\n", "alerts.digests.daily", "a single value"),
        ("alerts:\n  digests:\n    weekly: monday\n", "alerts.digests.weekly", "a weekday and a time"),
        ("alerts:\n  digests:\n    weekly: funday 07:30\n", "alerts.digests.weekly", "a weekday and a time"),
        ("alerts:\n  digests:\n    weekly: monday 7:60\n", "alerts.digests.weekly", "a weekday and a time"),
        ("alerts:\n  digests:\n    weekly: [monday, \"07:30\"]\n", "alerts.digests.weekly", "a single value"),
        ("alerts:\n  digests:\n    hourly: \"00\"\n", "alerts.digests.hourly", "unknown key"),
        ("alerts:\n  digests: weekly\n", "alerts.digests", "expected a mapping"),
    ])
    func everyMistakeInDigestsIsAnErrorNamingItsKey(yaml: String, key: String, words: String) {
        let error = #expect(throws: ConfigurationError.self) { try ServerConfiguration(yaml: yaml) }
        #expect(error?.key == key, "\(String(describing: error))")
        #expect(error?.description.contains(words) == true, "\(String(describing: error))")
    }

    @Test func dueTimesAreOnTheWallClockAcrossTheChangesOfClocks() throws {
        let schedule = DigestSchedule(
            daily: .init(hour: 7, minute: 30), weekly: .init(weekday: .monday, time: .init(hour: 7, minute: 30)!))
        func last(_ kind: DigestKind, _ at: String) -> Int64? { schedule.lastDue(kind, now: Self.utc(at), timeZone: Self.london) }
        func next(_ kind: DigestKind, _ at: String) -> Int64? { schedule.nextDue(kind, after: Self.utc(at), timeZone: Self.london) }
        // Clocks go forward at 01:00 UTC on Sunday 29 March 2026: 07:30 is 07:30 GMT the day before, 06:30 UTC on the day.
        #expect(next(.daily, "2026-03-28T08:00:00Z") == Self.utc("2026-03-29T06:30:00Z"))
        #expect(last(.daily, "2026-03-29T06:29:59Z") == Self.utc("2026-03-28T07:30:00Z"))
        #expect(last(.daily, "2026-03-29T06:30:00Z") == Self.utc("2026-03-29T06:30:00Z"), "due at the minute itself")
        // The Monday after: 06:30 UTC; the Monday before: 07:30 UTC.
        #expect(last(.weekly, "2026-03-30T06:29:00Z") == Self.utc("2026-03-23T07:30:00Z"))
        #expect(last(.weekly, "2026-03-30T06:30:00Z") == Self.utc("2026-03-30T06:30:00Z"))
        #expect(next(.weekly, "2026-03-23T07:30:00Z") == Self.utc("2026-03-30T06:30:00Z"), "a week of 167 hours")
        // Clocks go back at 01:00 UTC on Sunday 25 October 2026.
        #expect(next(.daily, "2026-10-24T07:00:00Z") == Self.utc("2026-10-25T07:30:00Z"))
        #expect(next(.weekly, "2026-10-20T12:00:00Z") == Self.utc("2026-10-26T07:30:00Z"))
        #expect(last(.weekly, "2026-10-26T07:29:00Z") == Self.utc("2026-10-19T06:30:00Z"))
        // A time the clocks skip is the moment they jump; a time they pass twice is its first.
        let night = DigestSchedule(daily: .init(hour: 1, minute: 30), weekly: nil)
        #expect(night.nextDue(.daily, after: Self.utc("2026-03-28T12:00:00Z"), timeZone: Self.london) == Self.utc("2026-03-29T01:00:00Z"))
        #expect(night.nextDue(.daily, after: Self.utc("2026-10-24T12:00:00Z"), timeZone: Self.london) == Self.utc("2026-10-25T00:30:00Z"))
        #expect(night.nextDue(.daily, after: Self.utc("2026-10-25T00:30:00Z"), timeZone: Self.london) == Self.utc("2026-10-26T01:30:00Z"))
        // Off is never due.
        #expect(night.lastDue(.weekly, now: Self.now, timeZone: Self.london) == nil)
        // A weekly digest on Monday covers Monday to Sunday of the week just ended, in London's days.
        let due = try #require(last(.weekly, "2026-03-30T09:00:00Z"))
        let periods = try #require(DigestKind.weekly.periods(now: due, time: ConsoleTime(timeZone: Self.london)))
        #expect(periods.current == Self.utc("2026-03-23T00:00:00Z") * 1000..<Self.utc("2026-03-29T23:00:00Z") * 1000)
    }

    @Test func theServiceWakesAtTheNextDueTime() {
        var settings = DigestService.Settings(
            schedule: DigestSchedule(), schoolName: "s", consoleURL: "https://c.example", from: AlertDeliveryTests.sender, pseudonyms: [])
        settings.timeZone = Self.london
        #expect(settings.pause(now: Self.mondayMorning - 60 - 20) == .seconds(20), "20 s before 07:30")
        #expect(settings.pause(now: Self.mondayMorning) == .seconds(60), "otherwise every minute")
        settings.schedule = DigestSchedule(daily: nil, weekly: nil)
        #expect(settings.pause(now: Self.mondayMorning - 80) == .seconds(60))
    }

    // MARK: Storage: the claim and the bypass attempts

    @Test(arguments: Engine.allCases)
    func aDigestIsClaimedOnceAndItsEmailQueuedWithTheClaim(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let period: Range<Int64> = 1_763_942_400_000..<1_764_547_200_000
            func claim(_ id: String, login: String = "dsl", kind: DigestKind = .weekly) -> NewDigestClaim {
                NewDigestClaim(kind: kind, period: period, login: login, address: "\(login)@school.example", deliveryID: id, message: "To: x\n\nmail \(id)\n")
            }
            #expect(try await storage.claimDigest(claim("ad-first"), now: Self.now))
            // A restart, or a second instance: the same digest is claimed already, and nothing more is queued.
            #expect(try await !storage.claimDigest(claim("ad-second"), now: Self.now + 5))
            #expect(try await storage.claimDigest(claim("ad-other", login: "t7b"), now: Self.now))
            #expect(try await storage.claimDigest(claim("ad-daily", kind: .daily), now: Self.now), "another kind is another digest")
            let claims = try await storage.digestClaims(kind: .weekly, periodStart: period.lowerBound)
            #expect(claims.map(\.login) == ["dsl", "t7b"])
            #expect(claims.first?.deliveryID == "ad-first" && claims.first?.period == period && claims.first?.createdAt == Self.now)
            let queued = try await storage.alertDeliveries(alertID: claim("ad-first").outboxKey)
            #expect(queued.count == 1)
            #expect(queued.first?.id == "ad-first" && queued.first?.kind == .digest && queued.first?.state == .waiting)
            #expect(queued.first?.message == "To: x\n\nmail ad-first\n" && queued.first?.target == "dsl@school.example")
            #expect(try await storage.digestDeliveryCounts() == [.waiting: 3])
            #expect(try await storage.alertDeliveryCounts().isEmpty, "digests are not counted with the alerts")
            // Two instances claiming at once: one claim, one email.
            let raced = try await withThrowingTaskGroup(of: Bool.self) { group in
                for index in 0..<8 { group.addTask { try await storage.claimDigest(claim("ad-race-\(index)", login: "race"), now: Self.now) } }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(raced == 1)
            #expect(try await storage.digestDeliveryCounts() == [.waiting: 4])
            // Sent emails older than the cut are removed; waiting ones and the claims stay.
            let lease = try await storage.claimAlertDeliveries(owner: "w-test", now: Self.now, leaseUntil: Self.now + 60, limit: 1)
            let sent = try #require(lease.first)
            #expect(try await storage.finishAlertDelivery(id: sent.id, owner: "w-test", .sent, now: Self.now))
            #expect(try await storage.removeDigestEmails(before: Self.now) == 0, "not older than the cut")
            #expect(try await storage.removeDigestEmails(before: Self.now + 1) == 1)
            #expect(try await storage.digestDeliveryCounts() == [.waiting: 3])
            #expect(try await storage.digestClaims(kind: .weekly, periodStart: period.lowerBound).count == 3)
            // When the digests began: the first answer is kept.
            #expect(try await storage.digestsStart(kind: .weekly, now: Self.now) == Self.now)
            #expect(try await storage.digestsStart(kind: .weekly, now: Self.now + 999) == Self.now)
            #expect(try await storage.digestsStart(kind: .daily, now: Self.now + 7) == Self.now + 7)
        }
    }

    @Test(arguments: Engine.allCases)
    func bypassAttemptsAreTheBlockedBypassRecordsOfThePeriodInScope(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let machine = try await StorageTests.enrol(storage)
            let records = [
                AlertTests.record(machine, 1, user: "bob", group: "7b", category: "vpn", reason: "bypass"),
                AlertTests.record(machine, 2, user: "bob", group: "7b", category: "vpn", reason: "bypass", offset: 60),
                AlertTests.record(machine, 3, user: "bob", group: "7b", category: "vpn", action: "allow", reason: "bypass", offset: 61),
                AlertTests.record(machine, 4, user: "bob", group: "7b", category: "games", offset: 62),
                AlertTests.record(machine, 5, user: "alice", group: "7a", category: "vpn", reason: "bypass", offset: 63),
                AlertTests.record(machine, 6, user: nil, group: nil, category: "vpn", reason: "bypass", offset: 64),
                AlertTests.record(machine, 7, user: "bob", group: "7b", category: "vpn", reason: "bypass", offset: 86_400),
            ]
            _ = try await storage.storeRecords(machine: machine, records: records, dropped: 0, now: Self.now)
            let day = Self.now * 1000..<(Self.now + 86_400) * 1000
            let school = try await storage.bypassAttempts(since: day.lowerBound, until: day.upperBound, scope: .school, limit: 10)
            #expect(school == [
                BypassAttempts(user: "bob", group: "7b", count: 2), BypassAttempts(user: "alice", group: "7a", count: 1),
                BypassAttempts(user: "machine:\(machine)", group: nil, count: 1),
            ])
            #expect(try await storage.bypassAttempts(since: day.lowerBound, until: day.upperBound, scope: Scope(groups: ["7b"]), limit: 10)
                == [BypassAttempts(user: "bob", group: "7b", count: 2)])
            #expect(try await storage.bypassAttempts(since: day.lowerBound, until: day.upperBound, scope: Scope(rooms: ["lab9"]), limit: 10).isEmpty)
            #expect(try await storage.bypassAttempts(since: day.lowerBound, until: day.upperBound, scope: .school, limit: 1).count == 1)
        }
    }

    // MARK: The service

    /// The school of the service tests: a safeguarding lead of the whole
    /// school, a teacher of 7b, and people who get no digest.
    static func addPeople(_ storage: SQLStorage) async throws {
        func add(_ login: String, _ role: Role, _ scope: Scope = .school, email: String?) async throws {
            _ = try await ServerAdministration.addPerson(
                storage: storage, login: login, displayName: nil, role: role, scope: scope, password: "a long password", email: email,
                author: "cli:test", now: now)
        }
        try await add("dsl", .safeguarding, email: "dsl@school.example")
        try await add("t7b", .teacher, Scope(groups: ["7b"]), email: "t7b@school.example")
        try await add("t7a-nomail", .teacher, Scope(groups: ["7a"]), email: nil)
        try await add("admin", .admin, email: "admin@school.example")
        try await add("auditor", .auditor, email: "auditor@school.example")
        try await add("gone", .safeguarding, email: "gone@school.example")
        var gone = try #require(try await storage.person(login: "gone"))
        gone.disabledAt = now
        #expect(try await storage.updatePerson(gone))
    }

    /// The week's records: alice (7a) and bob (7b) each flagged danger, bob
    /// and dave (7a) trying ways round the filter, and a flag the week before.
    static func addRecords(_ storage: SQLStorage, _ machine: String) async throws {
        _ = try await AlertTests.store(storage, machine, [
            AlertTests.record(machine, 1, user: "alice", group: "7a", category: "dangerous_material"),
            AlertTests.record(machine, 2, user: "bob", group: "7b", category: "dangerous_material", offset: 1),
            AlertTests.record(machine, 3, user: "bob", group: "7b", category: "adult", offset: 2),
            AlertTests.record(machine, 4, user: "bob", group: "7b", category: "vpn", reason: "bypass", offset: 3),
            AlertTests.record(machine, 5, user: "dave", group: "7a", category: "vpn", reason: "bypass", offset: 4),
            AlertTests.record(machine, 6, user: "erin", group: "7b", category: "gambling", offset: -7 * 86_400),
        ])
    }

    static func service(
        _ storage: any ServerStorage, clock: TestClock, pseudonyms: Set<Role> = [], wake: @escaping @Sendable () -> Void = {}
    ) -> DigestService {
        var settings = DigestService.Settings(
            schedule: DigestSchedule(), schoolName: "Lakeside School", consoleURL: "https://hallpass.school.example",
            from: AlertDeliveryTests.sender, pseudonyms: pseudonyms)
        settings.timeZone = london
        return DigestService(settings: settings, storage: storage, logger: AlertDeliveryTests.quiet, clock: { clock.now }, wake: wake)
    }

    /// The queued email of `login`'s weekly digest of the week before `mondayMorning`.
    static func queuedDigest(_ storage: SQLStorage, _ login: String) async throws -> String? {
        let start = utc("2025-11-24T00:00:00Z") * 1000
        guard let claim = try await storage.digestClaims(kind: .weekly, periodStart: start).first(where: { $0.login == login }) else { return nil }
        let key = NewDigestClaim(kind: .weekly, period: claim.period, login: login, address: "", deliveryID: "", message: "").outboxKey
        return try await storage.alertDeliveries(alertID: key).first { $0.id == claim.deliveryID }?.message
    }

    @Test(arguments: Engine.allCases)
    func aTeachersWeeklyDigestNamesOnlyTheirGroupsStudents(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            try await Self.addPeople(storage)
            let machine = try await StorageTests.enrol(storage)
            try await Self.addRecords(storage, machine)
            let clock = TestClock(Self.now)
            let woken = TestClock(0)
            let service = Self.service(storage, clock: clock) { woken.advance(1) }
            #expect(await service.runOnce() == 0, "nothing is due on the Friday the digests began")
            clock.advance(Self.mondayMorning - Self.now)
            #expect(await service.runOnce() == 2, "the lead and the teacher of 7b")
            #expect(woken.now == 1, "the delivery is woken once")

            let teacher = try #require(try await Self.queuedDigest(storage, "t7b"))
            let teacherText = try #require(try MIMEMessage(teacher).part("text/plain")).text
            #expect(teacherText.contains("bob") && teacherText.contains("group 7b"))
            #expect(!teacherText.contains("alice") && !teacherText.contains("dave"), "another group's students are not named")
            #expect(teacherText.contains("/console/records") && !teacherText.contains("/console/alerts"), "a teacher cannot open the alerts")
            let teacherPDF = try Self.pdfText(try #require(try MIMEMessage(teacher).part("application/pdf")).body)
            #expect(teacherPDF.contains("bob") && !teacherPDF.contains("alice") && !teacherPDF.contains("dave"))
            #expect(teacherPDF.contains("erin") == false, "last week's flag is in the trend only")

            let lead = try #require(try await Self.queuedDigest(storage, "dsl"))
            let leadText = try #require(try MIMEMessage(lead).part("text/plain")).text
            for name in ["alice", "bob", "dave", "the whole school"] { #expect(leadText.contains(name), "\(name)") }
            for login in ["admin", "auditor", "gone", "t7a-nomail"] { #expect(try await Self.queuedDigest(storage, login) == nil, "\(login)") }

            // Looked at again, or by a second server on the same database: nothing more.
            #expect(await service.runOnce() == 0)
            #expect(await Self.service(storage, clock: clock).runOnce() == 0)
            #expect(try await storage.digestDeliveryCounts() == [.waiting: 2])
        }
    }

    @Test func aMissedDigestIsSentAtStartForTheLastPeriodOnlyAndPseudonymsAreKept() async throws {
        try await withTestStorage(.sqlite) { storage async throws in
            try await Self.addPeople(storage)
            let machine = try await StorageTests.enrol(storage)
            try await Self.addRecords(storage, machine)
            let clock = TestClock(Self.now)
            #expect(await Self.service(storage, clock: clock).runOnce() == 0)
            // Down from Friday until Wednesday 17 December, past three Mondays: one digest each, of the week 8 to 14 December.
            clock.advance(Self.mondayMorning - Self.now + 16 * 86_400)
            let restarted = Self.service(storage, clock: clock, pseudonyms: [.teacher])
            #expect(await restarted.runOnce() == 2)
            let start = Self.utc("2025-12-08T00:00:00Z") * 1000
            #expect(try await storage.digestClaims(kind: .weekly, periodStart: start).map(\.login) == ["dsl", "t7b"])
            #expect(try await storage.digestClaims(kind: .weekly, periodStart: Self.utc("2025-11-24T00:00:00Z") * 1000).isEmpty)
            #expect(try await storage.digestDeliveryCounts() == [.waiting: 2])
        }
        // The teacher's role sees pseudonyms: the digest of the week with bob in it names his pseudonym.
        try await withTestStorage(.sqlite) { storage async throws in
            try await Self.addPeople(storage)
            let machine = try await StorageTests.enrol(storage)
            try await Self.addRecords(storage, machine)
            let clock = TestClock(Self.now)
            #expect(await Self.service(storage, clock: clock).runOnce() == 0)
            clock.advance(Self.mondayMorning - Self.now)
            #expect(await Self.service(storage, clock: clock, pseudonyms: [.teacher]).runOnce() == 2)
            let pseudonym = Pseudonyms(key: try await storage.pseudonymKey()).of("bob")
            let message = try MIMEMessage(try #require(try await Self.queuedDigest(storage, "t7b")))
            let text = try #require(message.part("text/plain")).text
            let html = try #require(message.part("text/html")).text
            let pdf = try Self.pdfText(try #require(message.part("application/pdf")).body)
            for body in [text, html, pdf] { #expect(body.contains(pseudonym) && !body.contains("bob")) }
            let leadMessage = try MIMEMessage(try #require(try await Self.queuedDigest(storage, "dsl")))
            let lead = try #require(leadMessage.part("text/plain")).text
            #expect(lead.contains("bob"), "the lead's role sees names")
        }
    }

    // MARK: The email

    @Test func theEmailIsMixedAlternativeWithThePDFAttachedAndNothingReachesAHeader() throws {
        let london = ConsoleTime(timeZone: Self.london)
        let figures = DigestFigures(
            kind: .weekly, current: 1_763_942_400_000..<1_764_547_200_000, previous: 1_763_337_600_000..<1_763_942_400_000,
            alerts: [], previousAlerts: [], bypass: [BypassAttempts(user: "<b>zoë</b>", group: "7b", count: 3)], cut: false)
        let document = DigestDocument(
            figures: figures, schoolName: "Lakeside\r\nBcc: everyone@example.org <b>", scopeText: "group 7b",
            consoleURL: "https://hallpass.school.example", time: london, created: Self.now, names: { $0 })
        let email = try DigestEmail(
            document: document, from: AlertDeliveryTests.sender, to: "t7b@school.example", deliveryID: "ad-abcdef", date: Self.now)
        let rendered = email.render()
        let message = try MIMEMessage(rendered)
        // Headers: one each, none made from the school's name.
        #expect(message.headers.filter { $0.name == "Bcc" }.isEmpty && message.headers.filter { $0.name == "Subject" }.count == 1)
        let subject = AlertDeliveryTests.decodeWords(try #require(message.header("Subject")))
        #expect(subject.hasPrefix("[hallpass] Lakeside  Bcc: everyone@example.org <b>: weekly safeguarding digest, 2025-11-24 to 2025-11-30"))
        #expect(message.header("To") == "t7b@school.example")
        #expect(message.header("Message-ID") == "<ad-abcdef@school.example>")
        #expect(message.header("Date") == "Fri, 28 Nov 2025 09:00:00 +0000")
        #expect(message.header("Auto-Submitted") == "auto-generated")
        #expect(message.contentType == "multipart/mixed")
        // Every line within RFC 5322's 78, base64 in lines of at most 76.
        for line in rendered.split(separator: "\n") { #expect(line.utf8.count <= 78, "\(line)") }
        // The parts: the alternative's text and HTML, then the PDF.
        #expect(message.parts.map(\.contentType) == ["multipart/alternative", "application/pdf"])
        let alternative = message.parts[0]
        #expect(alternative.parts.map(\.contentType) == ["text/plain", "text/html"])
        #expect(alternative.parts[0].text == document.text && alternative.parts[1].text == document.html)
        #expect(alternative.parts[1].text.contains("&lt;b&gt;zoë&lt;/b&gt;") && !alternative.parts[1].text.contains("<b>zo"))
        let pdf = message.parts[1]
        #expect(pdf.header("Content-Disposition") == "attachment; filename=\"hallpass-weekly-2025-11-24.pdf\"")
        #expect(pdf.body == document.pdf && pdf.body.starts(with: Array("%PDF-".utf8)))
        let text = try Self.pdfText(pdf.body)
        #expect(text.contains("Weekly safeguarding digest") && text.contains("Attempts at ways round the filter"))
        #expect(text.contains("<b>zoë</b>"), "the name as it is, a letter of the PDF's fonts: \(text)")
        // An address that is not one is refused before anything is written.
        #expect(throws: ServerError.self) {
            try DigestEmail(document: document, from: AlertDeliveryTests.sender, to: "x@y.example\nBcc: z@y.example", deliveryID: "ad-1", date: 0)
        }
    }

    /// What pdftotext (poppler-utils) reads in `pdf`.
    static func pdfText(_ pdf: [UInt8]) throws -> String {
        let folder = try AlertDeliveryTests.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/digest.pdf"
        try Data(pdf).write(to: URL(fileURLWithPath: path))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/pdftotext")
        process.arguments = ["-layout", path, folder + "/digest.txt"]
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        process.waitUntilExit()
        let complaint = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0 && complaint.isEmpty, "pdftotext: \(complaint)")
        return try String(contentsOfFile: folder + "/digest.txt", encoding: .utf8)
    }

    // MARK: The running server

    /// With both digests off the service has nothing to do but must neither
    /// end the server (a service that returns ends the group) nor hold up its stop.
    @Test func aServerWithTheDigestsOffRunsAndStops() async throws {
        try await withRunningServer(.sqlite, configure: { $0.alerts.digests = DigestSchedule(daily: nil, weekly: nil) }) { server in
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await server.client.request(.GET, "/health").status == 200)
        }
    }

    /// The server as `serve` builds it, its clock moved past Monday 07:30:
    /// one weekly digest for each recipient, through the sendmail server.yaml
    /// names, each with the PDF, the teacher's naming only 7b's students.
    @Test func theRunningServerSendsOneWeeklyDigestToEachRecipientPastMonday0730() async throws {
        let folder = try AlertDeliveryTests.folder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Each message in a file of its own, written aside and renamed: a name the test sees is a whole message.
        let sendmail = try AlertDeliveryTests.script(folder, "sendmail", "cat > \"$0.$$.part\" && mv \"$0.$$.part\" \"$0.$$.eml\"")
        // The server's own digests, in London's time, looking every 100 ms instead of every minute.
        let signal = AlertSignal()
        let digests: @Sendable (any ServerStorage, TestClock) -> DigestService = { storage, clock in
            var settings = DigestService.Settings(
                schedule: DigestSchedule(), schoolName: "Lakeside School", consoleURL: "https://hallpass.school.example",
                from: AlertDeliveryTests.sender, pseudonyms: [])
            settings.timeZone = Self.london
            settings.interval = .milliseconds(100)
            return DigestService(settings: settings, storage: storage, logger: testLogger, clock: { clock.now }, wake: { signal.poke() })
        }
        try await withRunningServer(.sqlite, alerts: signal, configure: { $0.alerts.sendmail = [sendmail] }, digests: digests) { server in
            // The digests began on this Friday (as the service's first look says too, whichever comes first).
            #expect(try await server.storage.digestsStart(kind: .weekly, now: server.clock.now) == Self.now)
            try await Self.addPeople(server.storage)
            let machine = try await server.enrol(TestMachine(), room: "lab2")
            let records = [
                (1, "alice", "7a", "dangerous_material", "category"), (2, "bob", "7b", "dangerous_material", "category"),
                (3, "bob", "7b", "vpn", "bypass"), (4, "dave", "7a", "vpn", "bypass"),
            ].map { item in
                #"{"sequence":\#(item.0),"time":"2025-11-28T08:00:0\#(item.0).250Z","uid":1001,"user":"\#(item.1)","group":"\#(item.2)","kind":"tls","host":"site.example","destination":"192.0.2.7","port":443,"action":"block","category":"\#(item.3)","rule":"site.example","reason":"\#(item.4)","rulesVersion":42}"#
            }
            #expect(try await server.post("/api/v1/machine/records", #"{"records":[\#(records.joined(separator: ","))],"dropped":0}"#, signedBy: machine).status == 200)
            func mails() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".eml") } }
            // The danger alerts' emails to the lead first (two), so that what follows is the digests alone.
            for _ in 0..<300 where try mails().count < 2 { try await Task.sleep(for: .milliseconds(100)) }
            let alertMails = try mails()
            #expect(alertMails.count == 2)
            // Before Monday 07:30 nothing more: the digests began on this Friday.
            try await Task.sleep(for: .seconds(1))
            #expect(try mails().count == 2)

            server.clock.advance(Self.mondayMorning - server.clock.now)
            for _ in 0..<300 where try mails().count < 4 { try await Task.sleep(for: .milliseconds(100)) }
            // A few more looks send nothing more.
            try await Task.sleep(for: .seconds(1))
            let digestMails = try mails().filter { !alertMails.contains($0) }
            #expect(digestMails.count == 2)
            var to: [String] = []
            for name in digestMails {
                let message = try MIMEMessage(try String(contentsOfFile: folder + "/" + name, encoding: .utf8))
                let recipient = try #require(message.header("To"))
                to.append(recipient)
                #expect(AlertDeliveryTests.decodeWords(message.header("Subject") ?? "").contains("Lakeside School: weekly safeguarding digest, 2025-11-24 to 2025-11-30"))
                let pdf = try Self.pdfText(try #require(message.part("application/pdf")).body)
                #expect(pdf.contains("Weekly safeguarding digest"))
                if recipient == "t7b@school.example" {
                    #expect(pdf.contains("bob") && !pdf.contains("alice") && !pdf.contains("dave"))
                } else {
                    #expect(pdf.contains("bob") && pdf.contains("alice") && pdf.contains("dave"))
                }
            }
            #expect(to.sorted() == ["dsl@school.example", "t7b@school.example"])
            // The outcomes are written once sendmail has exited, a moment after the messages are there.
            for _ in 0..<50 where try await server.storage.digestDeliveryCounts() != [.sent: 2] { try await Task.sleep(for: .milliseconds(100)) }
            #expect(try await server.storage.digestDeliveryCounts() == [.sent: 2])
        }
    }
}

/// A MIME message or part, parsed back as a mail reader would: headers
/// (continuation lines joined), the content type, and either the parts of
/// a multipart (by its boundary) or the body decoded from base64.
struct MIMEMessage {
    var headers: [(name: String, value: String)]
    /// Without its parameters: `multipart/mixed`, `text/plain`.
    var contentType: String
    var parts: [MIMEMessage] = []
    var body: [UInt8] = []

    var text: String { String(decoding: body, as: UTF8.self) }

    func header(_ name: String) -> String? { headers.first { $0.name.lowercased() == name.lowercased() }?.value }

    /// The first part (at any depth) of `type`.
    func part(_ type: String) -> MIMEMessage? {
        if contentType == type { return self }
        for part in parts { if let found = part.part(type) { return found } }
        return nil
    }

    struct Malformed: Error, CustomStringConvertible {
        var description: String
    }

    init(_ text: String) throws {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let blank = lines.firstIndex(of: "") else { throw Malformed(description: "no end of the headers") }
        headers = AlertDeliveryTests.headers(lines[..<blank].joined(separator: "\n") + "\n")
        let fullType = headers.first { $0.name.lowercased() == "content-type" }?.value ?? "text/plain"
        let bodyLines = Array(lines[(blank + 1)...])
        contentType = String(fullType.split(separator: ";")[0])
        if contentType.hasPrefix("multipart/") {
            guard let boundary = fullType.components(separatedBy: "boundary=\"").dropFirst().first?.split(separator: "\"").first
            else { throw Malformed(description: "a multipart without a boundary") }
            var current: [String]? = nil
            var closed = false
            for line in bodyLines {
                if line == "--" + boundary + "--" {
                    if let current { parts.append(try MIMEMessage(current.joined(separator: "\n"))) }
                    closed = true
                    break
                } else if line == "--" + boundary {
                    if let current { parts.append(try MIMEMessage(current.joined(separator: "\n"))) }
                    current = []
                } else {
                    current?.append(line)
                }
            }
            guard closed else { throw Malformed(description: "the multipart's closing boundary is missing") }
        } else {
            guard headers.contains(where: { $0.name == "Content-Transfer-Encoding" && $0.value == "base64" }) else {
                throw Malformed(description: "a part not in base64")
            }
            for line in bodyLines where line.utf8.count > 76 { throw Malformed(description: "a base64 line of \(line.utf8.count)") }
            guard let data = Data(base64Encoded: bodyLines.joined()) else { throw Malformed(description: "a part's base64 does not decode") }
            body = Array(data)
        }
    }
}

