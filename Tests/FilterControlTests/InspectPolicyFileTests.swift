// The `inspect:` keys of the school's policy file (docs/inspection.md):
// a good file read as written, and every mistake an error naming its key and line.
@testable import FilterControl
import Testing
import VerdictCore

@Suite struct InspectPolicyFileTests {
    static let good = """
        groups:
          staff:    { unixGroups: [staff] }
          students: { unixGroups: [students] }
          guests:   { unixGroups: [guests] }
        policy:
          block: [adult, video]
          inspect:
            hosts: [youtube.com, youtu.be, "=www.google.com", "*.example.org"]
            urls: true
            youtube:
              allowVideos: [dQw4w9WgXcQ]
              blockVideos: [aaaaaaaaaaa]
              allowChannels: ["@MathsClass", UCbbbbbbbbbbbbbbbbbbbbbb]
              blockChannels: ["@badchannel"]
            searchTerms: capture
            headers:
              youtubeRestrict: strict
              googleAllowedDomains: [School.Example]
              microsoftTenants: { allow: [school.example, school.onmicrosoft.com], context: 72F988BF-86F1-41AF-91AB-2D7CD011DB47 }
            neverInspect: [school-bank.example]
            inspectAnyway: [dl.google.com]
          groups:
            staff:
              block: [adult]
              inspect: { hosts: [google.com], searchTerms: false }
            guests:
              inspect: none
        """

    @Test func aGoodFileReadsAsWritten() throws {
        let school = try SchoolPolicy(yaml: Self.good)
        let top = school.inspection(for: .ungrouped)
        #expect(top.hosts.map(\.description) == ["youtube.com", "youtu.be", "=www.google.com", "*.example.org"])
        #expect(top.urls && top.searchTerms)
        #expect(top.youtube == YouTubeLists(allowVideos: ["dQw4w9WgXcQ"], blockVideos: ["aaaaaaaaaaa"], allowChannels: ["@mathsclass", "UCbbbbbbbbbbbbbbbbbbbbbb"], blockChannels: ["@badchannel"]))
        #expect(top.headers.youtubeRestrict == .strict && top.headers.googleAllowedDomains == ["school.example"])
        #expect(top.headers.microsoftTenants == RestrictHeaders.MicrosoftTenants(allow: ["school.example", "school.onmicrosoft.com"], context: "72f988bf-86f1-41af-91ab-2d7cd011db47"))
        #expect(top.neverInspect.map(\.description) == ["school-bank.example"] && top.inspectAnyway == ["dl.google.com"])
        // A group's keys replace the top level's one by one; the others are inherited.
        let staff = school.inspection(for: .group("staff"))
        #expect(staff.hosts.map(\.description) == ["google.com"] && !staff.searchTerms)
        #expect(staff.youtube == top.youtube && staff.headers == top.headers && staff.neverInspect == top.neverInspect)
        #expect(school.inspection(for: .group("students")) == top)
        let guests = school.inspectionPlan(for: .group("guests"))
        let youtube = try HostName("www.youtube.com")
        #expect(!guests.inspectsAnything && guests.choice(for: youtube) == .splice(.notInspected))
        let plan = school.inspectionPlan(for: .group("students"))
        #expect(plan.choice(for: try HostName("dl.google.com")) == .inspect, "removed from the list, and the Google header rule covers it")
        #expect(school.inspectionPlan(for: .group("staff")).choice(for: try HostName("dl.google.com")) == .inspect)
        #expect(plan.choice(for: try HostName("login.microsoftonline.com")) == .inspect)
    }

    @Test func defaultsAndSpellings() throws {
        let school = try SchoolPolicy(yaml: "policy:\n  inspect:\n    hosts: [news.example]\n    searchTerms: yes\n")
        let policy = school.inspection(for: .ungrouped)
        #expect(policy.urls && policy.searchTerms && policy.youtube.isEmpty && policy.headers.isEmpty)
        #expect(try SchoolPolicy(yaml: "policy:\n  inspect:\n").inspection(for: .ungrouped) == InspectionPolicy())
        #expect(try SchoolPolicy(yaml: "policy:\n  inspect: { searchTerms: off }\n").inspection(for: .ungrouped).searchTerms == false)
        #expect(try SchoolPolicy(yaml: "").inspection(for: .ungrouped) == InspectionPolicy())
    }

    @Test(arguments: [
        ("policy:\n  inspect: everything\n", "policy.inspect", 2),
        ("policy:\n  inspect:\n    host: [youtube.com]\n", "policy.inspect.host", 3),
        ("policy:\n  inspect:\n    hosts: [youtube.com/watch]\n", "policy.inspect.hosts[0]", 3),
        ("policy:\n  inspect:\n    hosts: [192.0.2.0/24]\n", "policy.inspect.hosts[0]", 3),
        ("policy:\n  inspect:\n    hosts: [\"bad name!\"]\n", "policy.inspect.hosts[0]", 3),
        ("policy:\n  inspect:\n    hosts: [com]\n", "policy.inspect.hosts[0]", 3),
        ("policy:\n  inspect:\n    hosts:\n      - youtube.com\n      - paypal.com\n", "policy.inspect.hosts[1]", 5),
        ("policy:\n  inspect:\n    hosts: [bank.example]\n    neverInspect: [bank.example]\n", "policy.inspect.hosts[0]", 3),
        ("policy:\n  inspect:\n    urls: sometimes\n", "policy.inspect.urls", 3),
        ("policy:\n  inspect:\n    searchTerms: store\n", "policy.inspect.searchTerms", 3),
        ("policy:\n  inspect:\n    youtube: { allowVideos: [dQw4w9WgXc] }\n", "policy.inspect.youtube.allowVideos[0]", 3),
        ("policy:\n  inspect:\n    youtube:\n      blockVideos: [\"dQw4w9WgXc!\"]\n", "policy.inspect.youtube.blockVideos[0]", 4),
        ("policy:\n  inspect:\n    youtube: { allowChannels: [mathsclass] }\n", "policy.inspect.youtube.allowChannels[0]", 3),
        ("policy:\n  inspect:\n    youtube: { blockChannels: [UCshort] }\n", "policy.inspect.youtube.blockChannels[0]", 3),
        ("policy:\n  inspect:\n    youtube: { allowVideos: [dQw4w9WgXcQ], blockVideos: [dQw4w9WgXcQ] }\n", "policy.inspect.youtube.blockVideos", 3),
        ("policy:\n  inspect:\n    youtube: { allowChannels: [\"@a_b\"], blockChannels: [\"@A_B\"] }\n", "policy.inspect.youtube.blockChannels", 3),
        ("policy:\n  inspect:\n    youtube: { channels: [] }\n", "policy.inspect.youtube.channels", 3),
        ("policy:\n  inspect:\n    headers: { youtubeRestrict: strictest }\n", "policy.inspect.headers.youtubeRestrict", 3),
        ("policy:\n  inspect:\n    headers: { googleAllowedDomains: [] }\n", "policy.inspect.headers.googleAllowedDomains", 3),
        ("policy:\n  inspect:\n    headers: { googleAllowedDomains: [\"school example\"] }\n", "policy.inspect.headers.googleAllowedDomains[0]", 3),
        ("policy:\n  inspect:\n    headers:\n      microsoftTenants: { allow: [school.example] }\n", "policy.inspect.headers.microsoftTenants", 4),
        ("policy:\n  inspect:\n    headers:\n      microsoftTenants: { allow: [school.example], context: school.example }\n",
         "policy.inspect.headers.microsoftTenants.context", 4),
        ("policy:\n  inspect:\n    headers:\n      microsoftTenants: { allow: [], context: 72f988bf-86f1-41af-91ab-2d7cd011db47 }\n",
         "policy.inspect.headers.microsoftTenants.allow", 4),
        ("policy:\n  inspect:\n    headers: { xFrameOptions: deny }\n", "policy.inspect.headers.xFrameOptions", 3),
        ("policy:\n  inspect:\n    headers: { youtubeRestrict: strict }\n    neverInspect: [youtube.com]\n", "policy.inspect.headers", 3),
        ("policy:\n  inspect:\n    neverInspect: [10.0.0.0/8]\n", "policy.inspect.neverInspect[0]", 3),
        ("policy:\n  inspect:\n    inspectAnyway: [paypal.com, \"*.paypal.com\"]\n", "policy.inspect.inspectAnyway[1]", 3),
        ("policy:\n  inspect:\n    inspectAnyway: [rr1.googlevideo.com]\n", "policy.inspect.inspectAnyway[0]", 3),
        ("policy:\n  inspect:\n    inspectAnyway: [update.microsoft.com]\n", "policy.inspect.inspectAnyway[0]", 3),
        ("policy:\n  during:\n    lessons: { inspect: { hosts: [youtube.com] } }\nschedules:\n  lessons: { days: [mon], times: [\"09:00-10:00\"] }\n",
         "policy.during.lessons.inspect", 3),
        ("groups:\n  staff: { users: [a] }\npolicy:\n  groups:\n    staff:\n      inspect: { hosts: [nhs.uk] }\n", "policy.groups.staff.inspect.hosts[0]", 6),
    ])
    func errorsNameTheKeyAndTheLine(text: String, key: String, line: Int) {
        do {
            _ = try SchoolPolicy(yaml: text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.key == key, "\(error)")
            #expect(error.line == line, "\(error)")
        }
    }

    @Test func anEntryNotOnTheListIsNamedWithTheEntryThatCoversIt() {
        do {
            _ = try SchoolPolicy(yaml: "policy:\n  inspect:\n    inspectAnyway: [rr1.googlevideo.com]\n")
            Issue.record("accepted")
        } catch {
            #expect(error.description.contains("'rr1.googlevideo.com' is not an entry") && error.description.contains("'googlevideo.com' of group media"), "\(error)")
        }
        do {
            _ = try SchoolPolicy(yaml: "policy:\n  inspect:\n    hosts: [paypal.com]\n")
            Issue.record("accepted")
        } catch {
            #expect(error.description.contains("group banking") && error.description.contains("inspectAnyway"), "\(error)")
        }
    }

    /// hallpass.yaml's own `policy:` has no `inspect:` (the school's file decides what is inspected).
    @Test func theMachinesConfigurationHasNoInspectKey() {
        #expect(!PolicyKeys.fieldNames.contains("inspect"))
    }
}
