import Foundation
import HallpassSystem
import SharedStore
import Synchronization
public import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

/// What teachers and admins changed on this machine: overrides (`filterctl
/// allow` / `block`, approved access requests) and an exam started by hand.
/// Kept in one JSON file in the rule folder (mode 0600: it names people),
/// written atomically after every change, so both survive a restart and end
/// on their own at their time.
public struct PolicyState: Codable, Sendable, Hashable {
    public var overrides: [PolicyOverride] = []
    public var exam: ManualExam?

    public init(overrides: [PolicyOverride] = [], exam: ManualExam? = nil) {
        self.overrides = overrides
        self.exam = exam
    }
}

public final class PolicyStateStore: Sendable {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var code: String
        public var message: String
        public var description: String { message }
    }

    /// Overrides in force at once, at most (a script gone wrong cannot fill the disk).
    public static let maximumOverrides = 1000
    public static let fileName = "policy-state.json"

    public let path: String
    private let state: Mutex<PolicyState>

    /// Loads `path`; a missing file is an empty state; one that cannot be read is moved aside.
    public init(path: String, log: (String) -> Void = { _ in }) {
        self.path = path
        state = Mutex(PolicyStateStore.load(path: path, log: log))
    }

    private static func load(path: String, log: (String) -> Void) -> PolicyState {
        guard let data = FileManager.default.contents(atPath: path) else { return PolicyState() }
        do {
            return try JSONDecoder().decode(PolicyState.self, from: data)
        } catch {
            let aside = path + ".unreadable-\(Int(Date().timeIntervalSince1970))"
            try? FileSystem.rename(path, to: aside)
            log("policy state: \(path) cannot be read (\(error)); moved to \(aside), starting with no overrides and no exam")
            return PolicyState()
        }
    }

    /// The overrides and exam in force at `now` (ended ones are dropped from the file too).
    public func current(now: Int64) -> PolicyState {
        state.withLock { state in
            let live = PolicyState(overrides: state.overrides.filter { $0.isInForce(now: now) }, exam: state.exam.flatMap { $0.isInForce(now: now) ? $0 : nil })
            if live != state {
                state = live
                try? save(live)
            }
            return live
        }
    }

    /// Adds an override of `target` (a rule pattern) for `group` (nil: everyone) until `until`.
    public func addOverride(
        _ action: PolicyOverride.Action, target: String, group: String?, until: Int64?, by: String?, now: Int64
    ) throws(Failure) -> PolicyOverride {
        let pattern: RulePattern
        do {
            pattern = try RulePattern(target)
        } catch {
            throw Failure(code: "overrides.target", message: "'\(target)' is not a name, URL prefix or address: \(error)")
        }
        if let until, until <= now { throw Failure(code: "overrides.ended", message: "the override would end before it starts") }
        return try state.withLock { state throws(Failure) in
            state.overrides.removeAll { !$0.isInForce(now: now) }
            guard state.overrides.count < Self.maximumOverrides else {
                throw Failure(code: "overrides.full", message: "\(Self.maximumOverrides) overrides are in force already; remove some first")
            }
            let override = PolicyOverride(
                id: Self.newID(taken: Set(state.overrides.map(\.id))), action: action, target: pattern.description, group: group, until: until,
                createdAt: now, by: by)
            state.overrides.append(override)
            try save(state)
            return override
        }
    }

    /// Removes an override; false when there is none with this id.
    public func removeOverride(id: String) throws(Failure) -> Bool {
        try state.withLock { state throws(Failure) in
            guard let index = state.overrides.firstIndex(where: { $0.id == id }) else { return false }
            state.overrides.remove(at: index)
            try save(state)
            return true
        }
    }

    public func startExam(_ exam: ManualExam) throws(Failure) {
        try state.withLock { state throws(Failure) in
            state.exam = exam
            try save(state)
        }
    }

    /// Ends a hand-started exam; false when none was running.
    public func stopExam() throws(Failure) -> Bool {
        try state.withLock { state throws(Failure) in
            guard state.exam != nil else { return false }
            state.exam = nil
            try save(state)
            return true
        }
    }

    /// Writes `state` to the file; called under the lock, so writes land in the order of the changes.
    private func save(_ state: PolicyState) throws(Failure) {
        let data: Data
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            data = try encoder.encode(state)
        } catch {
            throw Failure(code: "policy-state.io", message: "cannot encode the policy state: \(error)")
        }
        do {
            try AtomicFile.write(Array(data), to: path, mode: 0o600)
        } catch {
            throw Failure(code: "policy-state.io", message: error.description)
        }
    }

    /// Short ids an admin can type: 6 lower-case letters and digits.
    static func newID(taken: Set<String>) -> String {
        let alphabet = Array("abcdefghijkmnpqrstuvwxyz23456789")
        while true {
            let id = String((0..<6).map { _ in alphabet.randomElement()! })
            if !taken.contains(id) { return id }
        }
    }
}
