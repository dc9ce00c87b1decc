@testable import FilterControl
import Foundation
import Testing

@Suite struct AuditConfigurationTests {
    @Test func theExampleParsesAndTheDefaultsAreAsDocumented() throws {
        let configuration = try Configuration(yaml: Configuration.example)
        #expect(configuration.log == AuditSettings())
        #expect(configuration.log.file == "/var/log/hallpass/audit.jsonl")
        #expect(configuration.log.journald && configuration.log.syslog == nil)
        #expect(configuration.log.users == .name && configuration.log.allowed == .none && configuration.log.retentionDays == 365)
        #expect(configuration.notify.enabled && configuration.notify.interval == 600)
        let uncommented = Configuration.example
            .replacingOccurrences(of: "  # syslog: tcp://", with: "  syslog: tcp://")
            .replacingOccurrences(of: "  syslog: none\n", with: "")
        #expect(try Configuration(yaml: uncommented).log.syslog == AuditSettings.SyslogTarget(transport: .tcp, host: "logs.school.example", port: 514))
    }

    @Test func theExamplesCommentedLogAndMetricsLinesAreValidOnceUncommented() throws {
        let text = Configuration.example
            .replacingOccurrences(of: "  # syslog: tcp://logs.school.example:514\n", with: "")
            .replacingOccurrences(of: "  syslog: none\n", with: "  syslog: tls://logs.school.example\n")
            .replacingOccurrences(of: "  # caFile: ", with: "  caFile: ")
            .replacingOccurrences(of: "  # pseudonymKey: ", with: "  pseudonymKey: ")
            .replacingOccurrences(of: "  # machine: ", with: "  machine: ")
            .replacingOccurrences(of: "# metrics:\n#   address: 127.0.0.1\n#   port: 9733\n", with: "metrics:\n  address: 127.0.0.1\n  port: 9733\n")
        let configuration = try Configuration(yaml: text)
        #expect(configuration.log.syslog == AuditSettings.SyslogTarget(transport: .tls, host: "logs.school.example", port: 6514))
        #expect(configuration.log.caFile == "/etc/hallpass/logs-ca.pem")
        #expect(configuration.log.pseudonymKey == "/etc/hallpass/pseudonym.key")
        #expect(configuration.log.machine == "lab2-pc07")
        #expect(configuration.metrics == Configuration.Metrics(address: "127.0.0.1", port: 9733))
    }

    /// Every key `log:`, `notify:` and `metrics:` take is in `filterctl config
    /// example` (set or commented) and named in README's configuration section.
    @Test func everyLogNotifyAndMetricsKeyIsInTheExampleAndTheREADME() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let start = try #require(readme.range(of: "\n## Configuration\n"), "README has no section '## Configuration'")
        let section = String(readme[start.upperBound...]).components(separatedBy: "\n## ").first ?? ""
        let example = Configuration.example
        /// The example from `first` to `end`, or to its end.
        func part(from first: String, to end: String? = nil) -> Substring {
            guard let from = example.range(of: first) else { return "" }
            let to = end.flatMap { example.range(of: $0, range: from.upperBound..<example.endIndex)?.lowerBound } ?? example.endIndex
            return example[from.lowerBound..<to]
        }
        // The keys the parser accepts (Configuration.swift: NoticeSettings and metrics read theirs inline).
        let sections: [(name: String, keys: [String], text: Substring)] = [
            ("log", AuditSettings.keys, part(from: "\nlog:\n", to: "\n# A desktop notice")),
            ("notify", ["enabled", "interval"], part(from: "\nnotify:\n", to: "\n# Prometheus")),
            ("metrics", ["address", "port"], part(from: "\n# metrics:\n")),
        ]
        for (name, keys, text) in sections {
            #expect(!text.isEmpty, "no \(name) section in the example")
            for key in keys {
                #expect(text.contains("  \(key): ") || text.contains("  # \(key): ") || text.contains("#   \(key): "), "\(name).\(key) is not in the example")
                #expect(section.contains("`\(name).\(key)`"), "\(name).\(key) is not named in README's configuration section")
            }
        }
    }

    @Test func everyKeyIsRead() throws {
        let configuration = try Configuration(
            yaml: """
                log:
                  file: none
                  maxFileSize: 1M
                  keepFiles: 3
                  retentionDays: 30
                  journald: false
                  syslog: tls://[2001:db8::5]
                  caFile: /etc/hallpass/logs-ca.pem
                  facility: authpriv
                  syslogBuffer: 500
                  users: pseudonym
                  allowed: all
                  pseudonymKey: /etc/hallpass/pseudonym.key
                  machine: lab2-pc07
                notify: false
                """)
        let log = configuration.log
        #expect(log.file == nil && log.maxFileBytes == 1 << 20 && log.keepFiles == 3 && log.retentionDays == 30 && !log.journald)
        #expect(log.syslog == AuditSettings.SyslogTarget(transport: .tls, host: "2001:db8::5", port: 6514))
        #expect(log.syslog?.description == "tls://[2001:db8::5]:6514")
        #expect(log.caFile == "/etc/hallpass/logs-ca.pem" && log.facility == .authpriv && log.syslogBuffer == 500)
        #expect(log.users == .pseudonym && log.allowed == .all && log.pseudonymKey == "/etc/hallpass/pseudonym.key" && log.machine == "lab2-pc07")
        #expect(!configuration.notify.enabled)
        #expect(try Configuration(yaml: "notify:\n  interval: 1h\n").notify.interval == 3600)
        #expect(AuditSettings().pseudonymKeyPath(rulesDirectory: "/var/lib/hallpass") == "/var/lib/hallpass/pseudonym.key")
    }

    @Test(arguments: [
        ("log:\n  file: relative.jsonl\n", "log.file"),
        ("log:\n  syslog: http://logs.example\n", "log.syslog"),
        ("log:\n  syslog: tcp://logs.example:99999\n", "log.syslog"),
        ("log:\n  users: initials\n", "log.users"),
        ("log:\n  allowed: some\n", "log.allowed"),
        ("log:\n  retentionDays: 0\n", "log.retentionDays"),
        ("log:\n  journald: maybe\n", "log.journald"),
        ("log:\n  maxFileSize: 10\n", "log.maxFileSize"),
        ("log:\n  syslog: tcp://logs.example\n  caFile: /etc/ca.pem\n", "log.caFile"),
        ("log:\n  facility: mail\n", "log.facility"),
        ("log:\n  colour: red\n", "log.colour"),
        ("log:\n  machine: ../etc\n", "log.machine"),
        ("notify:\n  interval: 1s\n", "notify.interval"),
        ("notify: sometimes\n", "notify"),
    ])
    func errorsNameTheKey(yaml: String, key: String) {
        do {
            _ = try Configuration(yaml: yaml)
            Issue.record("accepted \(yaml)")
        } catch {
            #expect(error.key == key, "\(error)")
        }
    }
}
