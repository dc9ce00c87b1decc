public import Logging
import Synchronization
public import VerdictCore

/// The published policy's `safeguarding:`, as the alerts at record ingest
/// judge by it: read again only when the published version changes (one
/// small query per post finds out). A policy without the key, a publication
/// without a policy, and a server that has published nothing yet all get
/// the shipped rules: the records a school's machines send are judged
/// whatever its publishing does.
public final class PublishedSafeguarding: Sendable {
    let storage: any ServerStorage
    let logger: Logger
    private let cached = Mutex<(version: PublishedPolicyVersion?, policy: SafeguardingPolicy)?>(nil)

    public init(storage: any ServerStorage, logger: Logger) {
        self.storage = storage
        self.logger = logger
    }

    public func current() async throws -> SafeguardingPolicy {
        let version = try await storage.publishedPolicyVersion()
        if let hit = cached.withLock({ $0 }), hit.version == version { return hit.policy }
        var policy = SafeguardingPolicy.shipped
        if let version, let text = try await storage.policyVersion(version.policyVersion)?.policy {
            do {
                // Read as the live channel reads it (its keys apart, the rest as machines do).
                policy = try LivePolicy(yaml: text).school?.safeguarding ?? .shipped
            } catch {
                // Publishing checked it; a policy that no longer reads (a server older than the
                // one that published it) still gets the shipped rules rather than none.
                logger.error(
                    "the published policy's safeguarding: cannot be read; alerts follow the shipped rules until it can",
                    metadata: ["hallpass.policy.version": "\(version.policyVersion)", "hallpass.error": "\(error)"])
            }
        }
        cached.withLock { $0 = (version, policy) }
        return policy
    }
}
