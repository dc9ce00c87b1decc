import ArgumentParser
import BundleBuilder
import BundleDelta
import FilterControl
import HallpassConfig
import Foundation
import HallpassSystem
import SharedStore
import VerdictCore

struct BundleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bundle",
        abstract: "Make, sign and check rule bundles (the files a school's server publishes).",
        subcommands: [Keygen.self, Build.self, Sign.self, Verify.self]
    )

    struct Keygen: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a signing key; prints the public key for rules.trustedKeys.")

        @Option(name: .long, help: "Where to write the private key (PEM, mode 0600). Refuses to overwrite.")
        var out: String

        func run() throws {
            let key = BundleSigningKey()
            do {
                try AtomicFile.createNew(Array(key.pem.utf8), at: out, mode: 0o600)
            } catch {
                let reason = error.alreadyExists ? "the file exists; keys are never overwritten" : error.reason
                throw fail("cannot create \(out): \(reason)", status: error.written ? ExitStatus.ioError : ExitStatus.cannotCreate)
            }
            print(key.publicKey.description)
        }
    }

    struct Build: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Compile sources into a signed bundle folder.",
            discussion: """
                SOURCE is as for 'filterctl compile'; the store carries hallpass's own lists of DNS-over-HTTPS \
                resolvers and ECH public names as well, unless --no-builtin-protections. Publish the folder's files on any HTTPS server.
                """)

        @Option(name: .long, help: "The signing key (PEM) from 'filterctl bundle keygen'.")
        var key: String

        @Option(name: .long, help: "The bundle version: a positive integer larger than any published before.")
        var version: UInt64

        @Option(name: .long, help: "How long the bundle is valid: e.g. 12h, 30d (default 30d).")
        var expires: String = "30d"

        @Option(name: .long, help: "The bundle folder to write (created if needed). Files whose bytes did not change are left as they are.")
        var out: String

        @Option(
            name: .long,
            help: "How many earlier versions of the store to keep in the folder (.previous/) and write deltas from (0: none, no deltas).")
        var keepVersions: Int = 3

        @Option(name: .long, help: "The school's policy file (groups, schedules, exams; docs/school-policy.md), signed with the rules.")
        var policy: String?

        @OptionGroup var protections: ProtectionOptions

        @Argument(help: "[CATEGORY=]PATH of a list file or folder.")
        var sources: [String]

        func validate() throws {
            guard version > 0 else { throw ValidationError("--version must be a positive integer") }
            guard (0...16).contains(keepVersions) else { throw ValidationError("--keep-versions takes 0 to 16") }
            guard parseDuration(expires) != nil else {
                throw ValidationError("--expires takes a duration like 12h or 30d (at most 3650d)")
            }
        }

        func run() throws {
            let signingKey = try loadSigningKey(key)
            var policyBytes: [UInt8]? = nil
            if let policy {
                guard let data = FileManager.default.contents(atPath: policy) else {
                    throw fail("cannot read the policy file \(policy)", status: ExitStatus.noInput)
                }
                // A school never publishes a policy its machines would refuse.
                do {
                    _ = try SchoolPolicy(yaml: String(decoding: data, as: UTF8.self))
                } catch {
                    throw fail("\(policy): \(error)", status: ExitStatus.dataError)
                }
                policyBytes = Array(data)
            }
            let lists = try protections.lists()
            let now = BundleVerifier.currentTime()
            let result: RuleCompiler.Result
            do {
                // Version 0 and no build time: the store is the rules alone, so that equal
                // rules give a byte-identical file and a machine that has it fetches nothing
                // (the version is the manifest's; RuleStore.version reads it there).
                result = try RuleCompiler().compile(
                    sources.map(RuleCompiler.SourceSpec.init), version: 0, protections: lists)
            } catch let error as RuleCompiler.CompileError {
                throw fail(error.message, status: ExitStatus.dataError)
            }
            var files = [(name: BundleManifest.storeFileName, contents: result.bytes)]
            if let policyBytes { files.append((BundleManifest.policyFileName, policyBytes)) }
            let writer = BundleWriter(folder: BundleFolder(path: out, keepVersions: keepVersions))
            let staged: BundleWriter.Staged
            do {
                staged = try writer.stage(files: files, version: version, issuedAt: now, expiresAt: now + parseDuration(expires)!)
                try writer.seal(staged, signature: signingKey.signatureFile(for: staged.manifestBytes))
            } catch {
                throw fail("cannot write the bundle to \(out): \(error)", status: ExitStatus.cannotCreate)
            }
            let manifest = staged.manifest
            let report = staged.report
            printSummary(result, quiet: true, to: out + "/" + BundleManifest.storeFileName)
            print("bundle \(out): version \(version), expires \(UTCTime.format(manifest.expiresAt)), signed by \(signingKey.publicKey.keyID)")
            if policyBytes != nil { print("with the school's policy from \(policy!)") }
            if !report.unchanged.isEmpty { print("unchanged (kept byte for byte): " + report.unchanged.joined(separator: ", ")) }
            for delta in manifest.deltas {
                print("delta \(delta.name): \(delta.size) bytes, from \(delta.target) \(delta.baseSHA256.prefix(16))" + (report.reusedDeltas.contains(delta.name) ? " (kept)" : ""))
            }
        }
    }

    struct Sign: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign a bundle manifest prepared elsewhere (a school's server that keeps no key).",
            discussion: """
                MANIFEST is the manifest the server prepared ('hallpass-server publish' with publishing.signingKey: offline). \
                Check the version and the files printed before handing the signature back ('hallpass-server publish complete SIGNATURE').
                """)

        @Option(name: .long, help: "The signing key (PEM) from 'filterctl bundle keygen'.")
        var key: String

        @Option(name: .long, help: "Where to write the signature (the bundle's manifest.sig).")
        var out: String

        @Argument(help: "The manifest to sign.")
        var manifest: String

        func run() throws {
            let signingKey = try loadSigningKey(key)
            guard let data = FileManager.default.contents(atPath: manifest) else {
                throw fail("cannot read the manifest \(manifest)", status: ExitStatus.noInput)
            }
            // The key signs only what a machine would take as a manifest: a wrong file
            // handed over (a store, a policy, a signature) is refused, never signed.
            let bytes = Array(data)
            let parsed: BundleManifest
            do {
                parsed = try BundleManifest(parsing: bytes)
            } catch {
                throw fail("refused (\(error.code)): \(manifest) is not a bundle manifest: \(error.description)", status: ExitStatus.dataError)
            }
            let signature: [UInt8]
            do {
                signature = try signingKey.signatureFile(for: bytes)
            } catch {
                throw fail("cannot sign \(manifest): \(error)", status: ExitStatus.dataError)
            }
            do {
                try AtomicFile.write(signature, to: out, mode: 0o644)
            } catch {
                throw fail("cannot write \(out): \(error.reason)", status: error.written ? ExitStatus.ioError : ExitStatus.cannotCreate)
            }
            print("bundle version \(parsed.version), issued \(UTCTime.format(parsed.issuedAt)), expires \(UTCTime.format(parsed.expiresAt))")
            for file in parsed.files {
                print("file \(file.name): \(file.size) bytes, sha256 \(file.sha256.prefix(16))")
            }
            for delta in parsed.deltas {
                print("delta \(delta.name): \(delta.size) bytes, makes \(delta.target) from \(delta.baseSHA256.prefix(16))")
            }
            print("signed by \(signingKey.publicKey.keyID) (\(signingKey.publicKey)): \(out)")
        }
    }

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a bundle folder as a lab machine would: signature, expiry, every file.")

        @Argument(help: "The bundle folder.")
        var directory: String

        @Option(name: .customLong("trusted-key"), help: "ed25519:BASE64; repeat for several keys.")
        var trustedKeys: [String] = []

        func validate() throws {
            guard !trustedKeys.isEmpty else { throw ValidationError("give at least one --trusted-key ed25519:BASE64") }
        }

        func run() throws {
            var keys: [BundlePublicKey] = []
            for text in trustedKeys {
                guard let key = try? BundlePublicKey(text) else {
                    throw fail("--trusted-key \(text.prefix(60)): expected ed25519:BASE64 (32 bytes)", status: ExitStatus.usage)
                }
                keys.append(key)
            }
            let bundle: VerifiedBundle
            var school: SchoolPolicy? = nil
            var missingDeltas: [String] = []
            do {
                let verifier = BundleVerifier(signatures: .trusted(keys))
                bundle = try verifier.verify(directory: directory)
                // The school's folder before it is published: the deltas are whole too.
                missingDeltas = try verifier.verifyDeltas(of: bundle)
                if bundle.manifest.files.contains(where: { $0.name == BundleManifest.storeFileName }) {
                    _ = try RuleStore(path: bundle.path(of: BundleManifest.storeFileName), verification: .full)
                }
                if bundle.manifest.files.contains(where: { $0.name == BundleManifest.policyFileName }) {
                    school = try PolicyInForce.bundlePolicy(inFolder: directory)
                }
            } catch let error as ConfigurationError {
                throw fail("refused (bundle.policy-invalid): \(error)", status: ExitStatus.dataError)
            } catch let error as BundleError {
                let status = if case .missingManifest = error { ExitStatus.noInput } else { ExitStatus.dataError }
                throw fail("refused (\(error.code)): \(error.description)", status: status)
            } catch let error as StoreError {
                throw fail("refused (\(error.code)): \(error.description)", status: ExitStatus.dataError)
            }
            let manifest = bundle.manifest
            print(
                "ok: version \(manifest.version), issued \(UTCTime.format(manifest.issuedAt)), expires \(UTCTime.format(manifest.expiresAt)), signed by \(bundle.signerKeyID ?? "?"), \(manifest.files.count) file(s)"
                    + (manifest.deltas.isEmpty ? "" : ", \(manifest.deltas.count) delta(s)")
            )
            if !missingDeltas.isEmpty {
                print("not in the folder (machines download the whole file instead): " + missingDeltas.joined(separator: ", "))
            }
            print(school.map(PolicySummary.describe) ?? "no school policy: machines apply their own hallpass.yaml policy")
        }
    }
}

/// The signing key (PEM) at `path`, or the exit that says why not.
func loadSigningKey(_ path: String) throws -> BundleSigningKey {
    guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
        throw fail("cannot read the key \(path)", status: ExitStatus.noInput)
    }
    do {
        return try BundleSigningKey(pem: pem)
    } catch {
        throw fail("\(path): \(error)", status: ExitStatus.dataError)
    }
}

/// `90s`, `30m`, `12h`, `30d`: seconds, or nil. The unit is required here (a bare
/// number could be read as minutes or days), and the most is ten years.
func parseDuration(_ text: String) -> Int64? {
    guard let unit = text.last, unit.isLetter, let seconds = DurationText.seconds(text), seconds > 0, seconds <= 3650 * 86_400
    else { return nil }
    return Int64(seconds)
}
