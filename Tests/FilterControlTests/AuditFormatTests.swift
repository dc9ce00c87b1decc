import FilterControl
import Foundation
import HallpassIPC
import Testing
import VerdictCore

/// A blocked HTTPS flow as filter-data reports it.
func sampleReport(kind: String = "tls", host: String? = "casino.example", path: String? = nil, uid: UInt32? = 1001,
                  verdict: Verdict = .drop) -> FlowReport {
    FlowReport(
        flow: FlowKey(protocolNumber: kind == "quic" || kind == "dns" ? 17 : 6, source: IPAddress("10.0.0.2")!, sourcePort: 40_000,
                      destination: IPAddress("192.0.2.7")!, destinationPort: 443),
        uid: uid, kind: kind, host: host, path: path, verdict: verdict,
        reason: Reason(source: .category, category: "gambling", rule: "casino.example"))
}

/// Its audit line as the tests write it (the documented example of docs/fleet.md).
func sampleRecord(time: Date = Date(timeIntervalSince1970: 1_740_820_502.25), user: String? = "alice") -> AuditLine {
    AuditLine(AuditRecord(report: sampleReport(), time: time, rulesVersion: 42), machine: "lab2-pc07", uid: 1001, user: user, group: "students")
}

@Suite struct AuditFormatTests {
    @Test func jsonLinesKeepTheListedNamesInOrderAndLeaveOutWhatIsAbsent() throws {
        let line = String(decoding: AuditFormat.jsonLine(sampleRecord()), as: UTF8.self)
        #expect(
            line
                == #"{"time":"2025-03-01T09:15:02.250Z","machine":"lab2-pc07","uid":1001,"user":"alice","group":"students","kind":"tls","host":"casino.example","destination":"192.0.2.7","port":443,"action":"block","category":"gambling","rule":"casino.example","reason":"category","rulesVersion":42}"#
                + "\n")
        let decoded = try JSONDecoder().decode(AuditLine.self, from: Data(line.utf8))
        #expect(decoded == sampleRecord())
    }

    @Test func jsonEscapesQuotesBackslashesAndControlCharacters() throws {
        // The URL is made of the report's host and path (plain HTTP only).
        let report = sampleReport(kind: "http", path: "/a\"b\\c\nd\u{1}")
        let record = AuditLine(AuditRecord(report: report, time: Date(timeIntervalSince1970: 0)), machine: "m", uid: nil, user: nil, group: nil)
        #expect(record[.url] == "http://casino.example/a\"b\\c\nd\u{1}" && record[.kind] == "http")
        let line = String(decoding: AuditFormat.jsonLine(record), as: UTF8.self)
        #expect(line.contains(#""url":"http://casino.example/a\"b\\c\nd\u0001""#))
        #expect(line.filter { $0 == "\n" }.count == 1, "one record, one line")
        #expect(try JSONDecoder().decode(AuditLine.self, from: Data(line.utf8))[.url] == record[.url])
    }

    /// The line's fields come from the report: an unknown kind is `other`, a verdict
    /// other than allow is `block`, no URL without plain HTTP, absent fields left out.
    @Test func theLineIsMadeFromTheReportsFields() {
        var report = sampleReport(kind: "gopher", host: nil, uid: nil, verdict: .needRules)
        report.reason = Reason(source: .noName)
        let line = AuditLine(AuditRecord(report: report, time: Date(timeIntervalSince1970: 0)), machine: "m", uid: nil, user: nil, group: nil)
        #expect(line.fields.map(\.key) == [.time, .machine, .kind, .destination, .port, .action, .reason])
        #expect(line[.kind] == "other" && line[.action] == "block" && line[.reason] == "no-name" && line[.destination] == "192.0.2.7")
        #expect(line.summary == "block other 192.0.2.7:443: no-name")
        let allowed = AuditLine(AuditRecord(report: sampleReport(path: "/x", verdict: .allow), time: Date()), machine: "m", uid: 7, user: nil, group: nil)
        #expect(allowed[.action] == "allow" && allowed[.url] == nil && allowed[.uid] == "7", "a TLS flow's path is never a URL")
    }

    /// A request the inspection proxy read: its HTTPS URL and its search term,
    /// after `url` in every output (`HALLPASS_SEARCH_TERM` in the journal).
    @Test func anInspectedRequestHasItsURLAndSearchTerm() throws {
        var report = sampleReport(kind: "https", host: "www.google.com", path: "/search?q=cute+cats", verdict: .allow)
        report.searchTerm = "cute cats"
        let line = AuditLine(AuditRecord(report: report, time: Date(timeIntervalSince1970: 0)), machine: "m", uid: nil, user: nil, group: nil)
        #expect(line[.kind] == "https" && line[.url] == "https://www.google.com/search?q=cute+cats" && line[.searchTerm] == "cute cats")
        let json = String(decoding: AuditFormat.jsonLine(line), as: UTF8.self)
        #expect(json.contains(#""url":"https://www.google.com/search?q=cute+cats","searchTerm":"cute cats","destination""#), "\(json)")
        #expect(try JSONDecoder().decode(AuditLine.self, from: Data(json.utf8)) == line)
        #expect(AuditFormat.journalFieldName(.searchTerm) == "HALLPASS_SEARCH_TERM")
        let server = String(decoding: AuditFormat.serverRecord(line, sequence: 3), as: UTF8.self)
        #expect(server.contains(#""searchTerm":"cute cats""#))
        // A TLS flow's record has neither.
        let tls = AuditLine(AuditRecord(report: sampleReport(), time: Date()), machine: "m", uid: nil, user: nil, group: nil)
        #expect(tls[.url] == nil && tls[.searchTerm] == nil)
    }

    @Test func linesThatAreNotRecordsAreRefused() {
        let good = String(decoding: AuditFormat.jsonLine(sampleRecord()), as: UTF8.self)
        #expect((try? JSONDecoder().decode(AuditLine.self, from: Data(good.utf8))) != nil)
        for bad in [good.replacingOccurrences(of: #""kind":"tls""#, with: #""kind":"smtp""#),
                    good.replacingOccurrences(of: #""action":"block""#, with: #""action":"drop""#),
                    good.replacingOccurrences(of: "2025-03-01T09:15:02.250Z", with: "yesterday"),
                    good.replacingOccurrences(of: #""port":443"#, with: #""port":"443""#),
                    good.replacingOccurrences(of: #","reason":"category""#, with: "")] {
            #expect((try? JSONDecoder().decode(AuditLine.self, from: Data(bad.utf8))) == nil, "\(bad)")
        }
    }

    @Test func timesAreUTCWithMilliseconds() {
        #expect(AuditTime.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(AuditTime.format(Date(timeIntervalSince1970: 1_740_820_502.999_9)) == "2025-03-01T09:15:02.999Z")
        #expect(AuditTime.parse("2025-03-01T09:15:02.250Z") == Date(timeIntervalSince1970: 1_740_820_502.25))
        #expect(AuditTime.parse("2025-03-01T09:15:02Z") == Date(timeIntervalSince1970: 1_740_820_502))
        #expect(AuditTime.parse("2025-03-01 09:15:02Z") == nil)
        #expect(AuditTime.parse("2025-13-01T09:15:02Z") == nil)
    }

    @Test func rfc5424MessagesCarryTheRecordAsStructuredData() {
        let message = String(decoding: AuditFormat.syslogMessage(sampleRecord(), facility: .local0, processID: 321), as: UTF8.self)
        // local0 (16) * 8 + notice (5) = 133.
        #expect(
            message
                == #"<133>1 2025-03-01T09:15:02.250Z lab2-pc07 hallpass 321 decision [hallpass@32473 uid="1001" user="alice" group="students" kind="tls" host="casino.example" destination="192.0.2.7" port="443" action="block" category="gambling" rule="casino.example" reason="category" rulesVersion="42"] block tls casino.example:443 (user alice, group students): category gambling, rule casino.example"#
        )
        var allowed = sampleRecord()
        allowed[.action] = "allow"
        #expect(String(decoding: AuditFormat.syslogMessage(allowed, facility: .authpriv, processID: 1), as: UTF8.self).hasPrefix("<86>1 "))
    }

    @Test func structuredDataValuesEscapeQuoteBackslashAndBracket() {
        var record = sampleRecord()
        record[.kind] = "http"
        record[.url] = #"http://x.example/"a"\b]c"#
        let message = String(decoding: AuditFormat.syslogMessage(record, facility: .local0, processID: 1), as: UTF8.self)
        #expect(message.contains(#"url="http://x.example/\"a\"\\b\]c""#))
        // The header's host name is printable ASCII only.
        record[.machine] = "lab pc"
        #expect(String(decoding: AuditFormat.syslogMessage(record, facility: .local0, processID: 1), as: UTF8.self).contains(" lab_pc hallpass "))
    }

    @Test func octetCountingPrefixesTheLengthInBytes() {
        #expect(AuditFormat.octetCounted(Array("héllo".utf8)) == Array("6 héllo".utf8))
    }

    @Test func journalDatagramsUseKeyValueLinesAndTheBinarySafeFormForNewlines() {
        var record = sampleRecord()
        record[.kind] = "http"
        record[.url] = "http://casino.example/two\nlines"
        let datagram = AuditFormat.journalDatagram(record)
        let text = String(decoding: datagram, as: UTF8.self)
        #expect(text.hasPrefix("MESSAGE=block http casino.example:443"))
        #expect(text.contains("\nHALLPASS_HOST=casino.example\n"))
        #expect(text.contains("\nHALLPASS_ACTION=block\n"))
        #expect(text.contains("\nHALLPASS_RULES_VERSION=42\n"))
        #expect(text.contains("\nPRIORITY=5\n"))
        // HALLPASS_URL\n, 31 as 64-bit little endian, the bytes, \n.
        let expected: [UInt8] = Array("\nHALLPASS_URL\n".utf8) + [31, 0, 0, 0, 0, 0, 0, 0] + Array("http://casino.example/two\nlines\n".utf8)
        #expect(datagram.firstRange(of: expected) != nil)
    }
}

@Suite struct PseudonymTests {
    @Test func pseudonymsAreStablePerKeyAndHideTheName() {
        let school = Pseudonyms(key: Array(repeating: 7, count: 32))
        let other = Pseudonyms(key: Array(repeating: 8, count: 32))
        let alice = school.pseudonym(for: "alice")
        #expect(alice == Pseudonyms(key: Array(repeating: 7, count: 32)).pseudonym(for: "alice"), "every machine with the key agrees")
        #expect(alice.hasPrefix("p-") && alice.count == 22 && !alice.contains("alice"))
        #expect(alice != school.pseudonym(for: "bob"))
        #expect(alice != other.pseudonym(for: "alice"), "another school's key gives another pseudonym")
    }

    @Test func usersNameKeepsNameAndUidPseudonymAndNoneHideBoth() {
        let decision = AuditRecord(report: sampleReport(kind: "quic"), time: Date(timeIntervalSince1970: 0), rulesVersion: 3)
        let pseudonyms = Pseudonyms(key: Array(repeating: 1, count: 32))
        let person: (user: String?, group: String?) = ("alice", "students")
        let named = AuditLineMaker(machine: "m", users: .name, pseudonyms: nil).line(decision, person: person)
        #expect(named[.user] == "alice" && named[.uid] == "1001" && named[.group] == "students")
        let hidden = AuditLineMaker(machine: "m", users: .pseudonym, pseudonyms: pseudonyms).line(decision, person: person)
        #expect(hidden[.user] == pseudonyms.pseudonym(for: "alice") && hidden[.uid] == nil && hidden[.group] == "students")
        let none = AuditLineMaker(machine: "m", users: .none, pseudonyms: nil).line(decision, person: person)
        #expect(none[.user] == nil && none[.uid] == nil && none[.group] == "students")
        // Without a name, the pseudonym is the uid's.
        let unnamed = AuditLineMaker(machine: "m", users: .pseudonym, pseudonyms: pseudonyms).line(decision, person: (nil, nil))
        #expect(unnamed[.user] == pseudonyms.pseudonym(for: "uid 1001"))
        for record in [hidden, none] {
            let line = String(decoding: AuditFormat.jsonLine(record), as: UTF8.self)
            let message = String(decoding: AuditFormat.syslogMessage(record, facility: .local0, processID: 1), as: UTF8.self)
            let journal = String(decoding: AuditFormat.journalDatagram(record), as: UTF8.self)
            for text in [line, message, journal] {
                #expect(!text.contains("alice") && !text.contains("1001"), "\(text)")
            }
        }
    }

    @Test func theKeyIsMadeOnceWithMode0600AndAReadableKeyIsRefused() throws {
        let folder = try Filterctl.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/pseudonym.key"
        #expect(throws: Pseudonyms.KeyError.self) { try Pseudonyms.loadKey(path: path, create: false) }
        let key = try Pseudonyms.loadKey(path: path, create: true)
        #expect(key.count == 32)
        #expect(try Pseudonyms.loadKey(path: path, create: true) == key, "made once, then read")
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        chmod(path, 0o644)
        #expect(throws: Pseudonyms.KeyError.self) { try Pseudonyms.loadKey(path: path, create: false) }
    }
}
