import Foundation
import Logging
import SharedStore
import VerdictCore

/// The live channel's side of Control: the context its checks need, what
/// happens when a state is in force, and where its refusals go.
extension Control {
    /// `FilterControlApplication.build` made the live channel.
    func useLiveChannel(_ channel: LiveChannel) {
        liveChannel = channel
    }

    /// The policy in force and the look-up of locked categories in the store in force.
    func liveContext() -> LiveChannel.Context {
        Control.liveContext(policy: policy.school, store: store)
    }

    /// The same for a policy and store not (yet) in force (a reload's).
    nonisolated static func liveContext(policy: SchoolPolicy, store: RuleStore) -> LiveChannel.Context {
        LiveChannel.Context(policy: policy, lockedCategory: lockedCategory(store: store, locked: policy.locked))
    }

    /// The locked category a rule of `store` puts a target in: the target is
    /// judged as a flow to it with only the locked categories blocked.
    nonisolated static func lockedCategory(store: RuleStore, locked: Set<String>) -> @Sendable (RulePattern) -> String? {
        guard !locked.isEmpty else { return { _ in nil } }
        let engine = VerdictEngine(rules: store, policy: Policy(blockedCategories: .only(locked)))
        return { pattern in
            var facts = FlowFacts(nameSource: .request)
            switch pattern {
            case .domain(let host, _): facts.host = host
            case .urlPrefix(let host, let path):
                facts.host = host
                facts.path = path
            case .network(let network): facts.destination = network.address
            }
            let decision = engine.decide(facts)
            guard decision.verdict == .drop, decision.reason.source == .category, let category = decision.reason.category,
                locked.contains(category)
            else { return nil }
            return category
        }
    }

    /// Checks the live state held against the policy and store in force (start, reload).
    func recheckLiveState() {
        guard let school else { return }
        let context = liveContext()
        if let refusal = school.live.reevaluate(
            policy: context.policy, bounds: context.bounds, machine: school.identity.machine, now: Int64(clock().timeIntervalSince1970))
        {
            logger.warning("school: the live state held no longer verifies; its items are out of force: \(refusal.message)", metadata: ["hallpass.code": "\(refusal.code)"])
            return
        }
        // Again at start: a decision whose state was kept while requests.json could not be written.
        applyRequestDecisions(school.live.held.requests)
    }

    /// A new live state is kept: in force at once, and the decisions it
    /// carries on this machine's access requests go to their store (the
    /// block page shows them).
    func liveStateApplied() async {
        if let school { applyRequestDecisions(school.live.held.requests) }
        await applyPolicy(reason: "live state \(school?.live.sequence ?? 0)")
    }

    /// Takes the school's decisions on requests made here (by this
    /// machine's own ids); one it does not know, or knows already, changes
    /// nothing. An approval adds no override of its own: its live item
    /// opens the site for the audience the teacher chose.
    func applyRequestDecisions(_ decisions: [LiveState.RequestDecision]) {
        let now = clock()
        let taken = decisions.compactMap { decision -> AccessRequestStore.Decision? in
            guard let state = AccessRequest.State(rawValue: decision.state), state != .pending else { return nil }
            return AccessRequestStore.Decision(
                id: decision.id, state: state, message: decision.message,
                until: decision.until.map { Date(timeIntervalSince1970: TimeInterval($0)) })
        }
        guard !taken.isEmpty else { return }
        do {
            for request in try requests.applyDecisions(taken, now: now) {
                logger.notice(
                    "school: access request \(request.id) \(request.state.rawValue)",
                    metadata: ["hallpass.request": "\(request.id)", "hallpass.host": "\(request.host)"])
            }
        } catch {
            logger.error("school: the decisions on access requests cannot be kept: \(error.message) [\(error.code)]")
        }
    }

    /// The refusals go to the school's server as `live-refused` records.
    nonisolated func reportLiveRefusals(_ reports: [LiveChannel.RefusalReport]) async {
        guard let outbox = school?.outbox else { return }
        let now = clock()
        let lines = reports.map { report in
            var line = AuditLine(event: "live-refused", time: now, machine: outbox.machine)
            line[.kind] = "live"
            line[.rule] = report.item ?? report.sequence.map { "state \($0)" } ?? "state"
            line[.reason] = report.code
            line[.host] = report.target
            line[.category] = report.category
            return line
        }
        await outbox.append(lines)
    }

    /// What `filterctl status` and `filterctl live` show of the live channel.
    func liveStatus() -> AdminStatus.LiveStatus? {
        guard let school else { return nil }
        let now = Int64(clock().timeIntervalSince1970)
        let held = school.live.held
        let channel = liveChannel?.status
        return AdminStatus.LiveStatus(
            connected: channel?.connected ?? false, lastContactAt: channel?.lastContactAt, lastError: channel?.lastError,
            sequence: held.sequence, room: held.room.isEmpty ? nil : held.room, keys: policy.school.live?.keys.count ?? 0,
            items: held.items.filter { $0.isInForce(now: now) }.map { item in
                AdminStatus.LiveStatus.Item(
                    id: item.id, action: item.action.rawValue, targets: item.targets, scope: Self.describe(item.scope), by: item.by,
                    until: Date(timeIntervalSince1970: TimeInterval(item.until)),
                    untilText: onSchoolClock(item.until))
            },
            refusedInState: held.refused.map(\.description), statesRefused: channel?.statesRefused ?? 0, itemsRefused: channel?.itemsRefused ?? 0,
            lastRefusal: channel?.lastRefusal)
    }

    static func describe(_ scope: LiveItem.Scope) -> String {
        switch scope {
        case .room(let room): "room \(room)"
        case .everyone: "everyone"
        case .group(let group): "group \(group)"
        case .user(let user): "user \(user)"
        }
    }
}
