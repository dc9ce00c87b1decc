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
                "DrainingService", "DataSupervisorService", "ReadinessService", "PolicyClockService", "SafeSearchService",
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
}
