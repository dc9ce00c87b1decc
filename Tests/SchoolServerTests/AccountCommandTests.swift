import Foundation
@testable import SchoolServer
import Testing

/// The code of `hallpass-server user ...` (ServerAdministration, as the
/// subcommands call it) on both engines, each change in the audit trail;
/// and the built `hallpass-server` itself for `--password-stdin`, the
/// refusals it prints, and the trail of the commands that change things.
@Suite struct AccountCommandTests {
    static let now: Int64 = 1_764_320_400
    static let password = "a long enough password"

    @Test(arguments: Engine.allCases)
    func peopleAreAddedOnlyWithARoleAScopeAndAPasswordThatGoTogether(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            func add(_ login: String, _ role: Role, _ scope: Scope = .school, password: String = Self.password) async throws -> StoredPerson {
                try await ServerAdministration.addPerson(
                    storage: storage, login: login, displayName: nil, role: role, scope: scope, password: password, author: "cli:root", now: Self.now)
            }
            let refusals: [(String, Role, Scope, String, String)] = [
                ("t1", .teacher, .school, Self.password, "user.role"),
                ("m1", .metrics, .school, Self.password, "user.role"),
                ("a1", .admin, Scope(rooms: ["lab2"]), Self.password, "user.role"),
                ("Upper", .auditor, .school, Self.password, "user.login"),
                ("short", .auditor, .school, "tiny", "user.password"),
                ("long", .auditor, .school, String(repeating: "x", count: 73), "user.password"),
            ]
            for (login, role, scope, password, code) in refusals {
                await #expect(throws: ServerError(code: code, message: ""), "\(login)") {
                    do {
                        _ = try await add(login, role, scope, password: password)
                    } catch let error as ServerError {
                        throw ServerError(code: error.code, message: "")
                    }
                }
            }
            let teacher = try await add("t.one@school", .teacher, Scope(rooms: ["lab2"], groups: ["7a"]))
            #expect(teacher.displayName == "t.one@school")
            let hash = try #require(teacher.passwordHash)
            #expect(hash.hasPrefix("$2b$12$") || hash.hasPrefix("$2a$12$") || hash.hasPrefix("$2y$12$"))
            #expect(try await storage.person(login: "t.one@school") == teacher)
            await #expect(throws: ServerError.self) { _ = try await add("t.one@school", .auditor) }

            let table = try await ServerAdministration.peopleTable(storage: storage, now: Self.now)
            #expect(table.contains("t.one@school") && table.contains("rooms lab2; groups 7a") && table.contains("never"))

            // Changes: a teacher made whole-school is refused; safeguarding for the whole school is not.
            await #expect(throws: ServerError.self) {
                _ = try await ServerAdministration.changePerson(
                    storage: storage, login: "t.one@school", .init(scope: .school), author: "cli:root", now: Self.now)
            }
            let changed = try await ServerAdministration.changePerson(
                storage: storage, login: "t.one@school", .init(role: .safeguarding, scope: .school, displayName: "Tee One"), author: "cli:root",
                now: Self.now)
            #expect(changed.role == .safeguarding && changed.scope == .school && changed.displayName == "Tee One")
            await #expect(throws: ServerError.self) {
                _ = try await ServerAdministration.changePerson(storage: storage, login: "t.one@school", .init(), author: "cli:root", now: Self.now)
            }
            try await ServerAdministration.setPassword(
                storage: storage, login: "t.one@school", password: "another good password", author: "cli:root", now: Self.now)
            #expect(try await storage.person(login: "t.one@school")?.passwordHash != hash)
            #expect(try await ServerAdministration.signOutPerson(storage: storage, login: "t.one@school", author: "cli:root", now: Self.now) == 0)
            try await ServerAdministration.removePerson(storage: storage, login: "t.one@school", author: "cli:root", now: Self.now)
            await #expect(throws: ServerError.self) {
                try await ServerAdministration.removePerson(storage: storage, login: "t.one@school", author: "cli:root", now: Self.now)
            }

            let events = try await storage.auditEvents(AuditQuery()).events.map(\.event).reversed()
            #expect(events.map(\.action) == ["person.add", "person.change", "person.change", "session.sign-out-everywhere", "person.remove"])
            #expect(events.allSatisfy { $0.actor == "cli:root" && $0.target == "t.one@school" })
            #expect(events.map(\.detail) == ["role teacher, scope rooms lab2; groups 7a", "role safeguarding, scope whole school, name", "password", "0 sessions", nil])
            #expect(!"\(events)".contains(Self.password))
        }
    }

    /// The built program, beside the test bundle.
    static var program: String {
        let folder = Bundle.main.bundleURL.deletingLastPathComponent().path
        for candidate in [folder + "/hallpass-server", FileManager.default.currentDirectoryPath + "/.build/debug/hallpass-server"]
        where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        return folder + "/hallpass-server"
    }

    /// Runs `hallpass-server ARGUMENTS --config CONFIG` with `input` on its standard input.
    static func run(_ arguments: [String], config: String, input: String = "") throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments + ["--config", config]
        var environment = ProcessInfo.processInfo.environment
        environment["USER"] = "opal"
        environment.removeValue(forKey: "SUDO_USER")
        process.environment = environment
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stdout
        try process.run()
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }

    @Test func theCommandsReadAPasswordFromStandardInputAndWriteTheTrail() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.program), "build hallpass-server first (swift build)")
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-users-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let config = folder + "/server.yaml"
        try "database: \(folder)/server.db\n".write(toFile: config, atomically: true, encoding: .utf8)
        #expect(try Self.run(["init", "--name", "localhost"], config: config).status == 0)

        let added = try Self.run(
            ["user", "add", "t.one", "--role", "teacher", "--room", "lab2", "--name", "Tee One", "--password-stdin"], config: config,
            input: Self.password + "\n")
        #expect(added.status == 0, "\(added.output)")
        #expect(added.output.contains("added t.one: teacher, rooms lab2"))
        let noScope = try Self.run(["user", "add", "t.two", "--role", "teacher", "--password-stdin"], config: config, input: Self.password + "\n")
        #expect(noScope.status != 0)
        #expect(noScope.output.contains("a teacher needs a scope"))
        let metrics = try Self.run(["user", "add", "m", "--role", "metrics", "--password-stdin"], config: config, input: Self.password + "\n")
        #expect(metrics.status != 0)
        #expect(try Self.run(["user", "set", "t.one", "--disable"], config: config).status == 0)
        #expect(try Self.run(["user", "list"], config: config).output.contains("disabled"))
        #expect(try Self.run(["user", "password", "t.one", "--password-stdin"], config: config, input: "another good password\n").status == 0)
        #expect(try Self.run(["user", "sign-out", "t.one"], config: config).output.contains("ended 0 sessions of t.one"))
        #expect(try Self.run(["api-token", "create", "--role", "teacher"], config: config).status != 0)
        let token = try Self.run(["api-token", "create", "--role", "teacher", "--room", "lab2"], config: config)
        #expect(token.status == 0, "\(token.output)")
        let enrolment = try Self.run(["token", "create", "--room", "lab2"], config: config)
        #expect(enrolment.status == 0, "\(enrolment.output)")
        #expect(try Self.run(["machine", "revoke", "m-aaaaaaaaaaaaaaaaaaaa"], config: config).status != 0)
        #expect(try Self.run(["user", "remove", "t.one"], config: config).status == 0)

        let events = try await withServerStorage(.sqlite(path: folder + "/server.db"), logger: testLogger) { storage in
            try await storage.auditEvents(AuditQuery()).events.map(\.event)
        }
        #expect(
            events.reversed().map(\.action)
                == ["person.add", "person.change", "person.change", "session.sign-out-everywhere", "token.create", "enrolment-token.create", "person.remove"])
        #expect(events.allSatisfy { $0.actor == "cli:opal" })
        let lastToken = token.output.split(separator: "\n").last.map(String.init) ?? "-"
        #expect(!events.contains { "\($0)".contains(lastToken) || "\($0)".contains(Self.password) })
    }
}
