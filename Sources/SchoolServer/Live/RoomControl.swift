import BundleBuilder
import Foundation
import Logging
import SharedStore
import Synchronization
import VerdictCore

/// The published policy as the live channel reads it, read again only when
/// the publication changes; and the published store, to look up whether a
/// target is in a locked category (mapped, not read into memory).
final class PublishedLivePolicy: Sendable {
    let storage: any ServerStorage
    /// The published store's file on this server (the publisher's bundle folder).
    let storePath: String
    private let cached = Mutex<(version: Int64, policy: LivePolicy, store: RuleStore?)?>(nil)

    init(storage: any ServerStorage, storePath: String) {
        self.storage = storage
        self.storePath = storePath
    }

    /// The published policy; `.none` before any publication or for one without a policy.
    func current() async throws -> (policy: LivePolicy, store: RuleStore?) {
        guard let publication = try await storage.currentPublication() else { return (.none, nil) }
        if let hit = cached.withLock({ $0 }), hit.version == publication.bundleVersion { return (hit.policy, hit.store) }
        var policy = LivePolicy.none
        if let text = try await storage.policyVersion(publication.policyVersion)?.policy {
            do {
                policy = try LivePolicy(yaml: text)
            } catch {
                throw APIError(
                    .unprocessableContent, "live-refused", "the published policy cannot be read for its live bounds: \(error.description)")
            }
        }
        // The folder's store is the publication's once the publisher has caught up;
        // without it, the locked categories are judged without names (refused: nothing).
        let expected = publication.file(named: BundleManifest.storeFileName)?.sha256
        var store: RuleStore? = nil
        if let expected, BundleVerifier.sha256(ofFileAt: storePath)?.sha256 == expected {
            store = try? RuleStore(path: storePath, verification: .structure)
        }
        // Kept unless the store is still to come (the publisher catching up on this instance).
        if expected == nil || store != nil { cached.withLock { $0 = (publication.bundleVersion, policy, store) } }
        return (policy, store)
    }

    /// The locked category `target` (a RulePattern text) is in, if any.
    static func lockedCategory(of target: RulePattern, locked: Set<String>, store: RuleStore?) -> String? {
        guard !locked.isEmpty, let store else { return nil }
        let text: String
        switch target {
        case .domain(let host, _): text = host.description
        case .network(let network): text = network.description.split(separator: "/").first.map(String.init) ?? network.description
        case .urlPrefix(let host, let path): text = "http://" + host.description + path
        }
        guard let check = try? CheckTarget(text) else { return nil }
        let engine = VerdictEngine(rules: store, policy: Policy(blockedCategories: .only(locked)))
        let decision = engine.decide(check.facts)
        guard decision.verdict == .drop, let category = decision.reason.category, locked.contains(category) else { return nil }
        return category
    }
}

/// What teachers do to a room in a lesson (docs/console.md, "Rooms"): allow
/// a site, block a site, focus on some sites, pause the internet, end. Used
/// by the API and the console alike: each change is checked against the
/// published policy's `live:` bounds (what machines would refuse is refused
/// here, 422), stored, written to the audit trail, and wakes the room's
/// held requests.
public struct RoomControl: Sendable {
    let storage: any ServerStorage
    let live: LiveChannel
    let published: PublishedLivePolicy
    let metrics: ServerMetrics
    let clock: @Sendable () -> Int64

    /// The actions of a room rule (an exam is started from the policy or filterctl).
    public static let actions = ["allow", "block", "focus", "pause"]
    public static let maxTargets = 100
    public static let maxReason = 500

    public struct RuleRequest: Codable, Sendable {
        public var action: String
        public var targets: [String]?
        public var minutes: Int?
        /// RFC 3339.
        public var until: String?
        public var untilLessonEnds: Bool?
        public var reason: String?

        public init(
            action: String, targets: [String]? = nil, minutes: Int? = nil, until: String? = nil, untilLessonEnds: Bool? = nil,
            reason: String? = nil
        ) {
            self.action = action
            self.targets = targets
            self.minutes = minutes
            self.until = until
            self.untilLessonEnds = untilLessonEnds
            self.reason = reason
        }
    }

    static func refused(_ message: String) -> APIError { APIError(.unprocessableContent, "live-refused", message) }

    /// A room's name as an enrolment token's: 1 to 64 characters, no spaces.
    static func isRoomName(_ room: String) -> Bool {
        !room.isEmpty && room.utf8.count <= 64 && room.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value != 0x7f }
    }

    /// Who set it, as the block page shows it: the person's name, or the token's id.
    func name(of principal: Principal) async throws -> String {
        switch principal.kind {
        case .person(let login): return try await storage.person(login: login)?.displayName ?? login
        case .token(let id): return "API token \(id)"
        case .command(let user): return user
        }
    }

    /// The longest a rule may last now, and the bounds, for the console's presets.
    func bounds() async throws -> LivePolicy { try await published.current().policy }

    public func add(room: String, _ request: RuleRequest, by principal: Principal) async throws -> StoredLiveItem {
        guard Self.isRoomName(room) else { throw APIError.badRequest("a room is 1 to 64 characters without spaces") }
        guard Self.actions.contains(request.action) else {
            throw APIError.badRequest("action must be one of \(Self.actions.joined(separator: ", "))")
        }
        let texts = (request.targets ?? []).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard texts.count <= Self.maxTargets else { throw APIError.badRequest("at most \(Self.maxTargets) targets") }
        switch request.action {
        case "pause": guard texts.isEmpty else { throw APIError.badRequest("pause takes no targets: nothing is reachable") }
        default: guard !texts.isEmpty else { throw APIError.badRequest("\(request.action) needs at least one site in targets") }
        }
        var patterns: [RulePattern] = []
        for text in texts {
            do {
                patterns.append(try RulePattern(text))
            } catch {
                throw APIError.badRequest("'\(text.prefix(80))' is not a site: \(error)")
            }
        }
        let reason = (request.reason ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard reason.count <= Self.maxReason, reason.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
            throw APIError.badRequest("a reason is one line of at most \(Self.maxReason) characters")
        }
        let given = [request.minutes != nil, request.until != nil, request.untilLessonEnds == true].filter { $0 }.count
        guard given == 1 else { throw APIError.badRequest("give one of minutes, until or untilLessonEnds: true") }

        let now = clock()
        let (policy, store) = try await published.current()
        guard let bounds = policy.live else {
            throw Self.refused(
                "the published policy has no live: section, so machines accept no room rule; add live: with this server's key (hallpass-server live-key) and publish")
        }
        var until: Int64
        if let minutes = request.minutes {
            guard minutes >= 1 else { throw APIError.badRequest("minutes must be 1 or more") }
            until = now + Int64(min(minutes, 24 * 60)) * 60
        } else if let text = request.until {
            guard let milliseconds = RecordTime.milliseconds(text) else {
                throw APIError.badRequest("until is not an RFC 3339 time: '\(text.prefix(40))'")
            }
            until = milliseconds / 1000
        } else {
            guard let end = policy.lessonEnd(now: now) else {
                throw Self.refused(
                    "no schedule of the published policy is in force now, so the end of the lesson is not known; give minutes or until")
            }
            until = end
        }
        guard until > now else { throw Self.refused("the rule would end before it starts") }
        guard bounds.actions.contains(request.action) else {
            throw Self.refused(
                "the policy's live.actions do not let a room rule \(request.action) (allowed: \(bounds.actions.sorted().joined(separator: ", ")))")
        }
        guard until - now <= bounds.longestSeconds else {
            throw Self.refused(
                "a room rule may last at most \(bounds.longestSeconds / 60) minutes (the policy's live.longest); this one would last \((until - now + 59) / 60)")
        }
        if let rooms = bounds.rooms, !rooms.contains(room) {
            throw Self.refused("the policy's live.rooms do not name \(room) (named: \(rooms.sorted().joined(separator: ", ")))")
        }
        if request.action == "allow" || request.action == "focus" {
            // The locked look-up below sees one address of a network; machines refuse wider ones.
            let wide = patterns.compactMap(LiveTargets.refusal)
            if !wide.isEmpty { throw Self.refused(wide.joined(separator: "; ")) }
            var refused: [String] = []
            for (text, pattern) in zip(texts, patterns) {
                if let category = PublishedLivePolicy.lockedCategory(of: pattern, locked: policy.locked, store: store) {
                    refused.append("\(text) (\(category))")
                }
            }
            if !refused.isEmpty {
                let left = texts.filter { text in !refused.contains { $0.hasPrefix(text + " ") } }
                throw Self.refused(
                    "in a locked category, which nothing may open: \(refused.joined(separator: ", "))"
                        + (left.isEmpty ? "" : "; the others could be: \(left.joined(separator: ", "))"))
            }
        }
        let item = try await storage.addLiveItem(
            NewLiveItem(
                scope: .room(room), action: request.action, targets: patterns.map(\.description), from: now, until: until,
                byAuthor: principal.author, byName: try await name(of: principal), reason: reason),
            now: now)
        await live.hub.announce(room: room)
        metrics.liveItems.increment()
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: principal.author, action: "room.rule.add", target: "room \(room)", reason: reason.isEmpty ? nil : reason,
                detail: "\(item.id) \(request.action) \(item.item.targets.joined(separator: " ")) until \(RecordTime.format(milliseconds: until * 1000))"
                    .trimmingCharacters(in: .whitespaces)))
        return item
    }

    /// Ends one rule of the room (`id`) or all; returns those ended.
    public func end(room: String, id: String?, by principal: Principal, reason: String? = nil) async throws -> [StoredLiveItem] {
        guard Self.isRoomName(room) else { throw APIError.badRequest("a room is 1 to 64 characters without spaces") }
        let now = clock()
        let ended = try await storage.endLiveItems(scope: .room(room), id: id, by: principal.author, now: now)
        guard !ended.isEmpty else { return [] }
        await live.hub.announce(room: room)
        try await storage.audit(
            NewAuditEvent(
                time: now, actor: principal.author, action: "room.rule.end", target: "room \(room)", reason: reason,
                detail: ended.map(\.id).joined(separator: " ")))
        return ended
    }
}
