/// The answers filter-control gave to needRules questions (`unknown: ask`):
/// for each name asked about, the categories the lookup service knows for
/// it (possibly none), until the answer's time to live runs out.
///
/// This is the overlay on top of the rule store: `VerdictEngine` consults it
/// only for names the store and the local lists do not know, and only when
/// the policy says `unknown: ask`. Answers are for the exact name asked
/// about. The overlay is bounded: at `capacity`, recording an answer first
/// drops the answers that expire soonest.
///
/// Pure: time is passed in (monotonic nanoseconds), nothing expires by itself.
public struct LookupAnswers: Sendable {
    public struct Answer: Sendable, Hashable {
        /// Category names (lower case); empty when the lookup knows the name but lists it nowhere.
        public var categories: [String]
        /// Monotonic time after which the answer is forgotten.
        public var expires: UInt64

        public init(categories: [String], expires: UInt64) {
            self.categories = categories
            self.expires = expires
        }
    }

    public let capacity: Int
    private var answers: [UInt64: Answer] = [:]

    public init(capacity: Int = 16_384) {
        precondition(capacity > 0, "a lookup overlay needs room for one answer")
        self.capacity = capacity
    }

    public var count: Int { answers.count }
    public var isEmpty: Bool { answers.isEmpty }

    /// The answer for exactly this name, expired or not (see `removeExpired`).
    public subscript(host: HostName) -> Answer? {
        answers[SuffixFingerprints.fingerprint(of: host)]
    }

    subscript(fingerprint fingerprint: UInt64) -> Answer? {
        answers[fingerprint]
    }

    /// Records (or replaces) the answer for `host`.
    public mutating func record(_ answer: Answer, for host: HostName) {
        let key = SuffixFingerprints.fingerprint(of: host)
        if answers[key] == nil, answers.count >= capacity {
            // Make room for an eighth of the capacity at once so that a
            // full overlay does not sort on every new answer.
            let dropCount = max(1, capacity / 8)
            let soonest = answers.sorted { $0.value.expires < $1.value.expires }.prefix(dropCount)
            for (fingerprint, _) in soonest { answers[fingerprint] = nil }
        }
        answers[key] = answer
    }

    /// Forgets answers whose time has passed; returns how many.
    @discardableResult
    public mutating func removeExpired(now: UInt64) -> Int {
        let before = answers.count
        answers = answers.filter { $0.value.expires > now }
        return before - answers.count
    }
}
