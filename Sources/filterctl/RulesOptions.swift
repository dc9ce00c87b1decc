import ArgumentParser
import FilterControl
import Foundation
import SharedStore
import VerdictCore

/// The options of the offline commands that judge against rules (`check`,
/// `replay`): where the rules come from and which policy applies.
struct RulesOptions: ParsableArguments {
    @Option(name: .long, help: "A compiled rule store.")
    var store: String?

    @Option(name: .long, help: "A bundle folder (its hashes are checked; its signature too with --trusted-key).")
    var bundle: String?

    @Option(name: .customLong("trusted-key"), help: "ed25519:BASE64 key that must have signed --bundle.")
    var trustedKeys: [String] = []

    @Option(name: .long, help: "A hallpass.yaml whose policy to apply.")
    var config: String?

    func validate() throws {
        guard store == nil || bundle == nil else {
            throw ValidationError("give one of --store FILE or --bundle DIR, not both")
        }
    }

    /// Neither --store nor --bundle: `check` asks the running filter-control.
    var isOffline: Bool { store != nil || bundle != nil }

    func requireOffline() throws {
        guard isOffline else { throw ValidationError("give --store FILE or --bundle DIR") }
    }

    /// The engine for these rules and this policy, or an exit with the matching status.
    /// A bundle carrying the school's policy brings it: as a person of
    /// `group` (none: people in no group) gets it at `at` (default now).
    func loadEngine(group: String? = nil, at: String? = nil) throws -> VerdictEngine<RuleStore> {
        var policy = Policy()
        var configuration = Configuration()
        if let config {
            guard let text = try? String(contentsOfFile: config, encoding: .utf8) else {
                throw fail("cannot read the configuration \(config)", status: ExitStatus.noInput)
            }
            do {
                configuration = try Configuration(yaml: text)
                policy = configuration.policy
            } catch {
                throw fail("\(config): \(error)", status: ExitStatus.configError)
            }
        }
        var keys: [BundlePublicKey] = []
        for text in trustedKeys {
            guard let key = try? BundlePublicKey(text) else {
                throw fail("--trusted-key \(text.prefix(60)): expected ed25519:BASE64 (32 bytes)", status: ExitStatus.usage)
            }
            keys.append(key)
        }
        switch Result(catching: { () throws(RuleLoading.Failure) -> RuleStore in
            if let store { return try RuleLoading.openStore(path: store) }
            return try RuleLoading.openBundle(directory: bundle!, trustedKeys: keys).0
        }) {
        case .success(let rules):
            guard let bundle else {
                guard group == nil, at == nil else { throw ValidationError("--group and --at need a --bundle carrying the school's policy") }
                return VerdictEngine(rules: rules, policy: policy)
            }
            let school: SchoolPolicy?
            do {
                school = try PolicyInForce.bundlePolicy(inFolder: bundle)
            } catch {
                throw fail("\(bundle): \(error)", status: ExitStatus.dataError)
            }
            guard let school else {
                guard group == nil, at == nil else { throw ValidationError("--group and --at need a --bundle carrying the school's policy") }
                return VerdictEngine(rules: rules, policy: policy)
            }
            let inForce = PolicyInForce(bundlePolicy: school, configuration: configuration)
            if let group, !school.groups.contains(where: { $0.name == group }) {
                throw fail("the bundle's policy has no group '\(group)' (it has \(school.groups.map(\.name).joined(separator: ", ")))", status: ExitStatus.usage)
            }
            let clock = PolicyClock(zoneName: school.timeZone)
            var date = Date()
            if let at {
                guard let parsed = clock.date(parsing: at) else { throw ValidationError("--at takes a date and time like 2026-11-25T10:15") }
                date = parsed
            }
            let moment = PolicyMoment(time: clock.localTime(at: date), now: Int64(date.timeIntervalSince1970))
            let effective = inForce.effectivePolicy(for: group.map { .group($0) } ?? .ungrouped, at: moment)
            return VerdictEngine(rules: rules, policy: effective.policy)
        case .failure(let error):
            var missing = false
            if case .store(.cannotOpen(_, let code)) = error { missing = code == ENOENT }
            throw fail(error.description, status: missing ? ExitStatus.noInput : ExitStatus.dataError)
        }
    }
}
