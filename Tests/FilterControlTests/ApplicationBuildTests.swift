@testable import FilterControl
import Foundation
import Logging
import ServiceLifecycle
import Testing

/// `FilterControlApplication.build` makes what filter-control runs from a
/// configuration and starts nothing; these tests make it as `main` does,
/// without root.
@Suite struct ApplicationBuildTests {
    /// A service that stands in for the admin socket and the metrics endpoint, which bind when made.
    struct Placeholder: Service {
        let name: String
        func run() async throws {}
    }

    func configuration(_ folder: TemporaryFolder, extra: String = "") throws -> Configuration {
        try Configuration(
            yaml: """
                queue:
                  user: nobody
                rules:
                  directory: \(folder.sub("lib"))
                policy:
                  block: [ gambling ]
                """ + extra)
    }

    func options(_ folder: TemporaryFolder, store: String?) -> Control.Options {
        Control.Options(
            configPath: folder.sub("hallpass.yaml"), store: store, runtimeDirectory: folder.sub("run"), dataBinary: folder.sub("no-filter-data"))
    }

    @Test func buildingMakesTheGraphAndStartsNothing() async throws {
        let folder = try TemporaryFolder("build")
        let store = folder.sub("rules.hpstore")
        try Data(try BundleFactory.store(version: 7)).write(to: URL(fileURLWithPath: store))
        let configuration = try configuration(
            folder,
            extra: """

                log:
                  file: \(folder.sub("audit.jsonl"))
                  journald: false
                metrics:
                  address: 127.0.0.1
                  port: 9
                notify: false
                """)
        let application = try await FilterControlApplication.build(
            configuration: configuration, options: options(folder, store: store), logger: Logger(label: "test"))
        let control = application.control
        // The parts the configuration asks for are made; nothing runs yet.
        let (audit, metrics, notifier, supervisor) = await (control.audit, control.metrics, control.notifier, control.supervisor)
        #expect(audit != nil && metrics != nil && notifier == nil)
        #expect(supervisor.status.pid == nil && supervisor.status.rulesVersion == nil)
        #expect(!FileManager.default.fileExists(atPath: folder.sub("run")), "the policy file is written by run, not build")
        #expect(await control.store.version == 7)
        // The services in the order they start: the audit log first (it stops last, after
        // filter-data's last reports), filter-data's supervisor next, the admin socket and the metrics last.
        let names = application.services(admin: Placeholder(name: "admin"), metrics: Placeholder(name: "metrics")).map { service in
            (service as? Placeholder)?.name ?? String(describing: type(of: service))
        }
        #expect(
            names == [
                "DrainingService", "DataSupervisorService", "ProxySupervisorService", "ReadinessService", "PolicyClockService", "SafeSearchService",
                "RuleRefreshService", "SignalService", "admin", "metrics",
            ])
    }

    @Test func buildRefusesWhatCannotStartWithTheExitStatusMainReturns() async throws {
        let folder = try TemporaryFolder("build")
        let configuration = try configuration(folder)
        // No store there: 65 (the rules cannot be used).
        await #expect(throws: Control.StartError.self) {
            _ = try await FilterControlApplication.build(
                configuration: configuration, options: options(folder, store: folder.sub("missing.hpstore")), logger: Logger(label: "test"))
        }
        do {
            _ = try await FilterControlApplication.build(
                configuration: configuration, options: options(folder, store: folder.sub("missing.hpstore")), logger: Logger(label: "test"))
        } catch {
            #expect(error.status == 65)
        }
        // Nothing installed and no rules.source: 66, with what to do.
        do {
            _ = try await FilterControlApplication.build(configuration: configuration, options: options(folder, store: nil), logger: Logger(label: "test"))
            Issue.record("built with no rules")
        } catch {
            #expect(error.status == 66 && error.message.contains("rules.source"))
        }
    }

    @Test func theSchoolsReporterIsMadeWithAnIdentityOnly() async throws {
        let folder = try TemporaryFolder("build")
        let store = folder.sub("rules.hpstore")
        try Data(try BundleFactory.store(version: 7)).write(to: URL(fileURLWithPath: store))
        let fingerprint = String(repeating: "ab", count: 32)
        // Every other output off: the outbox alone makes an audit log.
        let configuration = try configuration(
            folder,
            extra: """

                log:
                  file: none
                  journald: false
                notify: false
                school:
                  server: https://school.example:8443/
                  fingerprint: \(fingerprint)
                """)
        let without = try await FilterControlApplication.build(
            configuration: configuration, options: options(folder, store: store), logger: Logger(label: "test"))
        let (withoutSchool, withoutAudit) = await (without.control.school, without.control.audit)
        #expect(without.reporter == nil && without.liveChannel == nil && withoutSchool == nil, "not enrolled: filtering goes on, nothing is queued")
        #expect(withoutAudit == nil)

        try MachineIdentity(
            machine: "m-abcdefghij234567abcd", server: try SchoolServerURL(parsing: "https://school.example:8443/"),
            fingerprint: try #require(ServerFingerprint(hex: fingerprint)), key: .init()
        ).write(directory: folder.sub("lib"))
        let application = try await FilterControlApplication.build(
            configuration: configuration, options: options(folder, store: store), logger: Logger(label: "test"))
        let control = application.control
        let (school, audit) = await (control.school, control.audit)
        #expect(application.reporter != nil && school?.outbox.folder == folder.sub("lib") + "/outbox")
        #expect(audit?.outbox != nil)
        let names = application.services(admin: Placeholder(name: "admin"), metrics: nil).map { service in
            (service as? Placeholder)?.name ?? String(describing: type(of: service))
        }
        #expect(application.forwarder != nil)
        #expect(names.suffix(4) == ["SchoolReportingService", "LiveChannelService", "AccessRequestForwardingService", "admin"], "\(names)")
        #expect(application.liveChannel != nil && school?.live.path == folder.sub("lib") + "/" + LiveStateStore.fileName)
        let status = await control.status()
        #expect(status.live?.connected == false && status.live?.sequence == 0 && status.live?.keys == 0)
        let report = await control.checkinReport(users: ["alice", "bob"])
        #expect(report.rulesVersion == 7 && report.filterData == .down && report.filterDataRestarts == 0)
        #expect(report.failMode == "open" && report.recordsWaiting == 0 && report.recordsDropped == 0)
        #expect(report.users == ["alice", "bob"] && report.version == HallpassVersion.current)
    }

    @Test func loggedInUsersAreLogindsActiveAndOnlinePeople() throws {
        let folder = try TemporaryFolder("users")
        let users = folder.sub("users")
        try FileManager.default.createDirectory(atPath: users, withIntermediateDirectories: true)
        let files = [
            "1001": "UID=1001\nNAME=alice\nSTATE=active\n", "1002": "NAME=bob\nSTATE=online\n", "1003": "NAME=carol\nSTATE=lingering\n",
            "120": "NAME=Debian-gdm\nSTATE=active\n", "65534": "NAME=nobody\nSTATE=active\n", "notes": "NAME=x\nSTATE=active\n",
        ]
        for (name, text) in files { try text.write(toFile: users + "/" + name, atomically: true, encoding: .utf8) }
        #expect(LoggedInUsers.names(folder: users) == ["alice", "bob"])
        #expect(LoggedInUsers.names(folder: folder.sub("none")) == [])
    }
}
