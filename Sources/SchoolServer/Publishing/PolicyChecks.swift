import BundleBuilder
import FilterControl
import Foundation
import HallpassSystem
import SharedStore
import VerdictCore

/// What went wrong with a policy change or a publication, with a stable
/// code, a message a person can act on, and what kind of refusal it is (the
/// API's status follows from it).
public struct PublishingError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// The request itself is wrong (400).
        case invalid
        /// What it names does not exist (404).
        case notFound
        /// Not now: nothing pending, no key on the server (409).
        case conflict
        /// The server could not do it (500): a file it could not write, the protection lists missing.
        case failed
    }

    public var kind: Kind
    /// Stable: `policy-invalid`, `list-invalid`, `reason-required`, ...
    public var code: String
    public var message: String

    public init(_ kind: Kind, _ code: String, _ message: String) {
        self.kind = kind
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

/// The checks a change passes before anything is stored: the policy as a
/// machine reads it, each list as the publisher compiles it, the reason.
public enum PolicyChecks {
    /// The longest reason, in characters.
    public static let maxReasonLength = 1000

    /// The reason, trimmed; refused when empty, too long or holding control characters.
    public static func reason(_ text: String?) throws(PublishingError) -> String {
        let trimmed = (text ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else {
            throw PublishingError(.invalid, "reason-required", "every change needs a reason (--reason TEXT, or \"reason\" in the request)")
        }
        guard trimmed.count <= maxReasonLength else {
            throw PublishingError(.invalid, "reason-invalid", "a reason is at most \(maxReasonLength) characters")
        }
        guard trimmed.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
            throw PublishingError(.invalid, "reason-invalid", "a reason is one line without control characters")
        }
        return trimmed
    }

    /// Refuses a policy file machines would refuse (`SchoolPolicy(yaml:)`, as
    /// filter-control reads `policy.yaml` from a bundle), with its reason.
    public static func policy(_ yaml: String) throws(PublishingError) {
        guard !yaml.utf8.contains(0) else { throw PublishingError(.invalid, "policy-invalid", "the policy holds a NUL byte") }
        // An empty file would be a policy of nothing but defaults, published as an
        // empty policy.yaml; no policy at all is said so (null, --no-policy).
        guard yaml.contains(where: { !$0.isWhitespace }) else {
            throw PublishingError(.invalid, "policy-invalid", "the policy is empty; to publish none, send null (policy set --no-policy)")
        }
        do {
            // SchoolPolicy(yaml:) for all but `live:` and `locked:`, which LivePolicy reads.
            _ = try LivePolicy(yaml: yaml)
        } catch {
            throw PublishingError(.invalid, "policy-invalid", "the policy is refused: \(error.description)")
        }
    }

    /// What a policy that machines accept still gets wrong for the live
    /// channel: `live.keys` not naming this server's live key (machines then
    /// refuse every live state the server sends). Empty when all is well, or
    /// when the policy has no `live:` (machines take no live item, by choice).
    public static func liveWarnings(policy: String?, liveKey: String?) -> [String] {
        guard let policy, let live = try? LivePolicy(yaml: policy).live else { return [] }
        guard let liveKey else { return ["the policy has live: but this server has no live key yet; `hallpass-server init` makes it"] }
        guard live.keys.contains(liveKey) else {
            return [
                "the policy's live.keys do not name this server's live key \(liveKey) (hallpass-server live-key): machines will refuse every room rule it sends"
            ]
        }
        return []
    }

    /// A category as a list is stored under: RuleStoreBuilder's names (a-z, 0-9, `-`, `_`, at most 64).
    public static func category(_ name: String) throws(PublishingError) {
        guard RuleStoreBuilder.isValidCategoryName(name) else {
            throw PublishingError(
                .invalid, "category-invalid", "'\(name.prefix(80))' is not a category name: 1 to 64 of a-z, 0-9, - and _")
        }
    }

    /// Compiles the list file at `path` alone, as the publisher will, and
    /// returns the names it accepted; refuses a list RuleCompiler refuses, and
    /// one of which no line is a name (an empty one too: to drop a list, remove it).
    public static func list(fileAt path: String, category: String) throws(PublishingError) -> Int64 {
        try self.category(category)
        let result: RuleCompiler.Result
        do {
            result = try RuleCompiler().compile([RuleCompiler.SourceSpec(category + "=" + path)], version: 0)
        } catch let error as RuleCompiler.CompileError {
            throw PublishingError(.invalid, "list-invalid", "the list \(category) is refused: \(error.message)")
        } catch {
            throw PublishingError(.invalid, "list-invalid", "the list \(category) is refused: \(error)")
        }
        let accepted = result.report.acceptedRules
        if accepted == 0 {
            let sample = result.report.skippedSamples.first.map { ": line \($0.lineNumber): \($0.reason)" } ?? " (it is empty)"
            throw PublishingError(.invalid, "list-invalid", "the list \(category) has no name a machine could use\(sample)")
        }
        return Int64(accepted)
    }

    /// `list(fileAt:)` for bytes in memory: written to a file in `workFolder` first.
    public static func list(_ bytes: [UInt8], category: String, workFolder: String) throws(PublishingError) -> Int64 {
        try self.category(category)
        let path = workFolder + "/check-" + Secrets.randomBase32(count: 12)
        do {
            try FileSystem.makeDirectories(workFolder, mode: 0o750)
            try AtomicFile.write(bytes, to: path, mode: 0o600)
        } catch {
            throw PublishingError(.failed, "work-folder", "cannot write to \(workFolder): \(error)")
        }
        defer { FileSystem.remove(path) }
        return try list(fileAt: path, category: category)
    }
}
