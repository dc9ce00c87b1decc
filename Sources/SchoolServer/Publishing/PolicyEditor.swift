import Foundation
import HallpassSystem

/// Makes new policy versions: each from the latest, changed as asked, checked
/// (`PolicyChecks`) before anything is stored, with its author and reason.
/// The command line and the API both change the policy through it.
public struct PolicyEditor: Sendable {
    public let storage: any ServerStorage
    /// Where lists are written to be checked (under the state folder).
    public let workFolder: String
    public let maxListBytes: Int

    public init(storage: any ServerStorage, workFolder: String, maxListBytes: Int) {
        self.storage = storage
        self.workFolder = workFolder
        self.maxListBytes = maxListBytes
    }

    public init(storage: any ServerStorage, configuration: ServerConfiguration) {
        self.init(
            storage: storage, workFolder: configuration.stateDirectory + "/publish/work",
            maxListBytes: configuration.publishing.maxListBytes)
    }

    /// What becomes of the policy file.
    public enum PolicyChange: Sendable, Hashable {
        case keep
        case set(String)
        /// No policy file: machines apply their own hallpass.yaml policy.
        case remove
    }

    /// A list as given: its category and its bytes (one name per line, as a list file).
    public struct NamedList: Sendable, Hashable {
        public var category: String
        public var bytes: [UInt8]
        public init(category: String, bytes: [UInt8]) {
            self.category = category
            self.bytes = bytes
        }
    }

    /// A new version: the latest with its policy changed, `lists` put in (a
    /// category's list replaced) and the categories `removing` taken out. A
    /// change that changes nothing is refused.
    public func change(
        policy: PolicyChange, lists: [NamedList], removing: [String], reason: String?, author: String, now: Int64
    ) async throws -> StoredPolicyVersion {
        let reason = try PolicyChecks.reason(reason)
        var checked: [(PolicyList, ListContent)] = []
        for list in lists {
            guard list.bytes.count <= maxListBytes else { throw Self.tooLarge(list.category, maxListBytes) }
            let names = try PolicyChecks.list(list.bytes, category: list.category, workFolder: workFolder)
            let sha256 = Secrets.sha256(list.bytes)
            checked.append(
                (PolicyList(category: list.category, sha256: sha256, names: names), ListContent(sha256: sha256, names: names, bytes: list.bytes)))
        }
        return try await commit(policy: policy, lists: checked, removing: removing, reason: reason, author: author, now: now)
    }

    /// A new version with the list of `category` replaced by the file at
    /// `path` (an upload the API wrote there, at most `maxListBytes`).
    public func changeList(category: String, fileAt path: String, reason: String?, author: String, now: Int64) async throws
        -> StoredPolicyVersion
    {
        let reason = try PolicyChecks.reason(reason)
        let names = try PolicyChecks.list(fileAt: path, category: category)
        let bytes: [UInt8]
        do {
            bytes = try BoundedFile.read(path, limit: UInt64(maxListBytes))
        } catch {
            throw Self.tooLarge(category, maxListBytes)
        }
        let sha256 = Secrets.sha256(bytes)
        return try await commit(
            policy: .keep,
            lists: [(PolicyList(category: category, sha256: sha256, names: names), ListContent(sha256: sha256, names: names, bytes: bytes))],
            removing: [], reason: reason, author: author, now: now)
    }

    /// A new version with the content (policy and lists) of version `number`.
    public func rollback(to number: Int64, reason: String?, author: String, now: Int64) async throws -> StoredPolicyVersion {
        let reason = try PolicyChecks.reason(reason)
        guard let old = try await storage.policyVersion(number) else {
            throw PublishingError(.notFound, "version-unknown", "there is no policy version \(number) (hallpass-server policy history lists them)")
        }
        // The lists' contents are stored already: only their names are copied.
        return try await storage.addPolicyVersion(
            NewPolicyVersion(author: author, reason: reason, policy: old.policy, lists: old.lists, contents: []), now: now)
    }

    private func commit(
        policy: PolicyChange, lists: [(PolicyList, ListContent)], removing: [String], reason: String, author: String, now: Int64
    ) async throws -> StoredPolicyVersion {
        let latest = try await storage.latestPolicyVersion()
        var text = latest?.policy
        switch policy {
        case .keep: break
        case .set(let yaml):
            try PolicyChecks.policy(yaml)
            text = yaml
        case .remove: text = nil
        }
        var byCategory = Dictionary(uniqueKeysWithValues: (latest?.lists ?? []).map { ($0.category, $0) })
        for category in removing {
            guard byCategory.removeValue(forKey: category) != nil else {
                throw PublishingError(
                    .notFound, "list-unknown", "there is no list \(category.prefix(80)) in the latest policy version to remove")
            }
        }
        for (list, _) in lists { byCategory[list.category] = list }
        let newLists = byCategory.values.sorted { $0.category < $1.category }
        if let latest, latest.policy == text, latest.lists == newLists {
            throw PublishingError(.invalid, "no-change", "this changes nothing: policy version \(latest.version) is the same")
        }
        if latest == nil, text == nil, newLists.isEmpty {
            throw PublishingError(.invalid, "no-change", "give a policy or a list for the first version")
        }
        return try await storage.addPolicyVersion(
            NewPolicyVersion(author: author, reason: reason, policy: text, lists: newLists, contents: lists.map(\.1)), now: now)
    }

    static func tooLarge(_ category: String, _ limit: Int) -> PublishingError {
        PublishingError(
            .invalid, "list-too-large",
            "the list \(category.prefix(80)) is larger than publishing.maxListBytes (\(limit) bytes)")
    }
}
