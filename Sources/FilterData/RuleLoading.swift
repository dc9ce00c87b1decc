// Where filter-data's engines come from: a rule store checked in full and the
// policy set filter-control wrote, at start and at every `rules` or `policy`
// message. Loading is all or nothing: DataPath swaps engines only once the
// new ones are whole, and a refusal carries a stable code for filter-control.
import HallpassSystem
public import SharedStore
public import VerdictCore

/// Why new rules were not taken: a stable code (`store.*` from the store,
/// `policy.unreadable`, `policy.invalid`) and a message naming the file.
public struct RuleLoadFailure: Error, CustomStringConvertible, Sendable {
    public var code: String
    public var description: String

    public init(code: String, description: String) {
        self.code = code
        self.description = description
    }
}

extension PolicyEngines where Rules == RuleStore {
    /// Opens a store (checked in full) and a policy set (or a plain policy
    /// file: one policy for everyone; none: the default policy) into the
    /// engines of every audience.
    public static func load(
        store storePath: String, policy policyPath: String?, answers: LookupAnswers = LookupAnswers()
    ) throws(RuleLoadFailure) -> PolicyEngines<RuleStore> {
        let store: RuleStore
        do {
            store = try RuleStore(path: storePath, verification: .full)
        } catch {
            throw RuleLoadFailure(code: error.code, description: "\(storePath): \(error)")
        }
        let set = try policyPath.map { path throws(RuleLoadFailure) in try PolicySet.load(path) } ?? PolicySet(single: Policy())
        return PolicyEngines(rules: store, set: set, answers: answers)
    }

    /// The engines a `rules` message (a new store and policy) or a `policy`
    /// message (no `store`: the policy set read again, the store in force
    /// kept mapped) asks for. The answers filter-control gave carry over.
    public func replacing(store storePath: String?, policy policyPath: String) throws(RuleLoadFailure) -> PolicyEngines<RuleStore> {
        if let storePath {
            return try PolicyEngines.load(store: storePath, policy: policyPath, answers: answers)
        }
        return PolicyEngines(rules: rules, set: try PolicySet.load(policyPath), answers: answers)
    }
}

extension PolicySet {
    /// Reads a policy set written by filter-control.
    public static func load(_ path: String) throws(RuleLoadFailure) -> PolicySet {
        let bytes: [UInt8]
        do {
            bytes = try BoundedFile.read(path, limit: 16 << 20)
        } catch {
            throw RuleLoadFailure(code: "policy.unreadable", description: "\(path): \(error)")
        }
        do {
            return try PolicySet.parse(String(decoding: bytes, as: UTF8.self))
        } catch {
            throw RuleLoadFailure(code: "policy.invalid", description: "\(path): \(error)")
        }
    }
}
