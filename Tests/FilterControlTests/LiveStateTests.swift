import Crypto
@testable import FilterControl
import Foundation
import Logging
import SharedStore
import Synchronization
import Testing
import VerdictCore

/// The live channel's machine side: `locked:` and `live:` in the school's
/// policy, a live state's signature and checks, its items' bounds, the file
/// that keeps it, and the channel against a fake server.
@Suite struct LiveStateTests {
    static let key = Curve25519.Signing.PrivateKey()
    static var publicKey: String { "ed25519:" + Data(key.publicKey.rawRepresentation).base64EncodedString() }
    static let machine = "m-abcdefghij234567abcd"

    static var policyYAML: String {
        """
        groups:
          staff: { unixGroups: [staff] }
          year9: { unixGroups: [year9] }
          year10: { unixGroups: [year10] }
        locked: [adult, IWF]
        live:
          keys: ["\(publicKey)"]
          actions: [allow, block, focus, pause, exam]
          longest: 90m
          rooms: [lab1, lab2]
          groups: [year9]
        """
    }

    static func school() throws -> SchoolPolicy { try SchoolPolicy(yaml: policyYAML) }

    /// The bounds with a store look-up that puts `casino.example` (and below) in `adult`.
    static func bounds(_ school: SchoolPolicy) -> LiveBounds {
        LiveBounds(policy: school) { pattern in
            if case .domain(let host, _) = pattern, host.description == "casino.example" || host.description.hasSuffix(".casino.example") {
                return "adult"
            }
            return nil
        }
    }

    static func item(
        _ id: String, _ action: String = "allow", targets: [String] = ["example.org"], scope: (String, String) = ("room", "lab1"),
        from: Int64 = 1_000, until: Int64 = 3_000
    ) -> [String: Any] {
        [
            "id": id, "sequence": 1, "action": action, "targets": targets, "scope": ["kind": scope.0, "value": scope.1], "from": from,
            "until": until, "by": "Ada Lovelace", "reason": "lesson",
        ]
    }

    /// A signed envelope of a state with these fields.
    static func envelope(
        sequence: Int64, machine: String = LiveStateTests.machine, room: String = "lab1", issued: Int64 = 1_000, items: [[String: Any]],
        requests: [[String: Any]] = [], signer: Curve25519.Signing.PrivateKey = LiveStateTests.key, tamper: Bool = false
    ) throws -> [UInt8] {
        let payload = try JSONSerialization.data(
            withJSONObject: ["format": 1, "machine": machine, "room": room, "sequence": sequence, "issued": issued, "items": items, "requests": requests])
        var signature = try signer.signature(for: payload)
        if tamper { signature[0] ^= 1 }
        let envelope = [
            "payload": payload.base64EncodedString(), "signature": signature.base64EncodedString(),
            "key": "ed25519:" + Data(signer.publicKey.rawRepresentation).base64EncodedString(),
        ]
        return Array(try JSONSerialization.data(withJSONObject: envelope))
    }

    func verify(_ bytes: [UInt8], held: Int64? = 0, now: Int64 = 1_500) throws -> Result<LiveState, LiveState.Refusal> {
        LiveState.verify(bytes, policy: try Self.school().live, machine: Self.machine, held: held.map { LiveState.Order(issued: 1_000, sequence: $0) }, now: now)
    }

    func refusalCode(_ result: Result<LiveState, LiveState.Refusal>) -> String? {
        if case .failure(let refusal) = result { return refusal.code }
        return nil
    }

    // MARK: The policy's keys

    @Test func lockedAndLiveParse() throws {
        let school = try Self.school()
        #expect(school.locked == ["adult", "iwf"])
        let live = try #require(school.live)
        #expect(live.keys == [Array(Self.key.publicKey.rawRepresentation)])
        #expect(live.actions == Set(LiveAction.allCases) && live.longestSeconds == 5_400)
        #expect(live.rooms == ["lab1", "lab2"] && live.groups == ["year9"])
        // The defaults.
        let plain = try SchoolPolicy(yaml: "live:\n  keys: [\"\(Self.publicKey)\"]\n")
        #expect(plain.live == LivePolicy(keys: live.keys) && plain.locked.isEmpty)
        #expect(plain.live?.actions == [.allow, .block, .focus, .pause] && plain.live?.longestSeconds == 7_200 && plain.live?.rooms == nil)
        #expect(try SchoolPolicy(yaml: "").live == nil)
    }

    @Test func theSummariesShowLockedLiveAndFocus() throws {
        let school = try Self.school()
        let summary = PolicySummary.describe(school)
        #expect(summary.contains("  locked: adult, iwf\n"))
        #expect(summary.contains("  live: 1 key(s); actions allow, block, focus, pause, exam; longest 90 min; rooms lab1, lab2; groups year9"))
        #expect(PolicySummary.describe(SchoolPolicy()).contains("  live: none (no live item is accepted)"))
        let moment = PolicyMoment(
            time: LocalTime(weekday: .monday, minute: 600), now: 1_500,
            live: [LiveItem(id: "lr-1", sequence: 1, action: .pause, targets: [], scope: .everyone, from: 1_000, until: 1_764_345_600, by: "Ada")])
        let effective = PolicySummary.describe(school.effectivePolicy(for: .group("year9"), at: moment))
        #expect(effective.contains("  PAUSE in force (live), until ") && effective.contains("  live items: lr-1") && effective.contains("  locked (nothing opens): adult iwf"))
    }

    @Test(arguments: [
        ("live:\n  actions: [allow]\n", "live", 2),
        ("live:\n  keys: []\n", "live.keys", 2),
        ("live:\n  keys: [\"ed25519:short\"]\n", "live.keys[0]", 2),
        ("live:\n  keys: [\"KEY\"]\n  actions: [allow, teleport]\n", "live.actions[1]", 3),
        ("live:\n  keys: [\"KEY\"]\n  longest: 25h\n", "live.longest", 3),
        ("live:\n  keys: [\"KEY\"]\n  groups: [year12]\n", "live.groups[0]", 3),
        ("live:\n  keys: [\"KEY\"]\n  colour: blue\n", "live.colour", 3),
        ("locked: [\"Not A Category\"]\n", "locked[0]", 1),
    ])
    func liveErrorsNameTheKeyAndTheLine(text: String, key: String, line: Int) {
        do {
            _ = try SchoolPolicy(yaml: text.replacingOccurrences(of: "KEY", with: Self.publicKey))
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.key == key, "\(error)")
            #expect(error.line == line, "\(error)")
        }
    }

    // MARK: The state as a whole

    @Test func aSignedStateForThisMachineVerifies() throws {
        let state = try verify(try Self.envelope(sequence: 42, items: [Self.item("lr-1")])).get()
        #expect(state.sequence == 42 && state.room == "lab1" && state.items.map(\.id) == ["lr-1"])
        #expect(state.items[0].scope == LiveState.Item.Scope(kind: "room", value: "lab1") && state.items[0].by == "Ada Lovelace")
    }

    @Test func aStateIsRefusedWholeForItsSignatureMachineSequenceAndTime() throws {
        #expect(refusalCode(try verify(try Self.envelope(sequence: 42, items: [], tamper: true))) == "live.signature")
        #expect(refusalCode(try verify(try Self.envelope(sequence: 42, items: [], signer: Curve25519.Signing.PrivateKey()))) == "live.key")
        #expect(refusalCode(try verify(try Self.envelope(sequence: 42, machine: "m-other", items: []))) == "live.machine")
        #expect(refusalCode(try verify(try Self.envelope(sequence: 41, items: []), held: 42)) == "live.sequence", "older")
        #expect(refusalCode(try verify(try Self.envelope(sequence: 42, items: []), held: 42)) == "live.sequence", "a replay")
        // Ordered by the time issued first: the real server after a taken-over one that sent a huge
        // sequence (or after a restore from a backup) is followed again; an old state replayed is not.
        let rogueHeld = LiveState.Order(issued: 1_000, sequence: 1_000_000)
        let real = LiveState.verify(
            try Self.envelope(sequence: 5, issued: 1_200, items: []), policy: try Self.school().live, machine: Self.machine, held: rogueHeld,
            now: 1_500)
        #expect(refusalCode(real) == nil)
        let replayed = LiveState.verify(
            try Self.envelope(sequence: 50, issued: 900, items: []), policy: try Self.school().live, machine: Self.machine,
            held: LiveState.Order(issued: 1_000, sequence: 42), now: 1_500)
        #expect(refusalCode(replayed) == "live.sequence", "an older time, whatever its sequence")
        #expect(refusalCode(try verify(try Self.envelope(sequence: 43, issued: 1_500 + 301, items: []))) == "live.issued")
        // Negative numbers (a taken-over server's): the machine would send the sequence back as `after`.
        // Fails on the code before, which accepted both.
        #expect(refusalCode(try verify(try Self.envelope(sequence: -1, issued: 1_200, items: []), held: nil)) == "live.payload")
        #expect(refusalCode(try verify(try Self.envelope(sequence: 43, issued: -1, items: []), held: nil)) == "live.payload")
        #expect(refusalCode(try verify(try Self.envelope(sequence: 0, issued: 1_200, items: []), held: nil)) == nil)
        #expect(throws: Never.self) { try verify(try Self.envelope(sequence: 43, issued: 1_500 + 300, items: [])).get() }
        // Without live: nothing is accepted.
        let none = LiveState.verify(try Self.envelope(sequence: 1, items: []), policy: nil, machine: Self.machine, held: LiveState.Order(issued: 0, sequence: 0), now: 1_500)
        #expect(refusalCode(none) == "live.no-policy")
    }

    @Test func oversizeAndMalformedStatesAreRefusedNotFatal() throws {
        let big = Array(repeating: UInt8(ascii: " "), count: LiveState.maximumEnvelopeBytes + 1)
        #expect(refusalCode(try verify(big)) == "live.too-large")
        let items = (0...LiveState.maximumItems).map { Self.item("lr-\($0)") }
        #expect(refusalCode(try verify(try Self.envelope(sequence: 1, items: items))) == "live.payload")
        let manyTargets = Self.item("lr-1", targets: (0...LiveState.maximumTargets).map { "t\($0).example" })
        #expect(refusalCode(try verify(try Self.envelope(sequence: 1, items: [manyTargets]))) == "live.payload")
        let longTarget = Self.item("lr-1", targets: [String(repeating: "a", count: LiveState.maximumTargetLength + 1)])
        #expect(refusalCode(try verify(try Self.envelope(sequence: 1, items: [longTarget]))) == "live.payload")
        for junk in ["", "{}", "[]", "null", #"{"payload":"!!","signature":"","key":"ed25519:"}"#, String(repeating: "[", count: 10_000)] {
            #expect(refusalCode(try verify(Array(junk.utf8))) != nil, "\(junk.prefix(20))")
        }
    }

    // MARK: The items' bounds

    @Test func itemsOutsideTheBoundsAreRefusedAloneWithTheirReason() throws {
        let school = try Self.school()
        let state = try verify(
            try Self.envelope(
                sequence: 5,
                items: [
                    Self.item("ok"),
                    Self.item("locked", targets: ["example.org", "www.casino.example"]),
                    Self.item("focus-locked", "focus", targets: ["casino.example"]),
                    Self.item("block-locked", "block", targets: ["casino.example"]),
                    Self.item("long", from: 1_000, until: 1_000 + 5_401),
                    Self.item("ended", until: 1_500),
                    Self.item("other-room", scope: ("room", "lab3")),
                    Self.item("unlisted-group", scope: ("group", "year10")),
                    Self.item("unknown-group", scope: ("group", "year12")),
                    Self.item("group", scope: ("group", "year9")),
                    Self.item("user", scope: ("user", "ada")),
                    Self.item("teleport", "teleport"),
                    Self.item("pause-with-targets", "pause"),
                    Self.item("pause", "pause", targets: [], scope: ("everyone", "")),
                    Self.item("bad-target", targets: ["not a name"]),
                ])
        ).get()
        let outcome = Self.bounds(school).check(state, now: 1_500)
        #expect(outcome.accepted.map(\.id) == ["ok", "block-locked", "group", "user", "pause"])
        let codes = Dictionary(uniqueKeysWithValues: outcome.refused.map { ($0.item, $0.code) })
        #expect(codes["locked"] == "live.locked" && codes["focus-locked"] == "live.locked")
        #expect(codes["long"] == "live.duration" && codes["ended"] == "live.ended" && codes["other-room"] == "live.room")
        #expect(codes["unlisted-group"] == "live.group" && codes["unknown-group"] == "live.group" && codes["teleport"] == "live.action")
        #expect(codes["pause-with-targets"] == "live.target" && codes["bad-target"] == "live.target")
        let locked = try #require(outcome.refused.first { $0.item == "locked" })
        #expect(locked.target == "www.casino.example" && locked.category == "adult")
        #expect(outcome.accepted.first { $0.id == "user" }?.scope == .user("ada"))
        // An action the school does not allow.
        var narrower = school
        narrower.live?.actions = [.block]
        #expect(Self.bounds(narrower).check(state, now: 1_500).refused.contains { $0.item == "ok" && $0.code == "live.action" })
        // A room not in live.rooms.
        narrower = school
        narrower.live?.rooms = ["lab2"]
        #expect(Self.bounds(narrower).check(state, now: 1_500).refused.contains { $0.item == "ok" && $0.code == "live.room" })
    }

    @Test func anAllowOrFocusOfAWideNetworkIsRefused() throws {
        // Fails on the code before: the locked look-up judged only a network's first address,
        // so a focus on 0.0.0.0/0 (or any wide network) passed whatever it holds.
        let school = try Self.school()
        let state = try verify(
            try Self.envelope(
                sequence: 5,
                items: [
                    Self.item("everything", "focus", targets: ["0.0.0.0/0"]),
                    Self.item("v6", "allow", targets: ["2001:db8::/32"]),
                    Self.item("v4-16", "allow", targets: ["docs.example.org", "10.1.0.0/16"]),
                    Self.item("v4-24", "focus", targets: ["198.51.100.0/24"]),
                    Self.item("v6-48", "allow", targets: ["2001:db8:1::/48"]),
                    Self.item("host", "allow", targets: ["192.0.2.7"]),
                    Self.item("block-wide", "block", targets: ["0.0.0.0/0"]),
                ])
        ).get()
        let outcome = Self.bounds(school).check(state, now: 1_500)
        #expect(outcome.accepted.map(\.id) == ["v4-24", "v6-48", "host", "block-wide"], "blocking a wide network only closes")
        #expect(outcome.refused.map(\.item) == ["everything", "v6", "v4-16"] && outcome.refused.allSatisfy { $0.code == "live.target" })
        #expect(outcome.refused.first?.target == "0.0.0.0/0" && outcome.refused.first?.message.contains("wider than /24") == true)
    }

    @Test func aTargetThatWouldBreakThePolicyTextIsRefused() throws {
        // Fails on the code before: these parsed as URL prefixes, and their line breaks and '#'
        // reached filter-data's policy text (a line of the sender's choosing, or an entry cut short).
        let school = try Self.school()
        let injected = ["example.com/x\r\nunknown allow", "a.example/x\naudience person 4", "example.com/#", "example.com/a b"]
        let state = try verify(
            try Self.envelope(sequence: 5, items: injected.enumerated().map { Self.item("i\($0.offset)", "block", targets: [$0.element]) }))
            .get()
        let outcome = Self.bounds(school).check(state, now: 1_500)
        #expect(outcome.accepted.isEmpty && outcome.refused.count == injected.count && outcome.refused.allSatisfy { $0.code == "live.target" })
    }

    @Test func anItemCannotStartSoLateThatItNeverEnds() throws {
        // Fails on the code before: from and until near Int64.max passed (90 minutes long, ends
        // after now) and the item was in force for ever, as an item is in force from its arrival.
        let school = try Self.school()
        let state = try verify(
            try Self.envelope(
                sequence: 5,
                items: [
                    Self.item("for-ever", from: Int64.max - 60, until: Int64.max),
                    Self.item("next-week", from: 1_500 + 7 * 86_400, until: 1_500 + 7 * 86_400 + 600),
                    // The latest end accepted: live.longest (90 min) and the 5 minutes a server's clock may be ahead.
                    Self.item("latest", from: 1_500 + 300, until: 1_500 + 5_400 + 300),
                    Self.item("one-later", from: 1_500 + 301, until: 1_500 + 5_400 + 301),
                    Self.item("backwards", from: 2_000, until: 1_900),
                ])
        ).get()
        let outcome = Self.bounds(school).check(state, now: 1_500)
        #expect(outcome.accepted.map(\.id) == ["latest"])
        #expect(outcome.refused.map(\.item) == ["for-ever", "next-week", "one-later", "backwards"])
        #expect(outcome.refused.allSatisfy { $0.code == "live.duration" })
    }

    @Test func timesBeforeNineteenSeventyAreRefusedNotATrap() throws {
        // Fails on the code before: `until - from` overflowed for from = Int64.min and filter-control trapped.
        let school = try Self.school()
        let state = try verify(
            try Self.envelope(
                sequence: 5,
                items: [
                    Self.item("min", from: Int64.min, until: 3_000), Self.item("negative", from: -1, until: 3_000),
                    Self.item("both", from: Int64.min, until: Int64.min), Self.item("until", from: 1_000, until: -5),
                ])
        ).get()
        let outcome = Self.bounds(school).check(state, now: 1_500)
        #expect(outcome.accepted.isEmpty && outcome.refused.map(\.code) == Array(repeating: "live.duration", count: 4))
        #expect(outcome.refused.first?.message.contains("before 1970") == true)
    }

    @Test func anItemForEveryoneReachesOnlyTheRoomsOfLiveRooms() throws {
        // Fails on the code before: the everyone scope skipped live.rooms.
        let school = try Self.school()
        let inLab3 = try verify(try Self.envelope(sequence: 5, room: "lab3", items: [Self.item("all", "block", scope: ("everyone", ""))])).get()
        let refused = Self.bounds(school).check(inLab3, now: 1_500)
        #expect(refused.accepted.isEmpty && refused.refused.map(\.code) == ["live.room"])
        let inLab1 = try verify(try Self.envelope(sequence: 5, room: "lab1", items: [Self.item("all", "block", scope: ("everyone", ""))])).get()
        #expect(Self.bounds(school).check(inLab1, now: 1_500).accepted.map(\.id) == ["all"])
        var anyRoom = school
        anyRoom.live?.rooms = nil
        #expect(Self.bounds(anyRoom).check(inLab3, now: 1_500).accepted.map(\.id) == ["all"])
    }

    // MARK: Kept across restarts

    @Test func theStateHeldIsKeptAcrossAReloadAndItsItemsEndAtTheirTime() throws {
        let folder = try temporaryFolder()
        let path = folder + "/" + LiveStateStore.fileName
        let school = try Self.school()
        let bytes = try Self.envelope(sequence: 7, items: [Self.item("a", until: 2_000), Self.item("b", until: 3_000)])
        let state = try verify(bytes).get()
        let store = LiveStateStore(path: path)
        try store.accept(
            try JSONDecoder().decode(LiveState.Envelope.self, from: Data(bytes)), verified: state, outcome: Self.bounds(school).check(state, now: 1_500))
        #expect(store.items(inForceAt: 1_999).map(\.id) == ["a", "b"])
        #expect(store.items(inForceAt: 2_000).map(\.id) == ["b"], "an item ends at its until")
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)

        let reloaded = LiveStateStore(path: path)
        #expect(reloaded.sequence == 7 && reloaded.items(inForceAt: 1_500).isEmpty, "read back, not yet checked")
        #expect(reloaded.reevaluate(policy: school, bounds: Self.bounds(school), machine: Self.machine, now: 1_500) == nil)
        #expect(reloaded.items(inForceAt: 1_500).map(\.id) == ["a", "b"])
        // Restarted after one ended: it is over, not refused.
        #expect(reloaded.reevaluate(policy: school, bounds: Self.bounds(school), machine: Self.machine, now: 2_500) == nil)
        #expect(reloaded.held.items.map(\.id) == ["b"] && reloaded.held.refused.isEmpty)
        reloaded.reevaluate(policy: school, bounds: Self.bounds(school), machine: Self.machine, now: 1_500)
        // A policy without live: takes the items out of force; the sequence stays, so a replay is still refused.
        let without = SchoolPolicy()
        #expect(reloaded.reevaluate(policy: without, bounds: Self.bounds(without), machine: Self.machine, now: 1_500)?.code == "live.no-policy")
        #expect(reloaded.items(inForceAt: 1_500).isEmpty && reloaded.sequence == 7)
        // A file that does not read is moved aside.
        try Data("not json".utf8).write(to: URL(fileURLWithPath: path))
        #expect(LiveStateStore(path: path).sequence == 0)
    }

    // MARK: The channel

    @Test func theChannelAppliesAStateAndRefusesAReplay() async throws {
        let folder = try temporaryFolder()
        let server = FakeLiveServer()
        let applied = Mutex(0)
        let reported = Mutex<[LiveChannel.RefusalReport]>([])
        let school = try Self.school()
        let channel = LiveChannel(
            transport: server, store: LiveStateStore(path: folder + "/" + LiveStateStore.fileName), machine: Self.machine,
            context: { LiveChannel.Context(policy: school, lockedCategory: Self.bounds(school).lockedCategory) },
            applied: { applied.withLock { $0 += 1 } }, report: { reports in reported.withLock { $0 += reports } },
            clock: { Date(timeIntervalSince1970: 1_500) }, logger: Logger(label: "test"))

        server.answer(200, try Self.envelope(sequence: 42, items: [Self.item("a"), Self.item("b", scope: ("room", "lab3"))]))
        #expect(await channel.poll() == .applied(sequence: 42, accepted: 1, refused: 1))
        #expect(server.requests.last == #"{"after":0,"wait":25}"#)
        #expect(applied.withLock { $0 } == 1 && channel.store.items(inForceAt: 1_500).map(\.id) == ["a"])
        #expect(reported.withLock { $0 }.map(\.item) == ["b"] && reported.withLock { $0 }.first?.code == "live.room")

        // The same state again: nothing to do; an older one: refused and reported, the state held stays.
        #expect(await channel.poll() == .unchanged)
        #expect(server.requests.last == #"{"after":42,"wait":25}"#)
        server.answer(200, try Self.envelope(sequence: 41, items: [Self.item("old")]))
        guard case .refused(let refusal) = await channel.poll() else {
            Issue.record("an older state was not refused")
            return
        }
        #expect(refusal.code == "live.sequence" && channel.store.sequence == 42 && applied.withLock { $0 } == 1)
        #expect(reported.withLock { $0 }.last?.code == "live.sequence" && channel.status.statesRefused == 1)
        // Older only by its order: asked for again after the backoff (the server's clock may be
        // behind the one that issued the state held), so `after` still names the state held.
        #expect(channel.after == 42)

        // A newer state with the refused item again: it is not reported twice.
        server.answer(200, try Self.envelope(sequence: 43, items: [Self.item("b", scope: ("room", "lab3"))]))
        #expect(await channel.poll() == .applied(sequence: 43, accepted: 0, refused: 1))
        #expect(reported.withLock { $0 }.filter { $0.item == "b" }.count == 1)

        // Nothing new, then the server gone: the items held stay.
        server.answer(204, [])
        #expect(await channel.poll() == .nothingNew && channel.status.connected)
        server.answer(nil, [])
        guard case .failed = await channel.poll() else {
            Issue.record("an unreachable server is not a failure")
            return
        }
        #expect(!channel.status.connected && channel.store.sequence == 43)
    }

    @Test func aStopEndingTheHeldRequestIsNoFailure() async throws {
        let folder = try temporaryFolder()
        let server = FakeLiveServer()
        let channel = LiveChannel(
            transport: server, store: LiveStateStore(path: folder + "/" + LiveStateStore.fileName), machine: Self.machine,
            context: { LiveChannel.Context(policy: try! Self.school(), lockedCategory: { _ in nil }) }, applied: {}, report: { _ in },
            clock: { Date(timeIntervalSince1970: 1_500) }, logger: Logger(label: "test"))
        #expect(await channel.poll() == .nothingNew && channel.status.connected)
        server.cancel()
        // filter-control stopping cancels the held request: not "cannot reach the server" (demo.sh showed that warning at every stop).
        #expect(await channel.poll() == .nothingNew)
        #expect(channel.status.lastError == nil)
    }

    @Test func aStateOlderOnlyByItsClockIsAskedForAgain() async throws {
        // Fails on the code before: the refused sequence became `after`, so the server, whose
        // sequence it was, held every later request until something changed in the room.
        let folder = try temporaryFolder()
        let server = FakeLiveServer()
        let school = try Self.school()
        let now = Mutex<Int64>(1_500)
        let channel = LiveChannel(
            transport: server, store: LiveStateStore(path: folder + "/" + LiveStateStore.fileName), machine: Self.machine,
            context: { LiveChannel.Context(policy: school, lockedCategory: Self.bounds(school).lockedCategory) }, applied: {}, report: { _ in },
            clock: { Date(timeIntervalSince1970: TimeInterval(now.withLock { $0 })) }, logger: Logger(label: "test"))
        // A state dated 299 s ahead (a taken-over server, or an instance whose clock is ahead) is held.
        server.answer(200, try Self.envelope(sequence: 1_000_000, issued: 1_500 + 299, items: [Self.item("rogue")]))
        #expect(await channel.poll() == .applied(sequence: 1_000_000, accepted: 1, refused: 0))
        // The real server's state is older by its time: refused, and not named as seen.
        server.answer(200, try Self.envelope(sequence: 7, issued: 1_500, items: [Self.item("real")]))
        guard case .refused(let refusal) = await channel.poll() else {
            Issue.record("an older state was not refused")
            return
        }
        #expect(refusal.code == "live.sequence")
        #expect(channel.after == 1_000_000, "the server is asked again for its current state")
        #expect(server.requests.last == #"{"after":1000000,"wait":25}"#)
        // Once the server's clock passes the held state's, its answer (stamped with its time) is accepted.
        now.withLock { $0 = 1_900 }
        server.answer(200, try Self.envelope(sequence: 7, issued: 1_900, items: [Self.item("real")]))
        #expect(await channel.poll() == .applied(sequence: 7, accepted: 1, refused: 0))
        #expect(channel.store.items(inForceAt: 1_900).map(\.id) == ["real"])
    }

    @Test func anEarlyAnswerWithNothingNewIsFollowedByAPause() {
        // Fails on the code before, which had no pause: a 204 at once (a full hub, a shutdown) was followed by a request at once.
        for elapsed in [Duration.zero, .milliseconds(300), .seconds(12)] {
            let pause = LiveChannel.pause(afterNothingNewIn: elapsed, wait: 25)
            #expect(pause.map { $0 >= .milliseconds(800) && $0 <= .milliseconds(1200) } == true, "\(elapsed)")
        }
        #expect(LiveChannel.pause(afterNothingNewIn: .milliseconds(12_500), wait: 25) == nil, "held for half the wait: no pause")
        #expect(LiveChannel.pause(afterNothingNewIn: .seconds(25), wait: 25) == nil)
        #expect(LiveChannel.pause(afterNothingNewIn: .seconds(2), wait: 0) != nil, "wait 0 is always answered at once")
    }

    @Test func aStateRefusedWholeIsNotAskedForAgainUntilThePolicyChanges() async throws {
        let folder = try temporaryFolder()
        let server = FakeLiveServer()
        let reported = Mutex<[LiveChannel.RefusalReport]>([])
        let channel = LiveChannel(
            transport: server, store: LiveStateStore(path: folder + "/" + LiveStateStore.fileName), machine: Self.machine,
            context: { LiveChannel.Context(policy: SchoolPolicy(), lockedCategory: { _ in nil }) }, applied: {},
            report: { reports in reported.withLock { $0 += reports } }, clock: { Date(timeIntervalSince1970: 1_500) },
            logger: Logger(label: "test"))
        server.answer(200, try Self.envelope(sequence: 9, items: [Self.item("a"), Self.item("b")]))
        guard case .refused(let refusal) = await channel.poll() else {
            Issue.record("accepted without live:")
            return
        }
        #expect(refusal.code == "live.no-policy")
        #expect(reported.withLock { $0 }.map(\.item) == ["a", "b"], "each item is reported")
        #expect(channel.after == 9 && channel.store.sequence == 0)
        channel.policyChanged()
        #expect(channel.after == 0)
    }
}

/// The live route of a school's server, answering what the test sets.
final class FakeLiveServer: SchoolTransport {
    private let state = Mutex<(status: Int?, body: [UInt8], requests: [String], cancelled: Bool)>((204, [], [], false))

    func answer(_ status: Int?, _ body: [UInt8]) { state.withLock { $0.status = status; $0.body = body } }
    /// The next requests end as a stop of filter-control ends them.
    func cancel() { state.withLock { $0.cancelled = true } }
    var requests: [String] { state.withLock { $0.requests } }

    func post(_ endpoint: String, body: [UInt8]) async throws(SchoolError) -> (status: Int, body: [UInt8]) {
        let answer = state.withLock { state in
            state.requests.append(String(decoding: body, as: UTF8.self))
            return (state.status, state.body, state.cancelled)
        }
        guard endpoint == LiveChannel.endpoint else { return (404, []) }
        if answer.2 { throw .cancelled }
        guard let status = answer.0 else { throw .unreachable(server: "fake", reason: "connection refused") }
        return (status, answer.1)
    }
}

/// The live state in filter-control: a bundle's policy with `live:`, the
/// store in force for the locked look-up, and the policy set with a
/// person's own policy.
@Suite struct LiveControlTests {
    @Test func liveItemsReachThePolicySetAndAPersonGetsAPolicyOfTheirOwn() async throws {
        let folder = try TemporaryFolder("live")
        let factory = BundleFactory()
        // The bundle's store puts v1.casino.example in gambling, which the policy locks.
        let policy = LiveStateTests.policyYAML.replacingOccurrences(of: "locked: [adult, IWF]", with: "locked: [gambling]")
        try factory.write(version: 1, to: folder.sub("source"), extraFiles: [(BundleManifest.policyFileName, Array(policy.utf8))])
        let configuration = try Configuration(
            yaml: """
                queue:
                  user: nobody
                rules:
                  directory: \(folder.sub("lib"))
                  source: file://\(folder.sub("source"))/
                  trustedKeys: ["\(factory.key.publicKey)"]
                school:
                  server: https://school.example:8443/
                  fingerprint: \(String(repeating: "ab", count: 32))
                """)
        try FileManager.default.createDirectory(atPath: folder.sub("lib"), withIntermediateDirectories: true)
        try MachineIdentity(
            machine: LiveStateTests.machine, server: try SchoolServerURL(parsing: "https://school.example:8443/"),
            fingerprint: try #require(ServerFingerprint(hex: String(repeating: "ab", count: 32))), key: .init()
        ).write(directory: folder.sub("lib"))
        let application = try await FilterControlApplication.build(
            configuration: configuration,
            options: Control.Options(
                configPath: folder.sub("hallpass.yaml"), store: nil, runtimeDirectory: folder.sub("run"), dataBinary: folder.sub("none")),
            logger: Logger(label: "test"))
        let control = application.control
        let school = try #require(await control.school)
        let now = Int64(Date().timeIntervalSince1970)

        // The real store decides what is locked.
        let context = await control.liveContext()
        #expect(context.bounds.lockedCategory(try RulePattern("www.v1.casino.example")) == "gambling")
        #expect(context.bounds.lockedCategory(try RulePattern("example.org")) == nil)

        let bytes = try LiveStateTests.envelope(
            sequence: 3, issued: now,
            items: [
                LiveStateTests.item("room", "block", targets: ["games.example"], from: now, until: now + 600),
                LiveStateTests.item("ada", "block", targets: ["news.example"], scope: ("user", "ada"), from: now, until: now + 600),
                LiveStateTests.item("cy", "allow", targets: ["games.example"], scope: ("user", "cy"), from: now, until: now + 600),
                LiveStateTests.item("casino", targets: ["v1.casino.example"], from: now, until: now + 600),
            ])
        let state = try LiveState.verify(bytes, policy: context.policy.live, machine: LiveStateTests.machine, held: LiveState.Order(issued: 0, sequence: 0), now: now).get()
        let outcome = context.bounds.check(state, now: now)
        #expect(outcome.accepted.map(\.id) == ["room", "ada", "cy"] && outcome.refused.map(\.code) == ["live.locked"])
        try school.live.accept(try JSONDecoder().decode(LiveState.Envelope.self, from: Data(bytes)), verified: state, outcome: outcome)

        let placements: [UInt32: (audience: Audience, user: LocalUser)] = [
            1001: (.group("year9"), LocalUser(uid: 1001, name: "ada", unixGroups: ["year9"])),
            1002: (.group("year9"), LocalUser(uid: 1002, name: "bob", unixGroups: ["year9"])),
            1003: (.group("year10"), LocalUser(uid: 1003, name: "cy", unixGroups: ["year10"])),
        ]
        let inForce = await control.policy
        let (set, effective) = await control.computePolicySet(
            now: Date(timeIntervalSince1970: TimeInterval(now)), policy: inForce, placements: placements, policyClock: PolicyClock(zoneName: nil))
        #expect(set.users[1001] == .person(1001) && set.users[1002] == .group("year9") && set.askUsers)
        #expect(effective[.person(1001)]?.live == ["room", "ada"] && effective[.group("year9")]?.live == ["room"])
        let engines = PolicyEngines(rules: await control.store, set: set)
        func verdict(_ host: String, uid: UInt32) throws -> Verdict {
            engines.decide(FlowFacts(host: try HostName(host), nameSource: .tlsServerName, uid: uid)).verdict
        }
        #expect(try verdict("news.example", uid: 1001) == .drop && verdict("news.example", uid: 1002) == .allow, "ada's item is hers alone")
        #expect(try verdict("games.example", uid: 1001) == .drop && verdict("games.example", uid: 1002) == .drop)
        // cy is in year10, which live.groups does not name: an item for cy alone is no way around
        // the bound (fails on the code before, which gave cy a policy of their own with the item).
        #expect(set.users[1003] == .group("year10") && set.policies[.person(1003)] == nil && effective[.person(1003)] == nil)

        // At the items' end they are out of force, with or without the server.
        let (later, _) = await control.computePolicySet(
            now: Date(timeIntervalSince1970: TimeInterval(now + 600)), policy: inForce, placements: placements,
            policyClock: PolicyClock(zoneName: nil))
        #expect(later.users[1001] == .group("year9") && later.policies[.person(1001)] == nil)
        #expect(later.policies[.group("year9")]?.overrideBlock.isEmpty == true)

        // The status shows them.
        let live = try #require(await control.status().live)
        #expect(live.sequence == 3 && live.items.map(\.id) == ["room", "ada", "cy"] && live.items[1].scope == "user ada" && live.keys == 1)
        #expect(live.refusedInState.count == 1)
    }
}

/// What the block page says of a block a live item made.
@Suite struct LiveBlockPageTests {
    let clock = PolicyClock(zoneName: "Europe/London")

    func item(_ id: String, _ action: LiveAction, _ targets: [String] = [], until: Int64) -> LiveItem {
        LiveItem(id: id, sequence: 1, action: action, targets: targets, scope: .room("lab1"), from: 0, until: until, by: "Ada Lovelace")
    }

    @Test func theBlockPageSaysWhoSetAFocusAPauseOrABlockAndUntilWhen() throws {
        let until: Int64 = 1_764_345_600  // 2025-11-28 16:00 UTC
        var policy = Policy()
        policy.focus = Policy.Focus(allow: [try RulePattern("docs.example.org")], until: until)
        let live = [item("f", .focus, ["docs.example.org"], until: until), item("b", .block, ["games.example"], until: until + 60)]
        let focus = BlockPageSetup.liveExplanation(Reason(source: .focus), policy: policy, live: live, clock: clock)
        #expect(focus == "a focus is set by Ada Lovelace until \(clock.describe(Date(timeIntervalSince1970: TimeInterval(until)))): only its sites can be reached")
        policy.focus = Policy.Focus(allow: [], until: until)
        let pause = BlockPageSetup.liveExplanation(Reason(source: .focus), policy: policy, live: [item("p", .pause, until: until)], clock: clock)
        #expect(pause?.hasPrefix("the internet is paused by Ada Lovelace until ") == true)
        let block = BlockPageSetup.liveExplanation(Reason(source: .overrideBlock, rule: "games.example"), policy: policy, live: live, clock: clock)
        #expect(block?.hasPrefix("blocked by Ada Lovelace until ") == true)
        // A filterctl override (no live item behind it) and other reasons keep their own words.
        #expect(BlockPageSetup.liveExplanation(Reason(source: .overrideBlock, rule: "other.example"), policy: policy, live: live, clock: clock) == nil)
        #expect(BlockPageSetup.liveExplanation(Reason(source: .category, category: "games"), policy: policy, live: live, clock: clock) == nil)
    }
}
