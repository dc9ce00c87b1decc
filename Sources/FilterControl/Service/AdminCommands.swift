import Foundation
import NIOPosix
import SharedStore
import VerdictCore

/// Who sent an admin request (the socket's peer credentials).
public struct AdminPeer: Sendable, Hashable {
    public var uid: UInt32
    public var name: String?

    public init(uid: UInt32, name: String?) {
        self.uid = uid
        self.name = name
    }

    var label: String { name ?? "uid \(uid)" }
}

extension Control {
    /// The answer to one admin request, as JSON.
    func answer(_ request: AdminRequest, peer: AdminPeer) async -> Data {
        let encoder = AdminCoding.encoder
        let reply: AdminReply
        switch request.command {
        case .status:
            // filter-data's counters come with its answer to the health check,
            // once a second: asked for now, they include the traffic of the
            // moment before. No answer in time: the last ones, with their time.
            let fresh = await supervisor.refreshCounters(waitingAtMost: Self.statusCountersWait)
            var current = await status()
            current.dataProcess.countersFresh = fresh
            return (try? encoder.encode(current)) ?? Data()
        case .reload:
            reply = await reload()
        case .check:
            reply = await check(request)
        case .requests:
            reply = listRequests(all: request.all == true, json: request.json == true)
        case .approve, .deny:
            reply = await decide(request.id ?? "", approve: request.command == .approve, seconds: request.seconds, by: peer)
        case .examStart:
            reply = await startExam(groups: request.groups, seconds: request.seconds, by: peer)
        case .examStop:
            reply = await stopExam(by: peer)
        case .examStatus:
            reply = examStatus()
        case .allow, .block:
            reply = await addOverride(request.command == .allow ? .allow : .block, request: request, by: peer)
        case .overrides:
            reply = listOverrides(json: request.json == true)
        case .removeOverride:
            reply = await removeOverride(request.id ?? "", by: peer)
        case .policyShow:
            reply = await showPolicy(request)
        }
        return (try? encoder.encode(reply)) ?? Data()
    }

    /// How long `filterctl status` waits for filter-data's counters.
    static let statusCountersWait: Duration = .seconds(1)

    // MARK: check and policy show

    /// The audience and engine of a request's `--uid` / `--user` (none: people in no group), at `--at` or now.
    private enum View {
        case found(audience: Audience, user: String, effective: EffectivePolicy, at: Date)
        case failed(AdminReply)
    }

    private func view(for request: AdminRequest) async -> View {
        var uid = request.uid
        let users = UserDirectory()
        if let name = request.user {
            // getpwnam_r blocks (NSS may ask a directory service): on NIO's thread pool.
            let found = (try? await NIOThreadPool.singleton.runIfActive { users.uid(named: name) }) ?? nil
            guard let found else { return .failed(AdminReply(exitCode: 67, output: "filterctl: no user named '\(name)' on this machine\n", code: "user.unknown")) }
            uid = found
        }
        var at = clock()
        if let text = request.at {
            guard let date = PolicyClock(zoneName: policy.school.timeZone).date(parsing: text) else {
                return .failed(AdminReply(exitCode: 64, output: "filterctl: --at takes a date and time on the school's clock, like 2026-11-25T10:15\n", code: "admin.bad-request"))
            }
            at = date
        }
        let audience: Audience
        var label = "a person in no group"
        var person: String? = nil
        if let uid {
            // getpwuid_r and getgrouplist block (NSS may ask a directory service): on NIO's thread pool.
            let user = (try? await NIOThreadPool.singleton.runIfActive { users.user(uid: uid) }) ?? LocalUser(uid: uid)
            audience = policy.school.audience(of: user)
            label = "\(user.name ?? "uid \(uid)") (uid \(uid))"
            person = audience == .system ? nil : user.name
        } else {
            audience = .ungrouped
        }
        let seconds = Int64(at.timeIntervalSince1970)
        let state = policyState.current(now: Int64(clock().timeIntervalSince1970))
        // The live items held, as they stand at `at` (an item ended by then is out).
        let moment = PolicyMoment(
            time: PolicyClock(zoneName: policy.school.timeZone).localTime(at: at), now: seconds, manualExam: state.exam, overrides: state.overrides,
            live: school?.live.items(inForceAt: seconds) ?? [])
        return .found(audience: audience, user: label, effective: policy.effectivePolicy(for: audience, at: moment, person: person), at: at)
    }

    func check(_ request: AdminRequest) async -> AdminReply {
        let view: (audience: Audience, user: String, effective: EffectivePolicy, at: Date)
        switch await self.view(for: request) {
        case .found(let audience, let user, let effective, let at): view = (audience, user, effective, at)
        case .failed(let reply): return reply
        }
        let engine: VerdictEngine<RuleStore>
        if request.uid == nil, request.user == nil, request.at == nil {
            // As filter-data judges now (with the lookup answers it has).
            engine = pageView.withLock { $0.engines.fallback }
        } else {
            engine = VerdictEngine(rules: store, policy: view.effective.policy)
        }
        var runner = CheckRunner(engine: engine, format: request.json == true ? .json : .text)
        var output: [UInt8] = []
        if request.uid != nil || request.user != nil || request.at != nil, request.json != true {
            output += Array("# for \(view.user), group \(view.audience), at \(PolicyClock(zoneName: policy.school.timeZone).describe(view.at))".utf8)
            if !view.effective.schedules.isEmpty { output += Array("; schedules in force: \(view.effective.schedules.joined(separator: ", "))".utf8) }
            if let exam = view.effective.exam { output += Array("; EXAM in force (\(exam.startedBy))".utf8) }
            output += Array("\n".utf8)
        }
        for target in (request.targets ?? []).prefix(10_000) {
            runner.appendLine(for: Substring(target), to: &output)
        }
        return AdminReply(exitCode: runner.invalidTargets > 0 ? 65 : 0, output: String(decoding: output, as: UTF8.self))
    }

    func showPolicy(_ request: AdminRequest) async -> AdminReply {
        switch await self.view(for: request) {
        case .failed(let reply):
            return reply
        case .found(_, let user, let effective, _):
            var text = "for \(user)\n" + PolicySummary.describe(effective) + "\n"
            text += "source: " + (policy.fromBundle ? "the school's policy in bundle version \(store.version)" : "\(options.configPath) (the bundle carries no policy)") + "\n"
            for key in policy.ignoredLocalKeys { text += "note: \(key) in \(options.configPath) has no effect (the school's policy is in force)\n" }
            return AdminReply(exitCode: 0, output: text)
        }
    }

    // MARK: Exams

    func startExam(groups: [String]?, seconds: Int?, by peer: AdminPeer) async -> AdminReply {
        guard let exam = policy.school.exam else {
            return AdminReply(exitCode: 65, output: "filterctl: the school's policy defines no exam (no exam: section), so there is nothing to start\n", code: "exam.none")
        }
        if let groups {
            let unknown = groups.filter { name in !policy.school.groups.contains { $0.name == name } }
            guard unknown.isEmpty else {
                return AdminReply(exitCode: 65, output: "filterctl: no group named \(unknown.joined(separator: ", ")) in the school's policy\n", code: "exam.group")
            }
        }
        let now = Int64(clock().timeIntervalSince1970)
        let manual = ManualExam(groups: groups, until: seconds.map { now + Int64($0) }, startedAt: now)
        do {
            try policyState.startExam(manual)
        } catch {
            return AdminReply(exitCode: 74, output: "filterctl: \(error.message)\n", code: error.code)
        }
        logger.notice(
            "exam started", metadata: ["hallpass.admin": "\(peer.label)", "hallpass.exam.groups": "\(groups ?? exam.groups ?? ["all"])"])
        await applyPolicy(reason: "exam started by \(peer.label)")
        let clock = PolicyClock(zoneName: policy.school.timeZone)
        let until = manual.until.map { " until \(clock.describe(Date(timeIntervalSince1970: TimeInterval($0))))" } ?? " until 'filterctl exam stop'"
        let who = groups?.joined(separator: ", ") ?? exam.groups?.joined(separator: ", ") ?? "every group but the exempt"
        return AdminReply(
            exitCode: 0, output: "exam in force for \(who)\(until); they reach only: \(exam.allow.map(\.description).joined(separator: " "))\n",
            code: "exam.started")
    }

    func stopExam(by peer: AdminPeer) async -> AdminReply {
        let stopped: Bool
        do {
            stopped = try policyState.stopExam()
        } catch {
            return AdminReply(exitCode: 74, output: "filterctl: \(error.message)\n", code: error.code)
        }
        guard stopped else {
            let scheduled = effective.values.contains { $0.exam?.startedBy.hasPrefix("schedule") == true }
            return AdminReply(
                exitCode: 0,
                output: scheduled ? "no exam was started by hand; the one in force runs on its schedule\n" : "no exam was in force\n",
                code: "exam.none")
        }
        logger.notice("exam stopped", metadata: ["hallpass.admin": "\(peer.label)"])
        await applyPolicy(reason: "exam stopped by \(peer.label)")
        return AdminReply(exitCode: 0, output: "the exam started by hand is over\n", code: "exam.stopped")
    }

    func examStatus() -> AdminReply {
        let clock = PolicyClock(zoneName: policy.school.timeZone)
        var lines: [String] = []
        for (audience, effective) in effective.sorted(by: { $0.key.description < $1.key.description }) {
            guard let exam = effective.exam else { continue }
            let until = exam.until.map { "until \(clock.describe(Date(timeIntervalSince1970: TimeInterval($0))))" } ?? "until stopped"
            lines.append("\(audience): exam in force (\(exam.startedBy)), \(until)")
        }
        if lines.isEmpty { lines.append(policy.school.exam == nil ? "no exam: the school's policy defines none" : "no exam in force") }
        return AdminReply(exitCode: 0, output: lines.joined(separator: "\n") + "\n")
    }

    // MARK: Overrides

    func addOverride(_ action: PolicyOverride.Action, request: AdminRequest, by peer: AdminPeer) async -> AdminReply {
        guard policy.school.permits(action) else {
            return AdminReply(
                exitCode: 77, output: "filterctl: the school's policy does not let a machine \(action.rawValue) names (overrides: \(policy.school.overrides.rawValue))\n",
                code: "overrides.refused")
        }
        guard let target = request.targets?.first, request.targets?.count == 1 else {
            return AdminReply(exitCode: 64, output: "filterctl: give one name, URL prefix or address\n", code: "admin.bad-request")
        }
        let groups = request.groups ?? []
        let unknown = groups.filter { name in !policy.school.groups.contains { $0.name == name } }
        guard unknown.isEmpty else {
            return AdminReply(exitCode: 65, output: "filterctl: no group named \(unknown.joined(separator: ", ")) in the school's policy\n", code: "overrides.group")
        }
        let now = Int64(clock().timeIntervalSince1970)
        var made: [PolicyOverride] = []
        for group in groups.isEmpty ? [nil] : groups.map(Optional.some) {
            do {
                made.append(
                    try policyState.addOverride(
                        action, target: Control.overrideTarget(target), group: group, until: request.seconds.map { now + Int64($0) }, by: peer.label, now: now))
            } catch {
                return AdminReply(exitCode: 65, output: "filterctl: \(error.message)\n", code: error.code)
            }
        }
        logger.notice(
            "override added",
            metadata: ["hallpass.admin": "\(peer.label)", "hallpass.override": "\(action.rawValue) \(made[0].target)", "hallpass.group": "\(groups)"])
        await applyPolicy(reason: "override by \(peer.label)")
        let clock = PolicyClock(zoneName: policy.school.timeZone)
        let text = made.map { override in
            "\(override.id): \(override.action.rawValue) \(override.target) for \(override.group ?? "everyone")"
                + (override.until.map { " until \(clock.describe(Date(timeIntervalSince1970: TimeInterval($0))))" } ?? " until removed")
        }.joined(separator: "\n")
        return AdminReply(exitCode: 0, output: text + "\n", code: "overrides.added")
    }

    /// What a teacher types (`youtube.com`, `https://www.youtube.com/watch?v=1`,
    /// `http://games.example/flash`) as a rule pattern: an https URL is its
    /// name (the filter sees no HTTPS path), an http URL its name and path.
    static func overrideTarget(_ text: String) -> String {
        let lower = text.lowercased()
        for (scheme, keepsPath) in [("https://", false), ("http://", true)] where lower.hasPrefix(scheme) {
            let rest = text.dropFirst(scheme.count)
            let end = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) ?? rest.endIndex
            let withoutQuery = rest[..<end]
            guard let slash = withoutQuery.firstIndex(of: "/") else { return String(withoutQuery) }
            let path = withoutQuery[slash...]
            return keepsPath && path != "/" ? String(withoutQuery) : String(withoutQuery[..<slash])
        }
        return text
    }

    func removeOverride(_ id: String, by peer: AdminPeer) async -> AdminReply {
        do {
            guard try policyState.removeOverride(id: id) else {
                return AdminReply(exitCode: 66, output: "filterctl: no override with id \(id) (see 'filterctl overrides')\n", code: "overrides.unknown")
            }
        } catch {
            return AdminReply(exitCode: 74, output: "filterctl: \(error.message)\n", code: error.code)
        }
        logger.notice("override removed", metadata: ["hallpass.admin": "\(peer.label)", "hallpass.override": "\(id)"])
        await applyPolicy(reason: "override removed by \(peer.label)")
        return AdminReply(exitCode: 0, output: "override \(id) removed\n", code: "overrides.removed")
    }

    func listOverrides(json: Bool) -> AdminReply {
        let state = policyState.current(now: Int64(clock().timeIntervalSince1970))
        if json {
            let encoder = AdminCoding.encoder
            return AdminReply(exitCode: 0, output: state.overrides.compactMap { try? encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) + "\n" }.joined())
        }
        guard !state.overrides.isEmpty else { return AdminReply(exitCode: 0, output: "no overrides in force\n") }
        let clock = PolicyClock(zoneName: policy.school.timeZone)
        let lines = state.overrides.map { override in
            "\(override.id)  \(override.action.rawValue)  \(override.target)  \(override.group ?? "everyone")  "
                + (override.until.map { "until \(clock.describe(Date(timeIntervalSince1970: TimeInterval($0))))" } ?? "until removed")
                + (override.by.map { "  by \($0)" } ?? "")
        }
        return AdminReply(exitCode: 0, output: lines.joined(separator: "\n") + "\n")
    }

    // MARK: Access requests

    func listRequests(all: Bool, json: Bool) -> AdminReply {
        let now = clock()
        let shown = requests.list().filter { all || $0.state == .pending }
        if json {
            let encoder = AdminCoding.encoder
            let lines = shown.compactMap { try? encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) + "\n" }
            return AdminReply(exitCode: 0, output: lines.joined())
        }
        guard !shown.isEmpty else { return AdminReply(exitCode: 0, output: all ? "no access requests\n" : "no access requests waiting\n") }
        let formatter = ISO8601DateFormatter()
        var text = ""
        for request in shown {
            var state = request.state.rawValue
            if request.state == .approved, let until = request.allowUntil {
                state += until > now ? " until \(formatter.string(from: until))" : " (ran out \(formatter.string(from: until)))"
            }
            text += "\(request.id)  \(state)  \(request.host)  \(request.category ?? "-")  \(request.user ?? "-")  \(formatter.string(from: request.createdAt))\n"
            text += "          \(request.url)\n"
            if !request.reason.isEmpty { text += "          \"\(request.reason)\"\n" }
        }
        return AdminReply(exitCode: 0, output: text)
    }

    /// An approval is an allow override for everyone (until its time): the
    /// school's `overrides:` must permit allow overrides.
    func decide(_ id: String, approve: Bool, seconds: Int?, by peer: AdminPeer) async -> AdminReply {
        if approve, !policy.school.permits(.allow) {
            return AdminReply(
                exitCode: 77, output: "filterctl: the school's policy does not let a machine allow names (overrides: \(policy.school.overrides.rawValue))\n",
                code: "overrides.refused")
        }
        let request: AccessRequest
        do {
            request = try requests.decide(id, approve: approve, for: seconds.map(TimeInterval.init))
        } catch {
            return AdminReply(exitCode: error.code == "requests.unknown" ? 66 : 74, output: "filterctl: \(error.message)\n", code: error.code)
        }
        await applyPolicy(reason: "access request \(request.id) \(approve ? "approved" : "denied") by \(peer.label)")
        var text = "request \(request.id): \(request.host) \(approve ? "allowed" : "denied")"
        if approve, let until = request.allowUntil { text += " until \(ISO8601DateFormatter().string(from: until))" }
        logger.notice("\(text)", metadata: ["hallpass.admin": "\(peer.label)"])
        return AdminReply(exitCode: 0, output: text + "\n", code: approve ? "requests.approved" : "requests.denied")
    }
}
