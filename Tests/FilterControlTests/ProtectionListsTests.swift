// hallpass's own protection lists (rules/bypass: the DoH resolvers, the ECH public names) in every
// store filterctl makes, whatever the school's lists (issue 26): a store and a bundle built from the
// UT1 lists alone block cloudflare-ech.com and the shipped resolvers under the default bypass keys;
// --no-builtin-protections leaves them out; an installed filterctl finds them in ../share/hallpass/bypass.
import BundleBuilder
import FilterControl
import Foundation
import SharedStore
import Testing
import VerdictCore

@Suite struct ProtectionListsTests {
    static let packageRoot = BypassListTests.packageRoot
    static let ut1 = packageRoot + "/rules/ut1"
    /// A resolver of rules/bypass/doh that no UT1 list (rules/ut1) names, nor any name above it.
    static let resolverOnlyInOwnList = "dns.cert.ee"

    /// The first name of rules/ut1/gambling.
    static var gamblingName: String {
        get throws {
            let text = try String(contentsOfFile: ut1 + "/gambling/domains", encoding: .utf8)
            return String(text.split(separator: "\n").first { !$0.hasPrefix("#") } ?? "")
        }
    }

    /// Every name of rules/bypass/doh/domains.
    static func shippedResolvers() throws -> [HostName] {
        let text = try String(contentsOfFile: packageRoot + "/rules/bypass/doh/domains", encoding: .utf8)
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { try? HostName(String($0)) }
    }

    /// A school's policy that blocks gambling and leaves the bypass keys at their defaults (block).
    static let schoolPolicy = Policy(blockedCategories: .only(["gambling"]))

    static func decide(_ store: RuleStore, _ name: String, policy: Policy = schoolPolicy, ech: Bool = false) throws -> Decision {
        VerdictEngine(rules: store, policy: policy).decide(
            FlowFacts(host: try HostName(name), nameSource: .tlsServerName, encryptedClientHello: ech))
    }

    /// The checks on a store made from the UT1 lists alone with the protections in.
    static func expectProtections(in store: RuleStore) throws {
        #expect(store.categoryNames.contains("ech-front") && store.categoryNames.contains("doh"), "\(store.categoryNames)")
        #expect(store.metadata[RuleCompiler.protectionsMetadataKey] == "doh ech-front")
        let echHello = try decide(store, "cloudflare-ech.com", ech: true)
        #expect(echHello.verdict == .drop && echHello.reason.category == "ech-front", "\(echHello)")
        let resolver = try decide(store, resolverOnlyInOwnList)
        #expect(resolver.verdict == .drop && resolver.reason.category == "doh", "\(resolver)")
        let resolvers = try shippedResolvers()
        #expect(resolvers.count == 1914)
        let passing = try resolvers.filter { try decide(store, $0.description).verdict != .drop }
        #expect(passing.isEmpty, "shipped resolvers not blocked: \(passing.prefix(10))")
        // The bypass keys decide, not the school's categories.
        var relaxed = schoolPolicy
        relaxed.bypass.ech = .allow
        relaxed.bypass.encryptedDNS = .allow
        #expect(try decide(store, "cloudflare-ech.com", policy: relaxed, ech: true).verdict == .allow)
        #expect(try decide(store, resolverOnlyInOwnList, policy: relaxed).verdict == .allow)
        // The school's lists are there as before.
        let gambling = try decide(store, "www." + gamblingName)
        #expect(gambling.verdict == .drop && gambling.reason.category == "gambling", "\(gambling)")
    }

    @Test func aStoreFromUT1ListsAloneCarriesTheProtections() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let compiled = try Filterctl.run(["compile", "--quiet", "--out", folder + "/rules.hpstore", Self.ut1])
        #expect(compiled.status == 0, "\(compiled.stderr)")
        // filterctl finds the tree from its real path (/proc/self/exe), links resolved.
        let tree = URL(fileURLWithPath: Self.packageRoot).resolvingSymlinksInPath().path
        #expect(compiled.stderr.contains("with hallpass's own protections (\(tree)/rules/bypass): doh 1914 rules, ech-front 1 rules"),
                "\(compiled.stderr)")
        try Self.expectProtections(in: try RuleStore(path: folder + "/rules.hpstore"))

        // Left out: the UT1 lists' own doh category stays, the rest is gone.
        let without = try Filterctl.run(["compile", "--quiet", "--no-builtin-protections", "--out", folder + "/without.hpstore", Self.ut1])
        #expect(without.status == 0, "\(without.stderr)")
        #expect(without.stderr.contains("without hallpass's own protections (--no-builtin-protections)"), "\(without.stderr)")
        let store = try RuleStore(path: folder + "/without.hpstore")
        #expect(!store.categoryNames.contains("ech-front"))
        #expect(store.metadata[RuleCompiler.protectionsMetadataKey] == "none")
        #expect(try Self.decide(store, "cloudflare-ech.com", ech: true).verdict == .allow)
        #expect(try Self.decide(store, Self.resolverOnlyInOwnList).verdict == .allow)
    }

    @Test func aBundleFromUT1ListsAloneCarriesTheProtections() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let key = try Filterctl.run(["bundle", "keygen", "--out", folder + "/key.pem"])
        #expect(key.status == 0, "\(key.stderr)")
        let trustedKey = key.stdout.trimmingCharacters(in: .whitespacesAndNewlines)

        let built = try Filterctl.run(["bundle", "build", "--key", folder + "/key.pem", "--version", "1", "--out", folder + "/bundle", Self.ut1])
        #expect(built.status == 0, "\(built.stderr)")
        let verified = try Filterctl.run(["bundle", "verify", folder + "/bundle", "--trusted-key", trustedKey])
        #expect(verified.status == 0, "\(verified.stderr)")
        try Self.expectProtections(in: try RuleStore(path: folder + "/bundle/" + BundleManifest.storeFileName))

        let without = try Filterctl.run([
            "bundle", "build", "--key", folder + "/key.pem", "--version", "2", "--no-builtin-protections", "--out", folder + "/without", Self.ut1,
        ])
        #expect(without.status == 0, "\(without.stderr)")
        let store = try RuleStore(path: folder + "/without/" + BundleManifest.storeFileName)
        #expect(!store.categoryNames.contains("ech-front"))
        #expect(try Self.decide(store, "cloudflare-ech.com", ech: true).verdict == .allow)
        #expect(try Self.decide(store, Self.resolverOnlyInOwnList).verdict == .allow)
    }

    @Test func aSchoolListOfTheSameCategoryAddsUp() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try "ech.school-knows.example\n".write(toFile: folder + "/ech-front.txt", atomically: true, encoding: .utf8)
        // rules/ut1 has a doh category, and so has rules/bypass: three lists of doh, two of ech-front.
        let compiled = try Filterctl.run([
            "compile", "--quiet", "--out", folder + "/rules.hpstore", Self.ut1, Self.packageRoot + "/rules/bypass", folder + "/ech-front.txt",
        ])
        #expect(compiled.status == 0, "\(compiled.stderr)")
        let store = try RuleStore(path: folder + "/rules.hpstore")
        #expect(store.categoryNames.filter { $0 == "doh" }.count == 1 && store.categoryNames.filter { $0 == "ech-front" }.count == 1)
        for name in ["ech.school-knows.example", "cloudflare-ech.com"] {
            let decision = try Self.decide(store, name, ech: true)
            #expect(decision.verdict == .drop && decision.reason.category == "ech-front", "\(name): \(decision)")
        }
        #expect(try Self.decide(store, "dns.google").reason.category == "doh")
    }

    @Test func anInstalledProgramFindsThemBesideItsFolder() throws {
        let root = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let program = root + "/usr/bin/filterctl"
        #expect(throws: ProtectionLists.NotFound.self) { try ProtectionLists.forProgram(at: program) }
        do {
            _ = try ProtectionLists.forProgram(at: program)
        } catch {
            #expect(error.missingFile == root + "/usr/share/hallpass/bypass/doh/domains")
            #expect(error.description.contains("--no-builtin-protections"))
        }
        for category in ProtectionLists.categories {
            try FileManager.default.createDirectory(atPath: root + "/usr/share/hallpass/bypass/" + category, withIntermediateDirectories: true)
            try "example.test\n".write(toFile: root + "/usr/share/hallpass/bypass/\(category)/domains", atomically: true, encoding: .utf8)
        }
        #expect(try ProtectionLists.forProgram(at: program).folder == root + "/usr/share/hallpass/bypass")
        // A program built in the source tree reads the tree's lists.
        let built = Self.packageRoot + "/.build/x86_64-unknown-linux-gnu/debug/filterctl"
        #expect(try ProtectionLists.forProgram(at: built).folder == Self.packageRoot + "/rules/bypass")
    }

    /// The real program, outside the source tree and without the lists beside it: a clear refusal.
    @Test func filterctlWithoutItsListsSaysSo() throws {
        let root = URL(fileURLWithPath: try Filterctl.temporaryFolder()).resolvingSymlinksInPath().path
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root + "/bin", withIntermediateDirectories: true)
        let program = root + "/bin/filterctl"
        // A hard link where the file system allows (the debug program is over 100 MB), else a copy.
        do {
            try FileManager.default.linkItem(atPath: Filterctl.binary.path, toPath: program)
        } catch {
            try FileManager.default.copyItem(atPath: Filterctl.binary.path, toPath: program)
        }
        func compile(_ extra: [String]) throws -> (status: Int32, stderr: String) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = ["compile", "--quiet", "--out", root + "/rules.hpstore"] + extra + [Self.ut1]
            let err = Pipe()
            process.standardError = err
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            let stderr = err.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: stderr, as: UTF8.self))
        }
        let refused = try compile([])
        #expect(refused.status == 66)
        #expect(refused.stderr.contains("hallpass's own protection lists (categories doh, ech-front) are missing: no \(root)/share/hallpass/bypass/doh/domains"),
                "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: root + "/rules.hpstore"))
        #expect(try compile(["--no-builtin-protections"]).status == 0)
        // Installed as make install does.
        try FileManager.default.createDirectory(atPath: root + "/share/hallpass", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Self.packageRoot + "/rules/bypass", toPath: root + "/share/hallpass/bypass")
        let installed = try compile([])
        #expect(installed.status == 0, "\(installed.stderr)")
        #expect(installed.stderr.contains("with hallpass's own protections (\(root)/share/hallpass/bypass)"), "\(installed.stderr)")
    }
}
