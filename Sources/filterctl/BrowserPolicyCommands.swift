import ArgumentParser
import BlockPage
import FilterControl
import Foundation
import VerdictCore

/// `filterctl browser-policies`: managed policy files for Chromium, Google Chrome and Firefox ESR.
struct BrowserPoliciesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "browser-policies",
        abstract: "Write, show or remove the browsers' managed policy files.",
        discussion: """
            From the policy in force (the installed bundle's policy.yaml, else hallpass.yaml's policy:):
            DNS over HTTPS off and locked and Encrypted Client Hello off (unless policy.bypass allows them),
            QUIC off when policy.bypass.quic is block, Google SafeSearch and YouTube's Restricted Mode forced
            as policy.safeSearch says, the block page's local CA trusted when it exists, and the
            inspection proxy's interception CA (proxy.ca) when the policy inspects names and
            filter-control has made it. Files: \(BrowserPolicies.chromiumPath), \(BrowserPolicies.chromePath),
            \(BrowserPolicies.firefoxPath) (and the CAs beside it). A file hallpass did not write, or that
            changed since, is never overwritten or removed (the record is \(BrowserPolicies.recordPath)).
            Run install again after the policy or a CA changes (filter-control's log says when it made
            the interception CA again).
            """,
        subcommands: [Install.self, Show.self, Remove.self])

    struct Inputs: ParsableArguments {
        @Option(name: .long, help: "The configuration (default /etc/hallpass/hallpass.yaml).")
        var config: String?

        @Option(name: .long, help: "A school policy file to use instead of the installed bundle's.")
        var policy: String?

        @Option(name: .long, help: "Write, read and remove the browsers' files (and read the installed bundle and CA) under this folder instead of / (for staging and tests).")
        var root: String = "/"

        /// The settings the files are made from, and where they came from.
        func settings() throws -> (BrowserPolicySettings, source: String) {
            let configPath = config ?? Configuration.defaultPath
            let configText = try? String(contentsOfFile: configPath, encoding: .utf8)
            if config != nil, configText == nil { throw fail("cannot read \(configPath)", status: ExitStatus.noInput) }
            // blockPage.ca and rules.directory; hallpass.yaml's defaults when the file is absent or
            // (while the policy parser does not know the keys of issue 14 yet) does not read.
            let configuration = configText.flatMap { try? Configuration(yaml: $0) } ?? Configuration()
            var source = "defaults"
            var keys = BypassPolicyKeys()
            // --config and --policy are read as given; what hallpass.yaml points at, under --root.
            let policyPath = policy ?? onMachine(configuration.rules.directory + "/current/policy.yaml")
            if let text = try? String(contentsOfFile: policyPath, encoding: .utf8) {
                keys = try read(text, path: policyPath)
                source = policyPath
            } else if policy != nil {
                throw fail("cannot read \(policyPath)", status: ExitStatus.noInput)
            } else if let configText {
                keys = try read(configText, path: configPath)
                source = configPath
            }
            let caFile = onMachine(configuration.blockPage.ca + "/" + LocalCertificateAuthority.certificateFile)
            let pem = try? String(contentsOfFile: caFile, encoding: .utf8)
            // The interception CA only while the policy inspects something: a policy that stops
            // inspecting takes it out of the browsers at the next install.
            var interceptionPEM: String? = nil
            if inspects(policyPath: policyPath, configuration: configuration) {
                let interceptionFile = onMachine(configuration.proxy.ca + "/" + InterceptionAuthority.certificateFile)
                interceptionPEM = try? String(contentsOfFile: interceptionFile, encoding: .utf8)
                if interceptionPEM == nil {
                    FileHandle.standardError.write(Data(
                        "filterctl: the policy inspects names but \(interceptionFile) does not exist yet: filter-control makes it when it runs with this policy; run install again then\n".utf8))
                }
            }
            return (
                BrowserPolicySettings(bypass: keys.applied(to: BypassPolicy()), caCertificatePEM: pem, interceptionCertificatePEM: interceptionPEM),
                source
            )
        }

        /// Whether the school's policy (`--policy` or the bundle's, else hallpass.yaml's) inspects any name.
        private func inspects(policyPath: String, configuration: Configuration) -> Bool {
            let school: SchoolPolicy
            if let text = try? String(contentsOfFile: policyPath, encoding: .utf8) {
                // A policy that does not read was refused above, with its key and line.
                guard let read = try? SchoolPolicy(yaml: text) else { return false }
                school = read
            } else {
                school = PolicyInForce(bundlePolicy: nil, configuration: configuration).school
            }
            return !InspectionPlan.constraintNames(school.audiences.map { school.inspection(for: $0) }).isEmpty
        }

        private func read(_ text: String, path: String) throws -> BypassPolicyKeys {
            do {
                return try BypassPolicyKeys.topLevel(yaml: text)
            } catch {
                throw fail("\(path): \(error)", status: ExitStatus.configError)
            }
        }

        func onMachine(_ path: String) -> String {
            root == "/" ? path : (root.hasSuffix("/") ? String(root.dropLast()) : root) + path
        }
    }

    static func print(_ report: BrowserPolicyReport) {
        for (path, outcome) in report.files {
            let text: String
            switch outcome {
            case .written: text = "written"
            case .unchanged: text = "unchanged"
            case .removed: text = "removed"
            case .absent: text = "already gone"
            case .refused(let reason): text = "refused: " + reason
            }
            Swift.print("\(path)\t\(text)")
        }
    }

    struct Install: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Write the managed policy files (never over a file hallpass did not write).")

        @OptionGroup var inputs: Inputs

        func run() throws {
            let (settings, _) = try inputs.settings()
            do {
                let report = try BrowserPolicies(root: inputs.root).install(settings)
                BrowserPoliciesCommand.print(report)
                if report.refusals > 0 { throw ExitCode(ExitStatus.cannotCreate) }
            } catch let error as BrowserPolicyError {
                throw fail(error.description, status: ExitStatus.cannotCreate)
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print what install would write, file by file.")

        @OptionGroup var inputs: Inputs

        func run() throws {
            let (settings, source) = try inputs.settings()
            do {
                Swift.print("# from \(source)")
                for file in try BrowserPolicies.files(for: settings) {
                    Swift.print("# \(file.browser): \(file.path)")
                    Swift.print(file.text, terminator: "")
                }
            } catch {
                throw fail(error.description, status: ExitStatus.dataError)
            }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove the files hallpass wrote (not those changed since).")

        @OptionGroup var inputs: Inputs

        func run() throws {
            do {
                let report = try BrowserPolicies(root: inputs.root).remove()
                BrowserPoliciesCommand.print(report)
                if report.refusals > 0 { throw ExitCode(ExitStatus.cannotCreate) }
            } catch let error as BrowserPolicyError {
                throw fail(error.description, status: ExitStatus.cannotCreate)
            }
        }
    }
}
