// What to do with the answers of DNS queries that filter-data judged on the
// way out. The query is where the asking user is known, so its judgement is
// kept here until the answer comes back on the input hook; the answer is
// only where the change can be made. Pure: time is passed in.

import HallpassWire
public import HallpassIPC
public import VerdictCore

/// How an answer is to be changed.
public enum DNSAnswerAction: Sendable, Hashable {
    /// A blocked name: its A and AAAA records point at the block page.
    case pointAtBlockPage
    /// A canary name of encrypted DNS (`bypass.encryptedDNS: block`): NXDOMAIN.
    case nxdomain
    /// A name this engine's SafeSearch covers: a CNAME to the enforcement host and its addresses.
    case safeSearch(SafeSearchEngine)
    /// An HTTPS or SVCB answer (`bypass.ech: block`): the `ech` parameter removed.
    case removeECH
}

/// The outstanding queries whose answers filter-data changes, keyed by the
/// query's flow (client side first) and DNS message id. Bounded: when full,
/// the oldest plan goes (its answer then passes unchanged, and the
/// connection to the real address is still judged by its server name).
public struct DNSAnswerPlans: Sendable {
    public struct Key: Hashable, Sendable {
        public var flow: FlowKey
        public var id: UInt16

        public init(flow: FlowKey, id: UInt16) {
            self.flow = flow
            self.id = id
        }
    }

    struct Plan: Sendable {
        var name: HostName
        var action: DNSAnswerAction?
        /// The answer's addresses go into the kernel sets of the inspection proxy.
        var inspect: Bool
        var expires: UInt64
    }

    /// What is done with an answer: changed by `action` (nil: not changed),
    /// and with `inspect`, its addresses selected for the inspection proxy.
    public struct Outcome: Sendable, Hashable {
        public var action: DNSAnswerAction?
        public var inspect: Bool
    }

    public let capacity: Int
    /// How long a plan waits for its answer (resolvers give up long before).
    public let lifetimeNanoseconds: UInt64
    private var plans: [Key: Plan] = [:]
    /// Keys in the order they were added, for expiry and eviction; a key may
    /// appear again after its plan was replaced (the stale entry is skipped).
    private var order: [(key: Key, expires: UInt64)] = []
    private var orderStart = 0

    public init(capacity: Int = 4096, lifetime: Duration = .seconds(30)) {
        self.capacity = max(1, capacity)
        lifetimeNanoseconds = FlowTableSettings.nanoseconds(lifetime)
    }

    public var count: Int { plans.count }
    /// Entries of the order list still held (answered plans leave theirs until dropped).
    var bookkeepingCount: Int { order.count }

    /// Remembers that the answer to the query `key` about `name` gets `action`
    /// (and with `inspect`, that its addresses are selected for the proxy).
    public mutating func expect(_ key: Key, name: HostName, action: DNSAnswerAction?, inspect: Bool = false, now: UInt64) {
        removeExpired(now: now)
        // Bounded twice over: plans, and the order list (answered plans leave
        // their entry behind until it is dropped).
        while plans.count >= capacity || order.count - orderStart >= 2 * capacity, orderStart < order.count { dropOldest() }
        let expires = now &+ lifetimeNanoseconds
        plans[key] = Plan(name: name, action: action, inspect: inspect, expires: expires)
        order.append((key, expires))
    }

    /// What is done with the answer to `key` about `name`, once: the plan is
    /// used up. Nil when no plan waits (the answer passes unchanged), when
    /// it expired, or when the answer is about another name.
    public mutating func takeOutcome(_ key: Key, name: HostName?, now: UInt64) -> Outcome? {
        guard let plan = plans[key] else { return nil }
        guard plan.expires > now else {
            plans[key] = nil
            return nil
        }
        guard plan.name == name else { return nil }
        plans[key] = nil
        return Outcome(action: plan.action, inspect: plan.inspect)
    }

    /// `takeOutcome`'s change of the answer alone.
    public mutating func take(_ key: Key, name: HostName?, now: UInt64) -> DNSAnswerAction? {
        takeOutcome(key, name: name, now: now)?.action
    }

    /// Forgets plans whose answers did not come in time.
    public mutating func removeExpired(now: UInt64) {
        while orderStart < order.count, order[orderStart].expires <= now { dropOldest() }
    }

    private mutating func dropOldest() {
        let (key, expires) = order[orderStart]
        orderStart += 1
        // Only the entry that made the current plan removes it.
        if let plan = plans[key], plan.expires == expires { plans[key] = nil }
        // Compact now and then, so the order list stays as small as the plans.
        if orderStart > 1024, orderStart * 2 > order.count {
            order.removeFirst(orderStart)
            orderStart = 0
        }
    }
}
