import FilterControl
import SharedStore
import Testing
import VerdictCore

@Suite struct ConfigurationTests {
    @Test func theExampleParsesToWhatItSays() throws {
        let configuration = try Configuration(yaml: Configuration.example)
        #expect(configuration.queue.number == 0)
        #expect(configuration.queue.failMode == .open)
        #expect(configuration.rules.source == "https://rules.example.org/hallpass/")
        #expect(configuration.rules.trustedKeys.count == 1)
        #expect(configuration.rules.refresh == 1800)
        #expect(configuration.rules.maxBundleBytes == 256 << 20)
        #expect(configuration.policy.blockedCategories == .only(["adult", "gambling"]))
        #expect(configuration.policy.allow == [try RulePattern("khanacademy.org")])
        #expect(configuration.policy.unknown == .allow)
        #expect(configuration.blockPage.organization == "Example School")
        #expect(configuration.blockPage.requestAccess?.url == "https://help.example.org/unblock?url={url}")
        #expect(configuration.admin.socket == "/run/hallpass/control.sock")
    }

    @Test func anEmptyFileGivesTheDefaults() throws {
        let configuration = try Configuration(yaml: "")
        #expect(configuration == Configuration())
        #expect(configuration.policy.blockedCategories == .all)
    }

    @Test(arguments: [
        ("policy:\n  unknown: maybe\n", "policy.unknown"),
        ("policy:\n  blok: [a]\n", "policy.blok"),
        ("queue:\n  failMode: sideways\n", "queue.failMode"),
        ("queue:\n  number: 70000\n", "queue.number"),
        ("rules:\n  source: http://rules.example.org/\n", "rules.source"),
        ("rules:\n  source: https://rules.example.org/x?y=1\n", "rules.source"),
        ("rules:\n  source: https://user@rules.example.org/\n", "rules.source"),
        ("rules:\n  maxBundleBytes: 1000\n", "rules.maxBundleBytes"),
        ("rules:\n  pins: [ \"sha256/!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\" ]\n", "rules.pins[0]"),
        ("rules:\n  trustedKeys: [ \"ed25519:short\" ]\n", "rules.trustedKeys[0]"),
        ("rules:\n  refresh: 5s\n", "rules.refresh"),
        ("rules:\n  directory: relative/path\n", "rules.directory"),
        ("policy:\n  allow: [ \"bad host\" ]\n", "policy.allow[0]"),
        ("policy:\n  block: [ \"Bad Category\" ]\n", "policy.block[0]"),
        ("blockPage:\n  requestAccess:\n    text: x\n", "blockPage.requestAccess"),
        ("blockPage:\n  address: not-an-ip\n", "blockPage.address"),
        ("surprise: 1\n", "surprise"),
    ])
    func errorsNameTheKey(yaml: String, key: String) {
        do {
            _ = try Configuration(yaml: yaml)
            Issue.record("accepted \(yaml)")
        } catch {
            #expect(error.key == key)
            #expect(error.description.contains(key))
        }
    }

    @Test func plainHTTPSourcesAreRefusedWithAReason() {
        #expect(throws: ConfigurationError.self) { try Configuration(yaml: "rules:\n  source: http://x.example/\n") }
        do {
            _ = try Configuration(yaml: "rules:\n  source: http://x.example/\n")
        } catch {
            #expect(error.message.contains("https://"))
            #expect(error.line == 2)
        }
    }

    @Test func blockAllAndNoLink() throws {
        let configuration = try Configuration(yaml: "policy:\n  block: all\n  noName: block\nblockPage:\n  requestAccess: null\n")
        #expect(configuration.policy.blockedCategories == .all)
        #expect(configuration.policy.noName == .block)
        #expect(configuration.blockPage.requestAccess == nil)
    }

    @Test func invalidYAMLIsAnError() {
        #expect(throws: ConfigurationError.self) { try Configuration(yaml: "policy: [unclosed\n") }
    }
}
