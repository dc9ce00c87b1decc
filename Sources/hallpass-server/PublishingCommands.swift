import ArgumentParser
import Foundation
import SchoolServer

#if canImport(Glibc)
import Glibc
#endif

/// `hallpass-server policy ...`: the school's versioned policy and lists.
struct Policy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The school's policy and lists, versioned: each change with who, when and why.",
        subcommands: [SetVersion.self, Show.self, History.self, Diff.self, Rollback.self])

    struct SetVersion: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Make a new policy version from the latest: a new policy file, lists added or replaced, lists removed.",
            discussion: """
                Lists not named are kept from the latest version. A list SOURCE is as for 'filterctl compile': a list \
                file (its category the file name without extension), a category folder holding domains and/or urls, or a \
                UT1 folder of category folders; CATEGORY= names the category. Prints "policy version N".
                """)
        @OptionGroup var options: ConfigOption
        @Option(help: "The school's policy file (docs/school-policy.md), checked as machines read it.") var policy: String?
        @Flag(name: .customLong("no-policy"), help: "No policy file: machines apply their own hallpass.yaml policy.") var noPolicy = false
        @Option(name: .customLong("list"), help: "[CATEGORY=]PATH of a list to add or replace (repeatable).") var lists: [String] = []
        @Option(name: .customLong("remove-list"), help: "A category whose list is removed (repeatable).") var removing: [String] = []
        @Option(help: "Why (required; kept with the version).") var reason: String

        func run() async throws {
            let configuration = try options.load()
            guard !(policy != nil && noPolicy) else { throw ValidationError("give --policy or --no-policy, not both") }
            let change: PolicyEditor.PolicyChange
            if let policy {
                guard let data = FileManager.default.contents(atPath: policy) else { throw ValidationError("cannot read the policy file \(policy)") }
                change = .set(String(decoding: data, as: UTF8.self))
            } else {
                change = noPolicy ? .remove : .keep
            }
            // Read before the command takes the state folder owner's identity: the files may be root's.
            let named: [PolicyEditor.NamedList]
            do {
                named = try ServerAdministration.readListSources(lists, maxBytes: configuration.publishing.maxListBytes)
            } catch let error as PublishingError {
                throw PublishingFailure(message: "\(error.message) (\(error.code))")
            }
            let stored = try await withPublishing(configuration) { storage, _, author in
                let stored = try await PolicyEditor(storage: storage, configuration: configuration).change(
                    policy: change, lists: named, removing: removing, reason: reason, author: author, now: now())
                try await storage.audit(
                    NewAuditEvent(time: now(), actor: author, action: "policy.set", target: "version \(stored.version)", reason: reason))
                return stored
            }
            print("policy version \(stored.version)")
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a policy version (the latest by default): the policy and the lists.")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The version.") var version: Int64?

        func run() async throws {
            let configuration = try options.load()
            let text = try await withPublishing(configuration) { storage, _, _ in
                let found: StoredPolicyVersion?
                if let version {
                    found = try await storage.policyVersion(version)
                } else {
                    found = try await storage.latestPolicyVersion()
                }
                guard let found else {
                    throw PublishingError(.notFound, "version-unknown", version.map { "there is no policy version \($0)" } ?? "there is no policy version yet")
                }
                return ServerAdministration.policyText(found)
            }
            print(text)
        }
    }

    struct History: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every policy version, newest first, and the bundles it was published as.")
        @OptionGroup var options: ConfigOption

        func run() async throws {
            let configuration = try options.load()
            let text = try await withPublishing(configuration) { storage, _, _ in try await ServerAdministration.historyText(storage: storage) }
            print(text)
        }
    }

    struct Diff: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "What changed from version A to B: the policy's lines, and per list the names added and removed.")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The older version.") var from: Int64
        @Argument(help: "The newer version.") var to: Int64

        func run() async throws {
            let configuration = try options.load()
            let text = try await withPublishing(configuration) { storage, _, _ in
                try await ServerAdministration.diffText(storage: storage, from: from, to: to)
            }
            print(text)
        }
    }

    struct Rollback: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make a new version with the content of version N (publish it after).")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The version whose content to take.") var version: Int64
        @Option(help: "Why (required).") var reason: String

        func run() async throws {
            let configuration = try options.load()
            let stored = try await withPublishing(configuration) { storage, _, author in
                let stored = try await PolicyEditor(storage: storage, configuration: configuration).rollback(
                    to: version, reason: reason, author: author, now: now())
                try await storage.audit(
                    NewAuditEvent(
                        time: now(), actor: author, action: "policy.rollback", target: "version \(stored.version)", reason: reason,
                        detail: "the content of version \(version)"))
                return stored
            }
            print("policy version \(stored.version) (the content of version \(version))")
        }
    }
}

/// `hallpass-server publish ...`: build, sign and publish the school's bundle.
struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Build the bundle of a policy version and publish it (or, with an offline key, prepare it for signing).",
        subcommands: [Now.self, Complete.self, Status.self],
        defaultSubcommand: Now.self)

    struct Now: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "now", abstract: "Build and publish (the default: hallpass-server publish --reason TEXT).", shouldDisplay: false)
        @OptionGroup var options: ConfigOption
        @Option(help: "Why (required; kept with the publication).") var reason: String
        @Option(name: .customLong("policy-version"), help: "The policy version to publish (default: the latest).") var policyVersion: Int64?
        @Option(
            name: .customLong("after-version"),
            help: """
                Number the bundle above N: for a school whose machines hold bundle N from an earlier publisher \
                ('filterctl bundle build'), which refuse a lower version. Ignored when the server has published above N already.
                """)
        var afterVersion: Int64?

        func validate() throws {
            if let afterVersion, afterVersion < 0 { throw ValidationError("--after-version takes a bundle version (0 or more)") }
        }

        func run() async throws {
            let configuration = try options.load()
            let text = try await withPublishing(configuration) { storage, publisher, author in
                if let afterVersion, afterVersion > (try await storage.publishedVersion()) {
                    try await storage.setPublishedVersion(afterVersion)
                }
                let outcome = try await publisher.publish(reason: reason, policyVersion: policyVersion, author: author, now: now())
                try await storage.audit(
                    NewAuditEvent(
                        time: now(), actor: author, action: "publish", target: "bundle \(outcome.publication.bundleVersion)", reason: reason,
                        detail: "policy version \(outcome.publication.policyVersion), \(outcome.publication.state.rawValue)"))
                return ServerAdministration.publishText(outcome, publisher: publisher)
            }
            print(text)
        }
    }

    struct Complete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish the pending bundle with its signature (manifest.sig from 'filterctl bundle sign'), checked against publishing.trustedKeys.")
        @OptionGroup var options: ConfigOption
        @Argument(help: "The signature file.") var signature: String

        func run() async throws {
            let configuration = try options.load()
            guard let data = FileManager.default.contents(atPath: signature) else { throw ValidationError("cannot read \(signature)") }
            let published = try await withPublishing(configuration) { storage, publisher, author in
                let published = try await publisher.complete(signature: Array(data), now: now())
                try await storage.audit(
                    NewAuditEvent(
                        time: now(), actor: author, action: "publish.complete", target: "bundle \(published.bundleVersion)",
                        detail: "policy version \(published.policyVersion)"))
                return published
            }
            print("published bundle version \(published.bundleVersion) (policy version \(published.policyVersion)): \(published.reason)")
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The published bundle, and any bundle waiting for its signature.")
        @OptionGroup var options: ConfigOption

        func run() async throws {
            let configuration = try options.load()
            let text = try await withPublishing(configuration) { storage, publisher, _ in
                try await ServerAdministration.statusText(storage: storage, publisher: publisher)
            }
            print(text)
        }
    }
}

/// Opens the storage and the publisher of `configuration` for `body`; a
/// refusal is printed as its message (and the command fails), not as a trace.
/// Run as root, the command first becomes the owner of the state folder;
/// `body` gets who ran it (`cli:LOGIN`).
func withPublishing<T: Sendable>(
    _ configuration: ServerConfiguration, _ body: @Sendable (SQLStorage, Publisher, _ author: String) async throws -> T
) async throws -> T {
    // Who ran it, taken before the identity changes.
    let author = cliAuthor()
    try becomeStateOwner(configuration)
    do {
        return try await withServerStorage(configuration.database, logger: makeLogger()) { storage in
            let publisher = try Publisher.load(configuration: configuration, storage: storage, logger: makeLogger())
            return try await body(storage, publisher, author)
        }
    } catch let error as PublishingError {
        throw PublishingFailure(message: "\(error.message) (\(error.code))")
    }
}

/// What these commands write under the state folder (the publisher's folder
/// and lock, the file cache, the lists being checked) must stay the service's:
/// files root made there, 0600 or 0640, would stop the service from serving
/// them or from publishing. So root, running a `policy` or `publish` command,
/// takes the identity of the folder's owner (the service's user as
/// installed) before it opens anything; which is also the PostgreSQL role
/// peer authentication lets in. A folder root owns, or none yet, changes
/// nothing.
func becomeStateOwner(_ configuration: ServerConfiguration) throws {
    guard geteuid() == 0,
        let attributes = try? FileManager.default.attributesOfItem(atPath: configuration.stateDirectory),
        let uid = (attributes[.ownerAccountID] as? NSNumber)?.uint32Value,
        let gid = (attributes[.groupOwnerAccountID] as? NSNumber)?.uint32Value, uid != 0
    else { return }
    guard setgroups(0, nil) == 0, setgid(gid) == 0, setuid(uid) == 0 else {
        let reason = POSIXErrorCode(rawValue: errno).map { "\(POSIXError($0).localizedDescription)" } ?? "errno \(errno)"
        throw PublishingFailure(message: "cannot run as the owner (uid \(uid)) of \(configuration.stateDirectory): \(reason)")
    }
}

struct PublishingFailure: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
