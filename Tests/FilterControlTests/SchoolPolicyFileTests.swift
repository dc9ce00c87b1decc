@testable import FilterControl
import Foundation
import Testing
import VerdictCore

@Suite struct SchoolPolicyFileTests {
    static var example: String {
        get throws {
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            return try String(contentsOf: root.appendingPathComponent("docs/examples/school-policy.yaml"), encoding: .utf8)
        }
    }

    @Test func theDocumentedExampleParsesAsDescribed() throws {
        let school = try SchoolPolicy(yaml: Self.example)
        #expect(school.timeZone == "Europe/London" && school.overrides == .allow && school.systemUsers == nil)
        #expect(school.groups.map(\.name) == ["staff", "year7", "students"], "in the order written")
        #expect(school.groups[0].members.unixGroups == ["staff", "teachers"] && school.groups[0].examExempt)
        #expect(school.groups[2].members.uids == [10_000...19_999])
        #expect(school.schedules["lessons"]?.times == [try TimeRange("08:40-12:10"), try TimeRange("13:05-15:30")])
        #expect(school.topLevel.keys.block == .only(["adult", "gambling", "malware", "phishing", "dating"]))
        #expect(school.groups[1].policy.keys.unknown == .block && school.groups[1].policy.during.map(\.schedule) == ["lessons"])
        #expect(school.groups[2].policy.during.map(\.schedule) == ["lessons", "lunch"])
        #expect(school.exam?.groups == ["students", "year7"] && school.exam?.during == ["mocks"])
        #expect(school.exam?.allow.map(\.description) == ["exams.lakeside.example", "=moodle.lakeside.example"])
        #expect(school.locked == ["adult"] && school.live == nil)
        #expect(school.safeguarding.schoolRules.map(\.id) == ["year7-games", "counselling-forum", "bypass-attempts"])
        // A Wednesday mock: students are in the exam, staff are not.
        let moment = PolicyMoment(time: LocalTime(weekday: .wednesday, hour: 9, minute: 30), now: 0)
        #expect(school.effectivePolicy(for: .group("students"), at: moment).exam != nil)
        #expect(school.effectivePolicy(for: .group("staff"), at: moment).exam == nil)
        // SafeSearch and the bypass keys: set at the top, inherited, replaced per group.
        let students = school.effectivePolicy(for: .group("students"), at: moment).policy.bypass
        #expect(students.safeSearch == [.google, .youtubeStrict, .bing, .duckduckgo] && students.tunnels == .block)
        let staff = school.effectivePolicy(for: .group("staff"), at: moment).policy.bypass
        #expect(staff.safeSearch.isEmpty && staff.tunnels == .allow && staff.encryptedDNS == .block && staff.quic == .allow)
        #expect(students.proxies == [ProxyEndpoint("10.20.0.8:3128")!] && staff.proxies == students.proxies, "inherited")
        #expect(students.ssh == .block && staff.ssh == .allow)
        #expect(students.sshServers == [ProxyEndpoint("10.20.0.22:22")!] && staff.sshServers == students.sshServers, "inherited")
    }

    @Test func bypassKeysAreCheckedByName() {
        for (text, key) in [
            ("policy:\n  bypass: { vpn: block }\n", "policy.bypass"),
            ("policy:\n  bypass: { tunnels: maybe }\n", "policy.bypass.tunnels"),
            ("policy:\n  bypass: { proxy: [ proxy.school.example:3128 ] }\n", "policy.bypass.proxy[0]"),
            ("policy:\n  bypass: { proxy: 10.0.0.8:99999 }\n", "policy.bypass.proxy"),
            ("policy:\n  bypass: { ssh: sometimes }\n", "policy.bypass.ssh"),
            ("policy:\n  bypass: { sshServers: [ shell.school.example ] }\n", "policy.bypass.sshServers[0]"),
            ("policy:\n  safeSearch: [altavista]\n", "policy.safeSearch[0]"),
            ("policy:\n  safeSearch: [youtube-strict, youtube-moderate]\n", "policy.safeSearch"),
        ] {
            do {
                _ = try SchoolPolicy(yaml: text)
                Issue.record("accepted: \(text)")
            } catch {
                #expect(error.key.hasPrefix(key), "\(error)")
            }
        }
    }

    @Test func anEmptyFileIsTheDefaultPolicy() throws {
        #expect(try SchoolPolicy(yaml: "") == SchoolPolicy())
    }

    @Test(arguments: [
        ("colour: blue\n", "colour", 1),
        ("groups:\n  staff: {}\n", "groups.staff", 2),
        ("groups:\n  staff: { uids: [\"20-10\"] }\n", "groups.staff.uids[0]", 2),
        ("groups:\n  staff: { unixGroups: [staff] }\n  staff: { users: [a] }\n", "", 2),
        ("groups:\n  \"bad name\": { users: [a] }\n", "groups.bad name", 2),
        ("policy:\n  groups:\n    teachers: { block: [adult] }\n", "policy.groups.teachers", 3),
        ("schedules:\n  lessons: { days: [mon], times: [\"8:40-12:10\"] }\n", "schedules.lessons.times[0]", 2),
        ("schedules:\n  lessons: { days: [monday], times: [\"08:40-12:10\"] }\n", "schedules.lessons.days[0]", 2),
        ("schedules:\n  lessons: { days: [mon] }\n", "schedules.lessons", 2),
        ("policy:\n  during:\n    lunch: { block: [adult] }\n", "policy.during.lunch", 3),
        ("policy:\n  block: [\"Bad Category!\"]\n", "policy.block[0]", 2),
        ("policy:\n  groups: {}\n  unknown: maybe\n", "policy.unknown", 3),
        ("groups:\n  staff: { users: [a] }\npolicy:\n  groups:\n    staff: { exam: yes }\n", "policy.groups.staff.exam", 5),
        ("exam:\n  groups: [teachers]\n", "exam.groups[0]", 2),
        ("exam:\n  during: [finals]\n", "exam.during[0]", 2),
        ("exam:\n  allow: [\"not a pattern\"]\n", "exam.allow[0]", 2),
        ("systemUsers: robots\n", "systemUsers", 1),
        ("timezone: Mars/Olympus\n", "timezone", 1),
        ("overrides: sometimes\n", "overrides", 1),
    ])
    func errorsNameTheKeyAndTheLine(text: String, key: String, line: Int) {
        do {
            _ = try SchoolPolicy(yaml: text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.key == key, "\(error)")
            // Yams counts lines from 1.
            #expect(error.line == line, "\(error)")
        }
    }

    @Test func notYAMLAtAllIsAClearError() {
        #expect(throws: ConfigurationError.self) { try SchoolPolicy(yaml: "groups: [unclosed\n") }
        #expect(throws: ConfigurationError.self) { try SchoolPolicy(yaml: String(repeating: "#", count: SchoolPolicy.maximumFileBytes + 1)) }
    }
}
