public import Foundation
import Crypto
public import VerdictCore

/// A live state from the school's server (`POST /api/v1/machine/live`,
/// docs/fleet.md "The live channel"): the whole set of live items for this
/// machine, signed by the server's live key. Pure: no clock (`now` is
/// given), no files, no logging; every outcome is a value with its reasons.
///
/// The bytes come from the network, so everything is bounded before it is
/// read: the envelope (1 MiB), the number of items (2,000) and requests
/// (2,000), the targets of an item (200) and the length of every string.
/// The payload is read only after its signature checks against a key the
/// school's policy names (`live.keys`).
///
/// Verification has two steps, as the contract has two kinds of refusal:
/// `verify` refuses the whole state (signature, machine, sequence, issued
/// time); `LiveBounds.check` then refuses single items (action, duration,
/// room, group, locked targets) and keeps the others.
public struct LiveState: Sendable, Hashable {
    /// The machine it is for.
    public var machine: String
    /// The machine's room as the server knows it.
    public var room: String
    /// Strictly increasing across the server's states.
    public var sequence: Int64
    /// When the server made it (Unix seconds).
    public var issued: Int64
    /// The items, each still to be checked against the bounds (`LiveBounds`).
    public var items: [Item]
    /// Decisions on access requests made on this machine.
    public var requests: [RequestDecision]

    /// An item as sent: its action and scope kind are text until the bounds
    /// check reads them, so that one item the machine does not understand
    /// is refused alone.
    public struct Item: Sendable, Hashable, Decodable {
        public var id: String
        public var sequence: Int64
        public var action: String
        public var targets: [String]
        public var scope: Scope
        public var from: Int64
        public var until: Int64
        public var by: String
        public var reason: String?
        public var request: String?

        public struct Scope: Sendable, Hashable, Decodable {
            public var kind: String
            public var value: String

            public init(kind: String, value: String) {
                self.kind = kind
                self.value = value
            }

            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                kind = try container.decode(String.self, forKey: .kind)
                value = try container.decodeIfPresent(String.self, forKey: .value) ?? ""
            }

            enum CodingKeys: String, CodingKey { case kind, value }
        }

        public init(
            id: String, sequence: Int64, action: String, targets: [String], scope: Scope, from: Int64, until: Int64, by: String,
            reason: String? = nil, request: String? = nil
        ) {
            self.id = id
            self.sequence = sequence
            self.action = action
            self.targets = targets
            self.scope = scope
            self.from = from
            self.until = until
            self.by = by
            self.reason = reason
            self.request = request
        }
    }

    /// The server's decision on an access request made on this machine.
    public struct RequestDecision: Sendable, Hashable, Decodable {
        public var id: String
        /// `approved` or `denied`.
        public var state: String
        public var message: String?
        public var until: Int64?
    }

    // MARK: Bounds of the wire format

    public static let maximumEnvelopeBytes = 1 << 20
    public static let maximumItems = 2000
    public static let maximumRequests = 2000
    public static let maximumTargets = 200
    /// Ids, machine and room names, scope values.
    public static let maximumNameLength = 128
    /// A target (a rule pattern: a name or a URL prefix).
    public static let maximumTargetLength = 2048
    /// `by`, `reason`, a request's `message`.
    public static let maximumTextLength = 1000
    /// How far in the future of the machine's clock `issued` may be.
    public static let issuedAheadLimit: Int64 = 300

    /// Why a whole state was refused.
    public struct Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        /// A stable code: `live.envelope`, `live.signature`, `live.key`, `live.no-policy`, `live.payload`,
        /// `live.machine`, `live.sequence`, `live.issued`, `live.too-large`.
        public var code: String
        public var message: String
        /// The state's sequence, when it could be read.
        public var sequence: Int64?
        public var description: String { message }
    }

    /// The signed envelope: `{"payload": BASE64, "signature": BASE64, "key": "ed25519:BASE64"}`.
    public struct Envelope: Sendable, Hashable, Codable {
        public var payload: String
        public var signature: String
        public var key: String

        public init(payload: String, signature: String, key: String) {
            self.payload = payload
            self.signature = signature
            self.key = key
        }
    }

    /// Where a state stands among the states a machine gets: by the time the
    /// server issued it, then by its sequence. A replay of an older state is
    /// older by both; a state from the real server after a taken-over one
    /// sent a huge sequence (or after its database was restored from a
    /// backup) is newer by its time, so the machine follows the server again.
    /// `issued` is bounded by the machine's clock (5 minutes ahead at most),
    /// so no state can hold the channel for longer than that.
    public struct Order: Sendable, Hashable, Comparable, CustomStringConvertible {
        public var issued: Int64
        public var sequence: Int64

        public init(issued: Int64, sequence: Int64) {
            self.issued = issued
            self.sequence = sequence
        }

        public static func < (lhs: Order, rhs: Order) -> Bool {
            (lhs.issued, lhs.sequence) < (rhs.issued, rhs.sequence)
        }

        public var description: String { "sequence \(sequence) issued at \(issued)" }
    }

    public var order: Order { Order(issued: issued, sequence: sequence) }

    /// Reads the envelope, checks its signature against `policy.keys`, reads
    /// the payload, and checks it is for `machine`, after `held` (`Order`)
    /// and not issued more than 5 minutes after `now`. Items are not checked
    /// here (`LiveBounds`). `held` nil skips the order check (a state read
    /// back from the machine's own file).
    public static func verify(
        _ bytes: [UInt8], policy: LivePolicy?, machine: String, held: Order?, now: Int64
    ) -> Result<LiveState, Refusal> {
        guard bytes.count <= maximumEnvelopeBytes else {
            return .failure(Refusal(code: "live.too-large", message: "the live state is \(bytes.count) bytes, more than \(maximumEnvelopeBytes)"))
        }
        let envelope: Envelope
        do {
            envelope = try JSONDecoder().decode(Envelope.self, from: Data(bytes))
        } catch {
            return .failure(Refusal(code: "live.envelope", message: "the live state is not a signed envelope (payload, signature, key)"))
        }
        return verify(envelope, policy: policy, machine: machine, held: held, now: now)
    }

    public static func verify(
        _ envelope: Envelope, policy: LivePolicy?, machine: String, held: Order?, now: Int64
    ) -> Result<LiveState, Refusal> {
        guard let policy else {
            return .failure(
                Refusal(code: "live.no-policy", message: "the school's policy has no live: key, so this machine accepts no live item"))
        }
        guard envelope.key.hasPrefix("ed25519:"), envelope.key.utf8.count <= 100,
            let keyBytes = Data(base64Encoded: String(envelope.key.dropFirst("ed25519:".count))), keyBytes.count == 32
        else {
            return .failure(Refusal(code: "live.key", message: "the live state names no Ed25519 key (ed25519:BASE64)"))
        }
        guard policy.keys.contains(Array(keyBytes)), let key = try? Curve25519.Signing.PublicKey(rawRepresentation: keyBytes) else {
            return .failure(
                Refusal(
                    code: "live.key",
                    message: "the live state is signed with \(envelope.key.prefix(60)), which the school's policy does not name in live.keys"))
        }
        guard let payload = Data(base64Encoded: envelope.payload), let signature = Data(base64Encoded: envelope.signature) else {
            return .failure(Refusal(code: "live.envelope", message: "the live state's payload or signature is not base64"))
        }
        guard key.isValidSignature(signature, for: payload) else {
            return .failure(Refusal(code: "live.signature", message: "the live state's signature does not match its payload and key"))
        }
        let state: LiveState
        switch decodePayload(payload) {
        case .success(let decoded): state = decoded
        case .failure(let refusal): return .failure(refusal)
        }
        guard state.machine == machine else {
            return .failure(
                Refusal(
                    code: "live.machine", message: "the live state is for machine \(state.machine.prefix(40)), not this one (\(machine))",
                    sequence: state.sequence))
        }
        if let held, state.order <= held {
            return .failure(
                Refusal(
                    code: "live.sequence",
                    message: "the live state (\(state.order)) is not after the one held (\(held)): a replay or an older state",
                    sequence: state.sequence))
        }
        guard state.issued <= now + issuedAheadLimit else {
            return .failure(
                Refusal(
                    code: "live.issued",
                    message: "the live state was issued at \(state.issued), more than \(issuedAheadLimit) s after this machine's clock (\(now))",
                    sequence: state.sequence))
        }
        return .success(state)
    }

    private struct Payload: Decodable {
        var format: Int
        var machine: String
        var room: String?
        var sequence: Int64
        var issued: Int64
        var items: [Item]?
        var requests: [RequestDecision]?
    }

    /// The payload, every string and list within its bound.
    static func decodePayload(_ data: Data) -> Result<LiveState, Refusal> {
        let payload: Payload
        do {
            payload = try JSONDecoder().decode(Payload.self, from: data)
        } catch {
            return .failure(Refusal(code: "live.payload", message: "the live state's payload does not read: \(describe(error))"))
        }
        func refuse(_ message: String) -> Result<LiveState, Refusal> {
            .failure(Refusal(code: "live.payload", message: "the live state's payload: " + message, sequence: payload.sequence))
        }
        guard payload.format == 1 else { return refuse("format \(payload.format), this machine reads format 1") }
        // A negative sequence held would be sent back as `after`, which the server once refused
        // for ever (400); a negative time is no time a server issues a state at.
        guard payload.sequence >= 0, payload.issued >= 0 else {
            return refuse("sequence \(payload.sequence) and issued \(payload.issued) must not be negative")
        }
        let items = payload.items ?? []
        let requests = payload.requests ?? []
        guard items.count <= maximumItems else { return refuse("\(items.count) items, more than \(maximumItems)") }
        guard requests.count <= maximumRequests else { return refuse("\(requests.count) requests, more than \(maximumRequests)") }
        guard payload.machine.utf8.count <= maximumNameLength, (payload.room ?? "").utf8.count <= maximumNameLength else {
            return refuse("the machine or room is longer than \(maximumNameLength) bytes")
        }
        for (index, item) in items.enumerated() {
            guard item.id.utf8.count <= maximumNameLength, item.action.utf8.count <= maximumNameLength,
                item.scope.kind.utf8.count <= maximumNameLength, item.scope.value.utf8.count <= maximumNameLength,
                item.by.utf8.count <= maximumTextLength, (item.reason ?? "").utf8.count <= maximumTextLength,
                (item.request ?? "").utf8.count <= maximumNameLength
            else { return refuse("items[\(index)] has a string longer than its bound") }
            guard item.targets.count <= maximumTargets else {
                return refuse("items[\(index)] has \(item.targets.count) targets, more than \(maximumTargets)")
            }
            guard item.targets.allSatisfy({ $0.utf8.count <= maximumTargetLength }) else {
                return refuse("items[\(index)] has a target longer than \(maximumTargetLength) bytes")
            }
        }
        for (index, request) in requests.enumerated() {
            guard request.id.utf8.count <= maximumNameLength, request.state.utf8.count <= maximumNameLength,
                (request.message ?? "").utf8.count <= maximumTextLength
            else { return refuse("requests[\(index)] has a string longer than its bound") }
        }
        return .success(
            LiveState(
                machine: payload.machine, room: payload.room ?? "", sequence: payload.sequence, issued: payload.issued, items: items,
                requests: requests))
    }

    /// A decoding error in a few words, with where it happened (never the bytes themselves).
    private static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "not JSON" }
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? "." + $0.stringValue }.joined().prefix(120).description
        }
        switch error {
        case .typeMismatch(_, let context), .valueNotFound(_, let context): return "a value of the wrong type at \(path(context))"
        case .keyNotFound(let key, let context): return "no \(key.stringValue) at \(path(context).isEmpty ? "the top" : path(context))"
        case .dataCorrupted: return "not JSON"
        @unknown default: return "not JSON"
        }
    }
}

/// The per-item checks of a live state against the school's `live:` bounds
/// and `locked:` categories. An item that fails is refused alone, with its
/// reason; the others are accepted.
public struct LiveBounds: Sendable {
    public var policy: SchoolPolicy
    /// The locked category a rule of the store in force puts a target in; nil: none.
    public var lockedCategory: @Sendable (RulePattern) -> String?

    public init(policy: SchoolPolicy, lockedCategory: @escaping @Sendable (RulePattern) -> String?) {
        self.policy = policy
        self.lockedCategory = lockedCategory
    }

    /// An item refused, and why.
    public struct Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        public var item: String
        /// `live.action`, `live.duration`, `live.ended`, `live.room`, `live.group`, `live.scope`, `live.target`, `live.locked`.
        public var code: String
        public var message: String
        /// The target an allow or focus refused for a locked category, and the category.
        public var target: String?
        public var category: String?
        public var description: String { "item \(item): \(message)" }
    }

    public struct Outcome: Sendable, Hashable {
        public var accepted: [LiveItem]
        public var refused: [Refusal]
    }

    /// Checks every item of `state` at `now`.
    public func check(_ state: LiveState, now: Int64) -> Outcome {
        var outcome = Outcome(accepted: [], refused: [])
        for item in state.items {
            switch checkItem(item, room: state.room, now: now) {
            case .success(let accepted): outcome.accepted.append(accepted)
            case .failure(let refusal): outcome.refused.append(refusal)
            }
        }
        return outcome
    }

    func checkItem(_ item: LiveState.Item, room: String, now: Int64) -> Result<LiveItem, Refusal> {
        func refuse(_ code: String, _ message: String, target: String? = nil, category: String? = nil) -> Result<LiveItem, Refusal> {
            .failure(Refusal(item: item.id, code: code, message: message, target: target, category: category))
        }
        guard let live = policy.live else { return refuse("live.no-policy", "the school's policy has no live: key") }
        guard let action = LiveAction(rawValue: item.action) else {
            return refuse("live.action", "'\(item.action.prefix(40))' is not an action (allow, block, focus, pause, exam)")
        }
        guard live.actions.contains(action) else {
            return refuse("live.action", "the school's live.actions does not allow \(action.rawValue)")
        }
        // Before any arithmetic on them: `until - from` traps for a `from` near Int64.min, and a
        // server that sent one would stop filter-control at every start (the state is kept and sent again).
        guard item.from >= 0, item.until >= 0 else {
            return refuse("live.duration", "its times are before 1970 (from \(item.from) to \(item.until))")
        }
        guard item.until > now else { return refuse("live.ended", "it ended at \(item.until), before now (\(now))") }
        // Both are 0 or more, so neither difference below can overflow.
        guard item.from <= item.until else {
            return refuse("live.duration", "it ends (\(item.until)) before it starts (\(item.from))")
        }
        guard item.until - item.from <= live.longestSeconds else {
            return refuse(
                "live.duration", "it lasts \(item.until - item.from) s (from \(item.from) to \(item.until)), longer than live.longest (\(live.longestSeconds) s)")
        }
        // An item is in force from its arrival (not from `from`), so its end is bounded by this
        // machine's clock too: a `from` far in the future would otherwise let `until` be anything.
        let latest = now.addingReportingOverflow(live.longestSeconds + LiveState.issuedAheadLimit)
        guard latest.overflow || item.until <= latest.partialValue else {
            return refuse(
                "live.duration",
                "it ends at \(item.until), more than live.longest (\(live.longestSeconds) s) and \(LiveState.issuedAheadLimit) s after this machine's clock (\(now))")
        }
        let scope: LiveItem.Scope
        switch item.scope.kind {
        case "room":
            guard item.scope.value == room, !room.isEmpty else {
                return refuse("live.room", "it is for room '\(item.scope.value.prefix(64))', and this machine is in '\(room)'")
            }
            if let rooms = live.rooms, !rooms.contains(room) {
                return refuse("live.room", "room '\(room)' is not in the school's live.rooms")
            }
            scope = .room(room)
        case "everyone":
            // Everyone, on the machines of the rooms live items may address.
            if let rooms = live.rooms, !rooms.contains(room) {
                return refuse("live.room", "an item for everyone reaches the rooms in the school's live.rooms, and this machine is in '\(room)'")
            }
            scope = .everyone
        case "group":
            guard policy.groups.contains(where: { $0.name == item.scope.value }) else {
                return refuse("live.group", "'\(item.scope.value.prefix(64))' is not a group of the school's policy")
            }
            if let groups = live.groups, !groups.contains(item.scope.value) {
                return refuse("live.group", "group '\(item.scope.value)' is not in the school's live.groups")
            }
            scope = .group(item.scope.value)
        case "user":
            guard !item.scope.value.isEmpty else { return refuse("live.scope", "a user item names no user") }
            scope = .user(item.scope.value)
        default:
            return refuse("live.scope", "'\(item.scope.kind.prefix(40))' is not a scope (room, everyone, group, user)")
        }
        var patterns: [RulePattern] = []
        for target in item.targets {
            guard let pattern = try? RulePattern(target) else {
                return refuse("live.target", "'\(target.prefix(80))' is not a name, URL prefix or address")
            }
            patterns.append(pattern)
        }
        switch action {
        case .allow, .block, .focus:
            guard !patterns.isEmpty else { return refuse("live.target", "a \(action.rawValue) item needs at least one target") }
        case .pause, .exam:
            guard patterns.isEmpty else { return refuse("live.target", "a \(action.rawValue) item has no targets") }
        }
        if action == .allow || action == .focus {
            for pattern in patterns {
                if let why = LiveTargets.refusal(pattern) {
                    return refuse("live.target", why, target: pattern.description)
                }
                if let category = lockedCategory(pattern) {
                    return refuse(
                        "live.locked", "\(pattern) is in the locked category \(category): nothing may open it", target: pattern.description,
                        category: category)
                }
            }
        }
        return .success(
            LiveItem(
                id: item.id, sequence: item.sequence, action: action, patterns: patterns, scope: scope, from: item.from,
                until: item.until, by: item.by, reason: item.reason, request: item.request))
    }
}
