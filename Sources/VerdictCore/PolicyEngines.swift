/// One engine per audience of a policy set, sharing one rule source and one
/// overlay of lookup answers: what filter-data decides with. A flow is
/// judged by the engine of its socket's user's audience; a user filter-control
/// has not placed yet has none (the flow waits for filter-control's answer).
public struct PolicyEngines<Rules: RuleSource>: Sendable {
    public private(set) var set: PolicySet
    public private(set) var engines: [Audience: VerdictEngine<Rules>]
    public let rules: Rules
    /// Each audience's inspection plan (its policy's `inspection`), built once with the engines.
    public let inspectionPlans: [Audience: InspectionPlan]
    /// One plan of each distinct inspection that inspects anything: empty when
    /// no audience inspects anything, so a DNS answer costs one check then.
    private let inspectingPlans: [InspectionPlan]

    public init(rules: Rules, set: PolicySet, answers: LookupAnswers = LookupAnswers()) {
        self.rules = rules
        self.set = set
        (inspectionPlans, inspectingPlans) = Self.plans(set.policies)
        var engines: [Audience: VerdictEngine<Rules>] = [:]
        let safeSearchAddresses = set.safeSearchTargets.mapValues { Set($0.addresses) }
        for (audience, policy) in set.policies {
            var engine = VerdictEngine(rules: rules, policy: policy)
            engine.answers = answers
            engine.safeSearchAddresses = safeSearchAddresses
            engines[audience] = engine
        }
        self.engines = engines
    }

    /// One policy for everyone.
    public init(single engine: VerdictEngine<Rules>) {
        self.rules = engine.rules
        self.set = PolicySet(single: engine.policy)
        self.engines = [.ungrouped: engine, .system: engine]
        (inspectionPlans, inspectingPlans) = Self.plans(set.policies)
    }

    private static func plans(_ policies: [Audience: Policy]) -> ([Audience: InspectionPlan], [InspectionPlan]) {
        var built: [InspectionPolicy: InspectionPlan] = [:]
        var plans: [Audience: InspectionPlan] = [:]
        for (audience, policy) in policies {
            if built[policy.inspection] == nil { built[policy.inspection] = InspectionPlan(policy: policy.inspection) }
            plans[audience] = built[policy.inspection]
        }
        return (plans, built.values.filter(\.inspectsAnything))
    }

    /// Whether some audience inspects `host`. The kernel's selection of
    /// addresses for the proxy is one for the whole machine (a stub resolver
    /// asks for everyone, as a system user), so it takes the names any
    /// audience inspects; the proxy then splices the connections of the
    /// people whose own plan does not inspect the name.
    public func inspectedForSomeone(_ host: HostName) -> Bool {
        inspectingPlans.contains { $0.choice(for: host).isInspect }
    }

    /// Whether any audience inspects anything at all.
    public var inspectsAnything: Bool { !inspectingPlans.isEmpty }

    /// The inspection plan for a connection of `uid`; nil when filter-control must be asked first.
    public func inspectionPlan(for uid: UInt32?) -> InspectionPlan? {
        switch set.placement(uid: uid) {
        case .audience(let audience): inspectionPlans[audience] ?? inspectionPlans[.ungrouped]
        case .unknown: nil
        }
    }

    /// People in no group: what decides when a flow's user does not matter
    /// (a flow still waiting for its name) and the machine's own settings
    /// (the same in every audience).
    public var fallback: VerdictEngine<Rules> { engines[.ungrouped]! }

    /// The engine for a flow of `uid`; nil when filter-control must be asked first.
    public func engine(for uid: UInt32?) -> VerdictEngine<Rules>? {
        switch set.placement(uid: uid) {
        case .audience(let audience): engines[audience] ?? fallback
        case .unknown: nil
        }
    }

    /// The engine's decision for a flow; `needRules` with reason `unknownUser`
    /// when its user is not placed yet.
    public func decide(_ facts: FlowFacts) -> Decision {
        if facts.mayRevealName, facts.host == nil { return fallback.decide(facts) }
        guard let engine = engine(for: facts.uid) else { return Decision(.needRules, Reason(source: .unknownUser)) }
        return engine.decide(facts)
    }

    /// filter-control placed `uid` in `audience`.
    public mutating func place(uid: UInt32, in audience: Audience) {
        guard set.users.count < PolicySet.maximumUsers || set.users[uid] != nil else { return }
        set.users[uid] = audience
    }

    /// The lookup answers, shared by every engine.
    public var answers: LookupAnswers { fallback.answers }

    public mutating func recordAnswer(_ answer: LookupAnswers.Answer, for host: HostName) {
        for audience in engines.keys { engines[audience]!.answers.record(answer, for: host) }
    }

    @discardableResult
    public mutating func removeExpiredAnswers(now: UInt64) -> Int {
        var removed = 0
        for audience in engines.keys { removed = engines[audience]!.answers.removeExpired(now: now) }
        return removed
    }
}
