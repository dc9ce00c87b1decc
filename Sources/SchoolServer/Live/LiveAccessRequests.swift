import Foundation
import VerdictCore

/// Access requests on the live channel (docs/server.md, "Access requests"):
/// an approval is a live item that allows the host for the scope the
/// teacher chose, checked against the published policy's `live:` bounds and
/// `locked:` as a room rule is (`RoomControl`); each decision raises the
/// live sequence of the machine the request came from, so that its held
/// request answers at once with the decision in the state's `requests`.
struct LiveAccessRequests: AccessRequestLive {
    let control: RoomControl

    /// How long a decision stays in its machine's live state: a machine
    /// that was off for a week still learns how its requests ended.
    static let decisionsKept: Int64 = 7 * 86_400
    /// The most decisions one state carries (the machine takes 2,000).
    static let decisionsCarried = 500

    func longestMinutes() async throws -> Int64? {
        guard let bounds = try await control.bounds().live else { return nil }
        return bounds.longestSeconds / 60
    }

    func checkApproval(_ request: StoredAccessRequest, scope: ApprovalScope, value: String, until: Int64, now: Int64) async throws {
        let (policy, store) = try await control.published.current()
        guard let bounds = policy.live else {
            throw RoomControl.refused(
                "the published policy has no live: section, so machines accept no approval; add live: with this server's key (hallpass-server live-key) and publish")
        }
        guard bounds.actions.contains("allow") else {
            throw RoomControl.refused(
                "the policy's live.actions do not let a live item allow a site (allowed: \(bounds.actions.sorted().joined(separator: ", ")))")
        }
        guard until - now <= bounds.longestSeconds else {
            throw RoomControl.refused("an approval may last at most \(bounds.longestSeconds / 60) minutes (the policy's live.longest)")
        }
        switch scope {
        case .room:
            if let rooms = bounds.rooms, !rooms.contains(value) {
                throw RoomControl.refused("the policy's live.rooms do not name \(value); choose the student or the group")
            }
        case .group:
            if let groups = bounds.groups, !groups.contains(value) {
                throw RoomControl.refused("the policy's live.groups do not name \(value); choose the student or the room")
            }
        case .user, .everyone:
            break
        }
        // The category the machine reported, and the published store's own look-up (the machine's store may be older).
        if let category = request.request.category, policy.locked.contains(category) {
            throw RoomControl.refused("\(request.request.host) is in \(category), a locked category, which nothing may open")
        }
        let pattern = try Self.target(request)
        if let category = PublishedLivePolicy.lockedCategory(of: pattern, locked: policy.locked, store: store) {
            throw RoomControl.refused("\(request.request.host) is in \(category), a locked category, which nothing may open")
        }
    }

    func addApproval(_ request: StoredAccessRequest, scope: ApprovalScope, value: String, until: Int64, by principal: Principal, now: Int64)
        async throws -> String?
    {
        let kind: LiveScope.Kind =
            switch scope {
            case .user: .user
            case .room: .room
            case .group: .group
            case .everyone: .everyone
            }
        let item = try await control.storage.addLiveItem(
            NewLiveItem(
                scope: LiveScope(kind: kind, value: value), action: "allow", targets: [try Self.target(request).description], from: now,
                until: until, byAuthor: principal.author, byName: try await control.name(of: principal), reason: request.message ?? "",
                request: request.id),
            now: now)
        await control.live.hub.announce(room: kind == .room ? value : SQLStorage.everyRoom)
        control.metrics.liveItems.increment()
        return item.id
    }

    func decided(_ request: StoredAccessRequest, now: Int64) async throws {
        // An approval's item of a person, a group or everyone is in every
        // machine's view and took its own sequence after the decision was
        // kept: the state it brings carries the decision already.
        if request.liveItem != nil, request.approvalScope != .room { return }
        guard let room = try await control.storage.raiseMachineLiveSequence(machine: request.machine) else { return }
        await control.live.hub.announce(room: room)
    }

    /// The host the request asks for, as a live item's target.
    static func target(_ request: StoredAccessRequest) throws -> RulePattern {
        do {
            return try RulePattern(request.request.host)
        } catch {
            throw RoomControl.refused("'\(request.request.host.prefix(80))' is not a name a live item can allow: \(error)")
        }
    }

    /// The state's `requests`: the decisions on the machine's requests, by
    /// the machine's own ids (the only ones it knows).
    static func decisions(storage: any ServerStorage, machine: String, now: Int64) async throws -> [LiveChannel.RequestDecision] {
        try await storage.accessRequestDecisions(machine: machine, since: now - decisionsKept, limit: decisionsCarried).map { stored in
            LiveChannel.RequestDecision(
                id: stored.request.machineRequest, state: stored.state.rawValue, message: stored.message,
                until: stored.state == .approved ? stored.approvalUntil : nil)
        }
    }
}
