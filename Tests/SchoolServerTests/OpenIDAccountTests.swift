import Foundation
@testable import SchoolServer
import Testing

/// Which account an OpenID sign-in lands in (OpenIDRoutes.account), on both
/// engines: the mapping's role and scope written at each sign-in; with
/// `unmatched: people`, an account the mapping made signs in no longer once
/// no rule matches, while one an admin made keeps the admin's role; a local
/// account of the same login, or a disabled one, is never taken.
@Suite struct OpenIDAccountTests {
    @Test(arguments: Engine.allCases)
    func theMappingDecidesAndAnAdminsAccountStays(engine: Engine) async throws {
        try await withTestStorage(engine) { storage async throws in
            let client = OpenIDClient(
                configuration: OpenIDConfiguration(
                    issuer: "https://id.school.test", clientID: "hallpass", clientSecretFile: "/dev/null",
                    redirectURL: "https://hallpass.school.test/console/oidc/callback"),
                clientSecret: "s", store: InMemorySignInStateStore(), transport: try await TestProvider(issuer: "https://id.school.test"))
            let routes = OpenIDRoutes(
                client: client, storage: storage,
                sessions: Sessions(storage: storage, settings: ServerConfiguration.Console(), clock: { 1_000 }), perMinute: 20,
                clock: { 1_000 })
            func identity(_ login: String, _ role: Role?, _ scope: Scope = .school) -> VerifiedIdentity {
                VerifiedIdentity(login: login, name: login, role: role, scope: scope, subject: login, returnTo: "/console/")
            }

            // The first sign-in makes the account; the next writes the mapping's role again.
            #expect(try await routes.account(for: identity("alice", .admin), now: 1_000, logger: testLogger)?.role == .admin)
            #expect(
                try await routes.account(for: identity("alice", .teacher, Scope(rooms: ["lab2"])), now: 1_001, logger: testLogger)?.scope
                    == Scope(rooms: ["lab2"]))
            // Out of every group the mapping knows: no sign-in, not the old role.
            #expect(try await routes.account(for: identity("alice", nil), now: 1_002, logger: testLogger) == nil)

            // An account an admin made for the provider keeps the admin's role.
            #expect(
                try await storage.addPerson(
                    StoredPerson(login: "governor", displayName: "G", role: .auditor, method: .oidc, createdBy: "person:it", createdAt: 0)))
            #expect(try await routes.account(for: identity("governor", nil), now: 1_003, logger: testLogger)?.role == .auditor)

            // A local account of the same login is not taken over; a disabled one does not sign in.
            _ = try await ServerAdministration.addPerson(
                storage: storage, login: "bob", displayName: nil, role: .auditor, scope: .school, password: "a long password", author: "t", now: 0)
            #expect(try await routes.account(for: identity("bob", .admin), now: 1_004, logger: testLogger) == nil)
            #expect(try await storage.person(login: "bob")?.role == .auditor)
            _ = try await ServerAdministration.changePerson(
                storage: storage, login: "governor", .init(disabled: true), author: "t", now: 1_005)
            #expect(try await routes.account(for: identity("governor", .auditor), now: 1_006, logger: testLogger) == nil)

            // The provider's email: taken by a new account and by one without an address; an address an admin gave stays.
            var dana = identity("dana", .safeguarding)
            dana.email = "dana@school.test"
            #expect(try await routes.account(for: dana, now: 1_007, logger: testLogger)?.email == "dana@school.test")
            #expect(try await routes.account(for: identity("alice", .admin), now: 1_008, logger: testLogger)?.email == nil)
            var alice = identity("alice", .admin)
            alice.email = "alice@school.test"
            #expect(try await routes.account(for: alice, now: 1_009, logger: testLogger)?.email == "alice@school.test")
            #expect(try await storage.person(login: "alice")?.email == "alice@school.test")
            _ = try await ServerAdministration.changePerson(
                storage: storage, login: "dana", .init(email: "dsl@school.test"), author: "t", now: 1_010)
            #expect(try await routes.account(for: dana, now: 1_011, logger: testLogger)?.email == "dsl@school.test")
            #expect(try await storage.person(login: "dana")?.email == "dsl@school.test")
        }
    }
}
