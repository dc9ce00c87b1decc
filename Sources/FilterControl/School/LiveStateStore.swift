import Foundation
import HallpassSystem
import Synchronization
public import VerdictCore

/// The live state this machine holds: the signed envelope it last accepted
/// and its sequence, kept in `live-state.json` in the rule folder (mode
/// 0600: items name people; written atomically), so a restart keeps the
/// items in force and still refuses an older state. The items are not
/// trusted from the file: they are read again from the signed envelope and
/// checked against the policy in force at every start and every reload
/// (`reevaluate`), so a new bundle's narrower `live:` bounds apply at once.
public final class LiveStateStore: Sendable {
    public static let fileName = "live-state.json"

    /// What the file holds.
    struct File: Codable, Sendable, Hashable {
        var sequence: Int64
        /// When the server issued the state held (0: none).
        var issued: Int64 = 0
        var envelope: LiveState.Envelope?

        init(sequence: Int64, issued: Int64 = 0, envelope: LiveState.Envelope?) {
            self.sequence = sequence
            self.issued = issued
            self.envelope = envelope
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            sequence = try container.decode(Int64.self, forKey: .sequence)
            issued = try container.decodeIfPresent(Int64.self, forKey: .issued) ?? 0
            envelope = try container.decodeIfPresent(LiveState.Envelope.self, forKey: .envelope)
        }
    }

    /// What is in force, as the last check found it.
    public struct Held: Sendable, Hashable {
        /// The sequence of the state held (0: none yet).
        public var sequence: Int64 = 0
        /// When the server issued it (0: none yet).
        public var issued: Int64 = 0
        public var order: LiveState.Order { LiveState.Order(issued: issued, sequence: sequence) }
        /// The machine's room as the server knows it.
        public var room: String = ""
        public var items: [LiveItem] = []
        /// The items of the state held that the bounds refused.
        public var refused: [LiveBounds.Refusal] = []
        public var requests: [LiveState.RequestDecision] = []
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    public let path: String
    private let state: Mutex<(file: File, held: Held)>

    /// Loads `path`; a missing file holds nothing; one that cannot be read is moved aside.
    public init(path: String, log: (String) -> Void = { _ in }) {
        self.path = path
        var file = File(sequence: 0, envelope: nil)
        if let data = try? BoundedFile.read(path, limit: UInt64(LiveState.maximumEnvelopeBytes * 2 + 4096)) {
            if let read = try? JSONDecoder().decode(File.self, from: Data(data)) {
                file = read
            } else {
                let aside = path + ".unreadable-\(Int(Date().timeIntervalSince1970))"
                try? FileSystem.rename(path, to: aside)
                log("live state: \(path) cannot be read; moved to \(aside), starting with no live items")
            }
        }
        var held = Held()
        held.sequence = file.sequence
        held.issued = file.issued
        state = Mutex((file, held))
    }

    public var held: Held { state.withLock { $0.held } }
    public var sequence: Int64 { state.withLock { $0.held.sequence } }
    /// Where the state held stands (`LiveState.Order`): a state must come after it.
    public var order: LiveState.Order { state.withLock { $0.held.order } }

    /// The accepted items in force at `now`.
    public func items(inForceAt now: Int64) -> [LiveItem] {
        state.withLock { $0.held.items.filter { $0.isInForce(now: now) } }
    }

    /// Keeps `envelope` (whose state verified as `verified`) with the items the bounds accepted; written first, then in force.
    public func accept(_ envelope: LiveState.Envelope, verified: LiveState, outcome: LiveBounds.Outcome) throws(Failure) {
        let file = File(sequence: verified.sequence, issued: verified.issued, envelope: envelope)
        try state.withLock { state throws(Failure) in
            // Under the lock: writes land in the order of the states.
            guard verified.order > state.held.order else {
                throw Failure(message: "live state (\(verified.order)) is not after the one held (\(state.held.order))")
            }
            try Self.save(file, to: path)
            state.file = file
            state.held = Held(
                sequence: verified.sequence, issued: verified.issued, room: verified.room, items: outcome.accepted, refused: outcome.refused,
                requests: verified.requests)
        }
    }

    /// Reads the envelope held again and checks it and its items against
    /// `policy` at `now` (start, reload); the sequence stays whatever the
    /// outcome, so an older state is refused still. Returns the refusal of the
    /// whole state, if it no longer verifies (its items are then out of force).
    @discardableResult
    public func reevaluate(policy: SchoolPolicy, bounds: LiveBounds, machine: String, now: Int64) -> LiveState.Refusal? {
        state.withLock { state in
            let (held, refusal) = Self.evaluate(state.file, policy: policy, bounds: bounds, machine: machine, now: now)
            state.held = held
            return refusal
        }
    }

    /// What `reevaluate` would hold under `policy`, without holding it: a
    /// reload builds its policy set from these before the new policy is in force.
    public func evaluate(policy: SchoolPolicy, bounds: LiveBounds, machine: String, now: Int64) -> (held: Held, refusal: LiveState.Refusal?) {
        let file = state.withLock { $0.file }
        return Self.evaluate(file, policy: policy, bounds: bounds, machine: machine, now: now)
    }

    private static func evaluate(
        _ file: File, policy: SchoolPolicy, bounds: LiveBounds, machine: String, now: Int64
    ) -> (held: Held, refusal: LiveState.Refusal?) {
        guard let envelope = file.envelope else { return (Held(sequence: file.sequence, issued: file.issued), nil) }
        switch LiveState.verify(envelope, policy: policy.live, machine: machine, held: nil, now: now) {
        case .success(let verified):
            let outcome = bounds.check(verified, now: now)
            // An item that ended since it arrived is simply over, not refused.
            let held = Held(
                sequence: file.sequence, issued: file.issued, room: verified.room, items: outcome.accepted,
                refused: outcome.refused.filter { $0.code != "live.ended" }, requests: verified.requests)
            return (held, nil)
        case .failure(let refusal):
            return (Held(sequence: file.sequence, issued: file.issued), refusal)
        }
    }

    private static func save(_ file: File, to path: String) throws(Failure) {
        let data: Data
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            data = try encoder.encode(file)
        } catch {
            throw Failure(message: "cannot encode the live state: \(error)")
        }
        do {
            try AtomicFile.write(Array(data), to: path, mode: 0o600)
        } catch {
            throw Failure(message: "cannot write \(path): \(error)")
        }
    }
}
