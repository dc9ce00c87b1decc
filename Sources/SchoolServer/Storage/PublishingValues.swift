/// What the server keeps of the school's policy and of its publications, as values.

/// One list of a policy version: a category and the list's contents, named by their SHA-256.
public struct PolicyList: Sendable, Hashable, Codable {
    public var category: String
    /// Lower-case hex SHA-256 of the list's bytes (`list_contents`).
    public var sha256: String
    /// The names RuleCompiler accepted from it.
    public var names: Int64

    public init(category: String, sha256: String, names: Int64) {
        self.category = category
        self.sha256 = sha256
        self.names = names
    }
}

/// A list's bytes, kept once whatever the number of versions that use it.
public struct ListContent: Sendable, Hashable {
    public var sha256: String
    public var names: Int64
    public var bytes: [UInt8]

    public init(sha256: String, names: Int64, bytes: [UInt8]) {
        self.sha256 = sha256
        self.names = names
        self.bytes = bytes
    }
}

/// One version of the school's policy: who, when, why, the policy file and the lists.
public struct StoredPolicyVersion: Sendable, Hashable {
    /// 1, 2, ...
    public var version: Int64
    /// Unix seconds.
    public var createdAt: Int64
    /// `token:NAME` or `cli:LOGIN`.
    public var author: String
    public var reason: String
    /// The policy YAML; nil: machines apply their own hallpass.yaml policy.
    public var policy: String?
    /// By category.
    public var lists: [PolicyList]

    public init(version: Int64, createdAt: Int64, author: String, reason: String, policy: String?, lists: [PolicyList]) {
        self.version = version
        self.createdAt = createdAt
        self.author = author
        self.reason = reason
        self.policy = policy
        self.lists = lists
    }
}

/// A policy version about to be stored: its number is given by the storage.
public struct NewPolicyVersion: Sendable, Hashable {
    public var author: String
    public var reason: String
    public var policy: String?
    public var lists: [PolicyList]
    /// The contents of lists the version names; those stored already are not stored again.
    public var contents: [ListContent]

    public init(author: String, reason: String, policy: String?, lists: [PolicyList], contents: [ListContent]) {
        self.author = author
        self.reason = reason
        self.policy = policy
        self.lists = lists.sorted { $0.category < $1.category }
        self.contents = contents
    }
}

/// A file of a publication, named as machines fetch it.
public struct PublishedFile: Sendable, Hashable, Codable {
    public var name: String
    public var sha256: String
    public var size: Int64

    public init(name: String, sha256: String, size: Int64) {
        self.name = name
        self.sha256 = sha256
        self.size = size
    }
}

/// A bundle the server built: pending (its manifest waits for the offline
/// key's signature) or published (machines are served it).
public struct StoredPublication: Sendable, Hashable {
    public enum State: String, Sendable, Hashable, Codable {
        case pending, published
    }

    public var bundleVersion: Int64
    public var policyVersion: Int64
    /// Unix seconds it was built.
    public var createdAt: Int64
    public var author: String
    public var reason: String
    public var state: State
    /// The manifest's bytes (what the signature covers).
    public var manifest: [UInt8]
    public var signature: [UInt8]?
    /// Unix seconds it was published; nil while pending.
    public var publishedAt: Int64?
    /// Every file machines may fetch, the manifest and its signature too, by name.
    public var files: [PublishedFile]

    public func file(named name: String) -> PublishedFile? { files.first { $0.name == name } }
}

/// A publication about to be stored: its bundle version is given by the
/// storage, which then asks for the manifest (and, with the key on the server,
/// its signature) of that version.
public struct NewPublication: Sendable {
    public var policyVersion: Int64
    public var author: String
    public var reason: String
    /// The store, the policy and the deltas, with their bytes (stored once each).
    public var files: [(file: PublishedFile, bytes: [UInt8])]

    public init(policyVersion: Int64, author: String, reason: String, files: [(file: PublishedFile, bytes: [UInt8])]) {
        self.policyVersion = policyVersion
        self.author = author
        self.reason = reason
        self.files = files
    }
}

/// The manifest of a publication of a given version, and its signature when the key is on the server.
public struct SignedManifest: Sendable, Hashable {
    public var manifest: [UInt8]
    public var signature: [UInt8]?

    public init(manifest: [UInt8], signature: [UInt8]?) {
        self.manifest = manifest
        self.signature = signature
    }
}
