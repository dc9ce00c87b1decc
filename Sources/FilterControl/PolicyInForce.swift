import HallpassSystem
public import SharedStore
public import VerdictCore
import Foundation

/// The policy a lab machine applies, from the two places a policy can come
/// from (docs/school-policy.md, "Which policy is in force"):
///
/// - the bundle in force carries the school's policy (`policy.yaml`): it is
///   the policy. hallpass.yaml's `policy:` can only add restrictions: its
///   `deny` entries and its `block` categories are added for everyone; its
///   other keys (allow, unknown, noName, askDefault, askTimeout) are
///   ignored, and `filterctl config check` and `status` say so. A machine
///   never loosens the school's policy on its own: only the school's
///   `overrides:` lets teachers do that, with `filterctl allow`.
/// - the bundle carries none: hallpass.yaml's `policy:` is the policy, for
///   everyone (no groups, schedules or exams), as before.
///
/// Either way the machine's own settings (DNS answers pointed at its block
/// page, `policy.blockedDNS`) come from hallpass.yaml.
public struct PolicyInForce: Sendable, Hashable {
    public var school: SchoolPolicy
    /// True when the school's policy came in the bundle.
    public var fromBundle: Bool
    /// What every effective policy starts from (the machine's settings).
    public var base: Policy
    public var localDeny: [RulePattern]
    public var localBlock: Policy.CategorySelection?
    /// hallpass.yaml's `policy:` keys that have no effect because the bundle brings the school's policy.
    public var ignoredLocalKeys: [String]

    public init(bundlePolicy: SchoolPolicy?, configuration: Configuration) {
        var base = Policy()
        base.dnsRewrite = configuration.policy.dnsRewrite
        if let bundlePolicy {
            school = bundlePolicy
            fromBundle = true
            self.base = base
            localDeny = configuration.policyKeys.deny ?? []
            localBlock = configuration.policyKeys.block
            let keys = configuration.policyKeys
            ignoredLocalKeys = [
                keys.allow != nil ? "policy.allow" : nil, keys.unknown != nil ? "policy.unknown" : nil,
                keys.noName != nil ? "policy.noName" : nil, keys.askDefault != nil ? "policy.askDefault" : nil,
                keys.askTimeoutMilliseconds != nil ? "policy.askTimeout" : nil,
                keys.bypass.safeSearch != nil ? "policy.safeSearch" : nil,
                keys.bypass.withoutSafeSearch != BypassKeys() ? "policy.bypass" : nil,
            ].compactMap { $0 }
        } else {
            // hallpass.yaml's policy for everyone: its keys are the top level and there is nothing else.
            // No safeguarding rules either: they are the school's (with a school's policy, its own or the
            // shipped ones), and a machine on its own records allowed flows only as `log.allowed` says.
            school = SchoolPolicy(topLevel: PolicyLevel(keys: configuration.policyKeys), safeguarding: .none)
            fromBundle = false
            self.base = base
            localDeny = []
            localBlock = nil
            ignoredLocalKeys = []
        }
    }

    /// The policy `audience` gets at `moment`; with `person`, that user's own live items too.
    public func effectivePolicy(for audience: Audience, at moment: PolicyMoment, person: String? = nil, schedules: Bool = true) -> EffectivePolicy {
        school.effectivePolicy(for: audience, at: moment, base: base, localDeny: localDeny, localBlock: localBlock, person: person, schedules: schedules)
    }

    /// The school's policy in a bundle folder (`policy.yaml`), nil when it has none.
    public static func bundlePolicy(inFolder folder: String) throws(ConfigurationError) -> SchoolPolicy? {
        let path = folder + "/" + BundleManifest.policyFileName
        let data: [UInt8]
        do {
            // Read with its bound (Foundation reads a file whole first, and leaks on an empty one).
            data = try BoundedFile.read(path, limit: UInt64(SchoolPolicy.maximumFileBytes), followingLinks: true)
        } catch .missing {
            return nil
        } catch .tooLarge {
            throw ConfigurationError(key: "", message: "\(path) is larger than \(SchoolPolicy.maximumFileBytes / 1024) KiB")
        } catch {
            throw ConfigurationError(key: "", message: "\(path) cannot be read: \(error)")
        }
        do {
            return try SchoolPolicy(yaml: String(decoding: data, as: UTF8.self))
        } catch {
            throw ConfigurationError(key: error.key, line: error.line, message: "\(BundleManifest.policyFileName): \(error.message)")
        }
    }
}
