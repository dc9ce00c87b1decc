import BlockPage
@testable import FilterControl
import Foundation
import Logging
import SharedStore
import Testing
import VerdictCore

/// Access requests and the live channel on the machine: the decisions a
/// live state carries reach the request store (and the block page), an
/// approval opens the site only for the audience of its live item, and a
/// name in a locked category offers no request.
@Suite struct LiveRequestTests {
    /// filter-control enrolled with a school, its bundle's store putting
    /// `v1.casino.example` in gambling, with `policy` and the built-in form.
    static func build(policy: String, folder: TemporaryFolder) async throws -> FilterControlApplication {
        let factory = BundleFactory()
        try factory.write(version: 1, to: folder.sub("source"), extraFiles: [(BundleManifest.policyFileName, Array(policy.utf8))])
        let configuration = try Configuration(
            yaml: """
                queue:
                  user: nobody
                rules:
                  directory: \(folder.sub("lib"))
                  source: file://\(folder.sub("source"))/
                  trustedKeys: ["\(factory.key.publicKey)"]
                blockPage:
                  requestAccess:
                    text: "Ask for access"
                    url: builtin
                school:
                  server: https://school.example:8443/
                  fingerprint: \(String(repeating: "ab", count: 32))
                """)
        try FileManager.default.createDirectory(atPath: folder.sub("lib"), withIntermediateDirectories: true)
        try MachineIdentity(
            machine: LiveStateTests.machine, server: try SchoolServerURL(parsing: "https://school.example:8443/"),
            fingerprint: try #require(ServerFingerprint(hex: String(repeating: "ab", count: 32))), key: .init()
        ).write(directory: folder.sub("lib"))
        return try await FilterControlApplication.build(
            configuration: configuration,
            options: Control.Options(
                configPath: folder.sub("hallpass.yaml"), store: nil, runtimeDirectory: folder.sub("run"), dataBinary: folder.sub("none")),
            logger: Logger(label: "test"))
    }

    @Test func theDecisionsOfALiveStateReachTheRequestsAndAnApprovalOpensTheSiteForItsAudienceAlone() async throws {
        let folder = try TemporaryFolder("live-requests")
        let application = try await Self.build(policy: LiveStateTests.policyYAML, folder: folder)
        let control = application.control
        let school = try #require(await control.school)
        let requests = await control.requests
        let now = Int64(Date().timeIntervalSince1970)
        let ada = try requests.submit(
            host: "v1.casino.example", url: "https://v1.casino.example/", category: "gambling", reason: "maths", user: "ada", group: "year9")
        let bob = try requests.submit(host: "pad1.example", url: "", category: "gambling", reason: "film", user: "bob", group: "year9")

        // The school approved ada's for her alone (a live item for user ada) and denied bob's;
        // a decision on a request this machine does not have changes nothing.
        let bytes = try LiveStateTests.envelope(
            sequence: 5, issued: now,
            items: [
                LiveStateTests.item("lr-ada", targets: ["v1.casino.example"], scope: ("user", "ada"), from: now, until: now + 600)
            ],
            requests: [
                ["id": ada.id, "state": "approved", "message": "for the lesson", "until": now + 600],
                ["id": bob.id, "state": "denied", "message": "not now"],
                ["id": "0badc0de", "state": "approved", "until": now + 600],
            ])
        let context = await control.liveContext()
        let state = try LiveState.verify(bytes, policy: context.policy.live, machine: LiveStateTests.machine, held: school.live.order, now: now).get()
        try school.live.accept(
            try JSONDecoder().decode(LiveState.Envelope.self, from: Data(bytes)), verified: state, outcome: context.bounds.check(state, now: now))
        await control.liveStateApplied()

        let approved = try #require(requests.latest(host: "v1.casino.example", user: "ada"))
        #expect(approved.state == .approved && approved.decidedBySchool == true && approved.message == "for the lesson")
        #expect(approved.allowUntil == Date(timeIntervalSince1970: TimeInterval(now + 600)))
        let denied = try #require(requests.latest(host: "pad1.example", user: "bob"))
        #expect(denied.state == .denied && denied.message == "not now")
        #expect(requests.list().count == 2)
        // Kept in requests.json: a restart shows the same.
        #expect(AccessRequestStore(path: requests.path).latest(host: "pad1.example", user: "bob")?.state == .denied)

        // The approval is the live item's: ada may go, bob (same group, same machine) may not.
        let placements: [UInt32: (audience: Audience, user: LocalUser)] = [
            1001: (.group("year9"), LocalUser(uid: 1001, name: "ada", unixGroups: ["year9"])),
            1002: (.group("year9"), LocalUser(uid: 1002, name: "bob", unixGroups: ["year9"])),
        ]
        let (set, _) = await control.computePolicySet(
            now: Date(timeIntervalSince1970: TimeInterval(now)), policy: await control.policy, placements: placements,
            policyClock: PolicyClock(zoneName: nil))
        let engines = PolicyEngines(rules: await control.store, set: set)
        func verdict(_ host: String, uid: UInt32) throws -> Verdict {
            engines.decide(FlowFacts(host: try HostName(host), nameSource: .tlsServerName, uid: uid)).verdict
        }
        #expect(try verdict("v1.casino.example", uid: 1001) == .allow)
        #expect(try verdict("v1.casino.example", uid: 1002) == .drop, "an approval in the console is not an override for everyone")

        // The block page shows each student where their request stands.
        let responder = try BlockPageSetup.responder(configuration: application.configuration, control: control)
        let adaPage = responder.respond(to: BlockPageRequest(method: "GET", target: "/", host: "v1.casino.example", user: "ada"))
        #expect(String(decoding: adaPage.body, as: UTF8.self).contains("Your request was approved"))
        let bobPage = responder.respond(to: BlockPageRequest(method: "GET", target: "/", host: "pad1.example", user: "bob"))
        #expect(String(decoding: bobPage.body, as: UTF8.self).contains("not now"))
    }

    @Test func aNameInALockedCategoryOffersNoRequestAndAPostedFormIsRefused() async throws {
        let folder = try TemporaryFolder("live-requests")
        let policy = LiveStateTests.policyYAML.replacingOccurrences(of: "locked: [adult, IWF]", with: "locked: [gambling]")
        let application = try await Self.build(policy: policy, folder: folder)
        let control = application.control
        let requests = await control.requests
        let responder = try BlockPageSetup.responder(configuration: application.configuration, control: control)
        func page(_ host: String) -> String {
            String(decoding: responder.respond(to: BlockPageRequest(method: "GET", target: "/", host: host)).body, as: UTF8.self)
        }
        #expect(page("example.org").contains("request-access-form"))
        // In the store's gambling, which the policy locks: the host and a name below it.
        #expect(!page("v1.casino.example").contains("request-access-form"))
        #expect(!page("www.v1.casino.example").contains("request-access-form"))

        // A form posted all the same (its token good) is refused, and nothing is recorded.
        for (host, category) in [("v1.casino.example", ""), ("example.org", "gambling")] {
            let token = control.formTokens.token(user: nil, host: host)
            let body = "host=\(host)&url=&category=\(category)&reason=please&token=\(token)"
            let answer = responder.respond(to: BlockPageRequest(method: "POST", target: "/request-access", host: host, body: Array(body.utf8)))
            #expect(answer.status == 403, "\(host)")
            #expect(String(decoding: answer.body, as: UTF8.self).contains("This page cannot be opened on request."))
        }
        #expect(requests.list().isEmpty)
        // A name that is not locked is recorded.
        let token = control.formTokens.token(user: nil, host: "example.org")
        let body = "host=example.org&url=&reason=please&token=\(token)"
        #expect(responder.respond(to: BlockPageRequest(method: "POST", target: "/request-access", host: "example.org", body: Array(body.utf8))).status == 200)
        #expect(requests.list().map(\.host) == ["example.org"])
    }
}
