import FilterControl
import Foundation
import SchoolServer
import Testing

/// The console's OpenID client against a real provider: django-oidc-provider
/// (scripts/lib/oidc-provider/run.sh) over HTTPS on 127.0.0.1 under a CA
/// made for the test, which the client trusts through `caFile`. The person's
/// part (the provider's sign-in form, the redirects) is Helpers/oidc_user.py,
/// as a browser would do it; the console's browser tests do the same with Chromium.
@Suite(.serialized) struct OpenIDIntegrationTests {
    static let redirectURL = "https://127.0.0.1:8443/console/oidc/callback"
    static let password = "school-password"

    /// The provider, started for one test and stopped by its pid.
    final class Provider {
        let folder: String
        let port: Int
        let process: ChildProcess
        var issuer: String { "https://127.0.0.1:\(port)/openid" }

        init() throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-oidc-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let free = try shell(#"python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'"#)
            guard let port = Int(free.output.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw TestNetworkError("no free port: \(free.output)")
            }
            self.port = port
            process = try ChildProcess(
                [
                    TestNetwork.packageRoot + "/scripts/lib/oidc-provider/run.sh", "--port", String(port), "--folder", folder + "/state",
                    "--redirect-uri", OpenIDIntegrationTests.redirectURL, "--password", OpenIDIntegrationTests.password,
                ], logPath: folder + "/provider.log")
            // Django's start (migrations, the test users) takes seconds, and far more while the
            // whole unit suite runs beside it on two cores: up to 3 minutes before it is a failure.
            for _ in 0..<1800 {
                if log.contains("oidc-provider ready") { return }
                guard process.isRunning else { break }
                usleep(100_000)
            }
            let how = process.exitStatus.map { "it exited with status \($0)" } ?? "it was not ready after 180 s"
            stop()
            throw TestNetworkError(
                "the OpenID provider did not start (\(how); scripts/install-deps.sh makes its virtualenv); its log:\n\(log.suffix(4000))")
        }

        var log: String { (try? String(contentsOfFile: folder + "/provider.log", encoding: .utf8)) ?? "" }

        func stop() {
            _ = process.stop()
            try? FileManager.default.removeItem(atPath: folder)
        }

        func configuration(caFile: Bool = true) -> OpenIDConfiguration {
            var configuration = OpenIDConfiguration(
                issuer: issuer, clientID: "hallpass", clientSecretFile: folder + "/state/client-secret", redirectURL: OpenIDIntegrationTests.redirectURL)
            configuration.scopes = ["openid", "profile", "email", "groups"]
            configuration.roles = [
                .init(value: "admins", role: .admin),
                .init(value: "dsl", role: .safeguarding),
                .init(value: "teacher-lab2", role: .teacher, scope: Scope(rooms: ["lab2"])),
            ]
            configuration.caFile = caFile ? folder + "/state/ca.pem" : nil
            return configuration
        }

        /// The person signs in at the provider as `user`; returns the code and state it sends back.
        func signIn(_ url: URL, as user: String) throws -> (code: String, state: String) {
            let helper = TestNetwork.packageRoot + "/Tests/IntegrationTests/Helpers/oidc_user.py"
            let result = try shell(
                "python3 \(helper) '\(url.absoluteString)' --redirect-uri \(OpenIDIntegrationTests.redirectURL) --ca \(folder)/state/ca.pem "
                    + "--user \(user) --password \(OpenIDIntegrationTests.password)")
            let line = result.output.split(separator: "\n").last.map(String.init) ?? ""
            guard result.status == 0, let answer = try? JSONDecoder().decode([String: String].self, from: Data(line.utf8)),
                let code = answer["code"], let state = answer["state"]
            else {
                throw TestNetworkError("signing in as \(user) at the provider failed: \(result.output)\nthe provider's log:\n\(log.suffix(3000))")
            }
            return (code, state)
        }
    }

    @Test func teachersAndTheSafeguardingLeadSignInAndNobodyElse() async throws {
        let provider = try Provider()
        defer { provider.stop() }
        let client = try OpenIDClient.make(configuration: provider.configuration(), store: InMemorySignInStateStore())
        do {
            // Ada: a teacher of lab2, sent back where she was going.
            let adaURL = try await client.begin(returnTo: "/console/records?room=lab2")
            #expect(adaURL.absoluteString.hasPrefix(provider.issuer + "/authorize?"))
            let ada = try provider.signIn(adaURL, as: "ada")
            let adaIdentity = try await client.finish(code: ada.code, state: ada.state)
            #expect(adaIdentity.login == "ada")
            #expect(adaIdentity.name == "Ada Lovelace")
            #expect(adaIdentity.role == .teacher)
            #expect(adaIdentity.scope == Scope(rooms: ["lab2"]))
            #expect(adaIdentity.returnTo == "/console/records?room=lab2")
            #expect(!adaIdentity.subject.isEmpty)

            // The same answer again (a replayed callback): the state was used.
            let replay = await #expect(throws: ServerError.self) { try await client.finish(code: ada.code, state: ada.state) }
            #expect(replay?.code == "oidc.state")

            // Dora: the designated safeguarding lead, the whole school.
            let dora = try provider.signIn(try await client.begin(returnTo: nil), as: "dora")
            let doraIdentity = try await client.finish(code: dora.code, state: dora.state)
            #expect(doraIdentity.role == .safeguarding)
            #expect(doraIdentity.scope == .school)
            #expect(doraIdentity.returnTo == "/console/")

            // Ian: an admin.
            let ian = try provider.signIn(try await client.begin(returnTo: nil), as: "ian")
            #expect(try await client.finish(code: ian.code, state: ian.state).role == .admin)

            // Sam: signed in at the provider, but in no group a rule names.
            let sam = try provider.signIn(try await client.begin(returnTo: nil), as: "sam")
            let refused = await #expect(throws: ServerError.self) { try await client.finish(code: sam.code, state: sam.state) }
            #expect(refused?.code == "oidc.no-role")

            // A code used once is refused by the provider itself, with a fresh state.
            let again = try provider.signIn(try await client.begin(returnTo: nil), as: "ada")
            _ = try await client.finish(code: again.code, state: again.state)
            let anotherState = try provider.signIn(try await client.begin(returnTo: nil), as: "ada")
            let reused = await #expect(throws: ServerError.self) { try await client.finish(code: again.code, state: anotherState.state) }
            #expect(reused?.code == "oidc.token")
            #expect(reused?.message.contains(again.code) == false)
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }

    /// Without the school's CA the provider's certificate is not trusted: no discovery, no sign-in.
    @Test func theProviderIsTrustedOnlyThroughItsCA() async throws {
        let provider = try Provider()
        defer { provider.stop() }
        let client = try OpenIDClient.make(configuration: provider.configuration(caFile: false), store: InMemorySignInStateStore())
        let error = await #expect(throws: ServerError.self) { try await client.begin(returnTo: nil) }
        #expect(error?.code == "oidc.http")
        try await client.shutdown()
    }
}
