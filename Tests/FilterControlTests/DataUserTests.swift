import FilterControl
import Foundation
import Testing

/// filter-data's own user (`queue.user`) and the block page's ports: the two
/// things a local user could otherwise share or take (threat model items 14
/// and 15).
@Suite struct DataUserTests {
    @Test func theDefaultIsThePackagesUserAndTheKeyNamesAnother() throws {
        #expect(Configuration().queue.user == "_hallpass")
        #expect(try Configuration(yaml: Configuration.example).queue.user == "_hallpass")
        #expect(try Configuration(yaml: "queue:\n  user: nobody\n").queue.user == "nobody")
        #expect(try Configuration(yaml: "queue:\n  user: daemon\n").queue.user == "daemon")
    }

    @Test(arguments: ["root", "", "1000", "-x", "a b", "a:b", "a/b", String(repeating: "a", count: 33)])
    func namesThatAreNotAUserOrAreRootAreRefused(name: String) {
        do {
            _ = try Configuration(yaml: "queue:\n  user: \"\(name)\"\n")
            Issue.record("accepted queue.user '\(name)'")
        } catch {
            #expect(error.key == "queue.user")
            #expect(error.line == 2)
        }
    }

    @Test func anExistingUserIsHandedOverByNumber() throws {
        // Users every Debian system has: daemon (uid 1), nobody (65534).
        guard case .found(let daemon) = DataUser.lookUp("daemon") else {
            Issue.record("no user daemon")
            return
        }
        #expect(daemon.uid == UserDirectory().uid(named: "daemon") && daemon.uid != 0 && daemon.gid != 0)
        #expect(daemon.arguments == ["--uid", String(daemon.uid), "--gid", String(daemon.gid)])
        #expect(DataUser.lookUp("nobody") == .found(DataUser(name: "nobody", uid: 65534, gid: 65534)))
    }

    @Test func aMissingUserFallsBackToNobodyAndSaysWhatToDo() {
        guard case .missing(let fallback, let warning) = DataUser.lookUp("hallpass-no-such-user") else {
            Issue.record("a user that does not exist was found")
            return
        }
        #expect(fallback == .nobody && fallback.uid == 65534 && fallback.gid == 65534)
        #expect(warning.contains("queue.user") && warning.contains("hallpass-no-such-user") && warning.contains("nobody (uid 65534)"))
        guard case .missing(_, let packageWarning) = DataUser.lookUp("_hallpass-missing-here") else { return }
        #expect(packageWarning.contains("queue.user: nobody"))
    }

    @Test func rootIsRefusedByItsNumber() {
        // Configuration refuses the name; whatever name has uid 0 is refused at the lookup.
        guard case .privileged(let message) = DataUser.lookUp("root") else {
            Issue.record("root was not refused")
            return
        }
        #expect(message.contains("never runs as root"))
    }

    // MARK: the block page's ports

    @Test func theBlockPageIsOnPort80ByDefaultAndItsLinkHasNoPort() throws {
        let configuration = try Configuration(yaml: "")
        #expect(configuration.blockPage.port == 80 && configuration.blockPage.httpPort == 80 && configuration.blockPage.httpsPort == 443)
        #expect(configuration.blockPage.pageURL(unprivilegedPortStart: 1024) == "http://127.0.0.1/")
        let moved = try Configuration(yaml: "blockPage:\n  address: 127.0.0.9\n  port: 81\n")
        #expect(moved.blockPage.pagePort(unprivilegedPortStart: 1024) == 81)
        #expect(moved.blockPage.pageURL(unprivilegedPortStart: 1024) == "http://127.0.0.9:81/")
        #expect(try Configuration(yaml: Configuration.example).blockPage.port == 80)
        #expect(try Configuration(yaml: Configuration.example).unprivilegedPortProblems(unprivilegedPortStart: 1024).isEmpty)
        #expect(configuration.unprivilegedPortProblems(unprivilegedPortStart: 1024).isEmpty)
    }

    /// The example of 0.1.0, which schools edited (a conffile, kept by dpkg on upgrade) with its
    /// `port: 8080`: it must still be read, or an upgraded machine has no filter-control and no filter.
    static let exampleOf010 = Configuration.example.replacingOccurrences(of: "\n  port: 80\n", with: "\n  port: 8080\n")

    @Test func parsingIsPureAndAcceptsAPortALocalUserCouldTake() throws {
        #expect(Self.exampleOf010 != Configuration.example)
        let configuration = try Configuration(yaml: Self.exampleOf010)
        #expect(configuration.blockPage.port == 8080)
        #expect(try Configuration(yaml: "blockPage:\n  port: 8080\n  httpsPort: 8443\n").blockPage.httpsPort == 8443)
    }

    @Test func theExampleOf010HasOneProblemAndServesItsPageOnPort80() throws {
        let configuration = try Configuration(yaml: Self.exampleOf010)
        let line = try #require(Self.exampleOf010.split(separator: "\n", omittingEmptySubsequences: false).firstIndex { $0 == "  port: 8080" }) + 1
        let problems = configuration.unprivilegedPortProblems(unprivilegedPortStart: 1024)
        #expect(problems.map(\.key) == ["blockPage.port"])
        #expect(problems.first?.line == line, "\(problems)")
        #expect(problems.first?.description.hasPrefix("configuration key blockPage.port (line \(line)): port 8080") == true, "\(problems)")
        #expect(problems.first?.message.contains("does not listen on it and serves the page's own address on httpPort (80), http://127.0.0.1/") == true)
        #expect(configuration.blockPage.pagePort(unprivilegedPortStart: 1024) == 80)
        #expect(configuration.blockPage.pageURL(unprivilegedPortStart: 1024) == "http://127.0.0.1/")
    }

    @Test(arguments: [
        ("blockPage:\n  port: 8080\n", "blockPage.port", 2),
        ("policy:\n  block: all\nblockPage:\n  organization: x\n  httpPort: 8081\n", "blockPage.httpPort", 5),
        ("blockPage:\n  httpsPort: 8443\n", "blockPage.httpsPort", 2),
        ("blockPage:\n  port: 1024\n", "blockPage.port", 2),
    ])
    func aPortAnyLocalUserMayTakeIsAProblemWithItsKeyAndLine(yaml: String, key: String, line: Int) throws {
        let problems = try Configuration(yaml: yaml).unprivilegedPortProblems(unprivilegedPortStart: 1024)
        #expect(problems.count == 1, "\(problems)")
        #expect(problems.first?.key == key)
        #expect(problems.first?.line == line, "\(problems)")
        let message = problems.first?.message ?? ""
        #expect(message.contains("ip_unprivileged_port_start is 1024") && message.contains("below 1024"), "\(message)")
        #expect(message.contains(key == "blockPage.port" ? "serves the page's own address on httpPort (80)" : "serves the page there all the same"), "\(message)")
    }

    @Test func theMachinesBoundIsAParameter() throws {
        let defaults = try Configuration(yaml: "")
        // Linux's default: nothing of the defaults is anyone's.
        #expect(defaults.unprivilegedPortProblems(unprivilegedPortStart: 1024).isEmpty)
        // Ports from 100 up are anyone's: 80 is fine, 443 is not, nor the inspection proxy's 1023.
        #expect(defaults.unprivilegedPortProblems(unprivilegedPortStart: 100).map(\.key) == ["blockPage.httpsPort", "proxy.port"])
        #expect(try Configuration(yaml: "blockPage:\n  httpsPort: 99\nproxy:\n  port: 98\n").unprivilegedPortProblems(unprivilegedPortStart: 100).isEmpty)
        let proxy = try Configuration(yaml: "proxy:\n  port: 3129\n").unprivilegedPortProblems(unprivilegedPortStart: 1024)
        #expect(proxy.map(\.key) == ["proxy.port"] && proxy.first?.line == 2 && proxy.first?.message.contains("inspection proxy") == true, "\(proxy)")
        // From 80 up (rootless containers set this up): port and httpPort are one listener, named once;
        // without a line, since the file does not set them, and saying what to raise.
        let at80 = defaults.unprivilegedPortProblems(unprivilegedPortStart: 80)
        #expect(at80.map(\.key) == ["blockPage.httpPort", "blockPage.httpsPort", "proxy.port"], "\(at80)")
        #expect(at80.allSatisfy { $0.line == nil && $0.message.contains("is 80") && $0.message.contains("raise net.ipv4.ip_unprivileged_port_start") })
        #expect(defaults.blockPage.pageURL(unprivilegedPortStart: 80) == "http://127.0.0.1/")
        // Everything anyone's (a container's default): the 0.1.0 example names all three, the page
        // is still served on httpPort.
        let old = try Configuration(yaml: Self.exampleOf010)
        let at0 = old.unprivilegedPortProblems(unprivilegedPortStart: 0)
        #expect(at0.map(\.key) == ["blockPage.port", "blockPage.httpPort", "blockPage.httpsPort", "proxy.port"], "\(at0)")
        #expect(at0.allSatisfy { ($0.line != nil || $0.key == "proxy.port") && $0.message.contains("is 0") })
        #expect(old.blockPage.pagePort(unprivilegedPortStart: 0) == 80)
        // Without DNS rewriting httpPort and httpsPort are listened on only for the page itself.
        let drop = try Configuration(yaml: "policy:\n  blockedDNS: drop\nblockPage:\n  httpsPort: 8443\n")
        #expect(drop.unprivilegedPortProblems(unprivilegedPortStart: 1024).isEmpty)
        #expect(drop.unprivilegedPortProblems(unprivilegedPortStart: 0).map(\.key) == ["blockPage.httpPort", "proxy.port"])
    }

    @Test func theBoundIsReadFromProcAnd1024WhenItCannotBe() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-port-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try "0\n".write(toFile: folder + "/start", atomically: true, encoding: .utf8)
        #expect(Configuration.unprivilegedPortStart(file: folder + "/start") == 0)
        #expect(Configuration.unprivilegedPortStart(file: folder + "/missing") == 1024)
        try "junk\n".write(toFile: folder + "/start", atomically: true, encoding: .utf8)
        #expect(Configuration.unprivilegedPortStart(file: folder + "/start") == 1024)
        // This machine's (1024 unless someone changed it).
        #expect((0...65536).contains(Configuration.unprivilegedPortStart()))
    }

    @Test func thePagesOwnPortCannotBeTheHTTPSPort() {
        do {
            _ = try Configuration(yaml: "blockPage:\n  port: 443\n")
            Issue.record("accepted port 443 for the plain HTTP page")
        } catch {
            #expect(error.key == "blockPage.port" && error.line == 2, "\(error)")
        }
        #expect(throws: Never.self) { try Configuration(yaml: "policy:\n  blockedDNS: drop\nblockPage:\n  port: 443\n") }
    }
}
