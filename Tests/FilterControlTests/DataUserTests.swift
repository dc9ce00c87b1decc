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
        let configuration = try Configuration(yaml: "", unprivilegedPortStart: 1024)
        #expect(configuration.blockPage.port == 80 && configuration.blockPage.httpPort == 80 && configuration.blockPage.httpsPort == 443)
        #expect(configuration.blockPage.pageURL == "http://127.0.0.1/")
        let moved = try Configuration(yaml: "blockPage:\n  address: 127.0.0.9\n  port: 81\n", unprivilegedPortStart: 1024)
        #expect(moved.blockPage.pageURL == "http://127.0.0.9:81/")
        #expect(try Configuration(yaml: Configuration.example, unprivilegedPortStart: 1024).blockPage.port == 80)
    }

    @Test(arguments: [
        ("blockPage:\n  port: 8080\n", "blockPage.port", 2),
        ("policy:\n  block: all\nblockPage:\n  organization: x\n  httpPort: 8081\n", "blockPage.httpPort", 5),
        ("blockPage:\n  httpsPort: 8443\n", "blockPage.httpsPort", 2),
        ("blockPage:\n  port: 1024\n", "blockPage.port", 2),
    ])
    func aPortAnyLocalUserMayTakeIsRefused(yaml: String, key: String, line: Int) {
        do {
            _ = try Configuration(yaml: yaml, unprivilegedPortStart: 1024)
            Issue.record("accepted \(yaml)")
        } catch {
            #expect(error.key == key)
            #expect(error.line == line, "\(error)")
            #expect(error.message.contains("ip_unprivileged_port_start is 1024") && error.message.contains("below 1024"), "\(error)")
        }
    }

    @Test func theMachinesOwnBoundDecides() throws {
        // A machine where ports from 100 up are anyone's: 80 is still fine, 443 is not.
        #expect(throws: ConfigurationError.self) { try Configuration(yaml: "", unprivilegedPortStart: 100) }
        #expect(try Configuration(yaml: "blockPage:\n  httpsPort: 99\n", unprivilegedPortStart: 100).blockPage.httpsPort == 99)
        // Where nothing is privileged, no port will do, and the error says what to raise.
        do {
            _ = try Configuration(yaml: "", unprivilegedPortStart: 0)
            Issue.record("accepted port 80 with every port unprivileged")
        } catch {
            #expect(error.key == "blockPage.port" && error.message.contains("ip_unprivileged_port_start is 0"))
        }
        // Without DNS rewriting only the page's own port is listened on, so only it counts.
        #expect(try Configuration(yaml: "policy:\n  blockedDNS: drop\nblockPage:\n  httpsPort: 8443\n", unprivilegedPortStart: 1024).blockPage.httpsPort == 8443)
        // This machine's bound, read from /proc (1024 unless someone changed it).
        #expect(Configuration.unprivilegedPortStart >= 0 && Configuration.unprivilegedPortStart <= 65536)
    }

    @Test func thePagesOwnPortCannotBeTheHTTPSPort() {
        #expect(throws: ConfigurationError.self) { try Configuration(yaml: "blockPage:\n  port: 443\n", unprivilegedPortStart: 1024) }
    }
}
