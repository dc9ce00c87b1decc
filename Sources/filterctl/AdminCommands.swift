import ArgumentParser
import FilterControl
import Foundation

/// Talking to the running filter-control over its admin socket.
enum AdminCommand {
    /// --socket, else admin.socket of --config (or of the default configuration file when readable), else the default.
    static func socketPath(_ socket: String?, config: String?) -> String {
        if let socket { return socket }
        let path = config ?? Configuration.defaultPath
        if let text = try? String(contentsOfFile: path, encoding: .utf8), let configuration = try? Configuration(yaml: text) {
            return configuration.admin.socket
        }
        return Configuration().admin.socket
    }

    static func exchange(_ request: AdminRequest, socket: String) throws -> Data {
        do {
            return try AdminClient.send(request, to: socket)
        } catch {
            let status = error.errno == EACCES || error.errno == EPERM ? ExitStatus.noPermission : ExitStatus.unavailable
            throw fail(error.message, status: status)
        }
    }

    static func reply(_ request: AdminRequest, socket: String) throws -> AdminReply {
        let data = try exchange(request, socket: socket)
        guard let reply = try? AdminCoding.decoder.decode(AdminReply.self, from: data) else {
            throw fail("filter-control sent an answer filterctl does not understand", status: ExitStatus.ioError)
        }
        return reply
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show what the running filter-control is doing.",
        discussion: """
            Rules version and age, where rules come from and the last reload's result, filter-data's
            pid, uptime and restarts, the fail mode, and the counters: packets seen, verdicts by
            action, held flows, queue drops, netlink errors. filter-control asks filter-data for its
            counters first (waiting at most a second), so they count what just happened; when
            filter-data does not answer in time, the last ones are shown with their age.
            """)

    @Flag(name: .long, help: "Print the status as one JSON object.")
    var json = false

    @Option(name: .long, help: "The admin socket (default: admin.socket of --config, or /run/hallpass/control.sock).")
    var socket: String?

    @Option(name: .long, help: "A hallpass.yaml naming the admin socket.")
    var config: String?

    func run() throws {
        let data = try AdminCommand.exchange(AdminRequest(command: .status), socket: AdminCommand.socketPath(socket, config: config))
        guard let status = try? AdminCoding.decoder.decode(AdminStatus.self, from: data) else {
            throw fail("filter-control sent a status filterctl does not understand", status: ExitStatus.ioError)
        }
        if json {
            FileHandle.standardOutput.write(data + Data("\n".utf8))
            return
        }
        print(Status.render(status), terminator: "")
    }

    static func render(_ status: AdminStatus) -> String {
        func age(_ date: Date?) -> String {
            guard let date else { return "never" }
            let seconds = max(0, Int(status.now.timeIntervalSince(date)))
            let text = seconds < 120 ? "\(seconds) s" : seconds < 7200 ? "\(seconds / 60) min" : seconds < 172_800 ? "\(seconds / 3600) h" : "\(seconds / 86_400) days"
            return "\(ISO8601DateFormatter().string(from: date)) (\(text) ago)"
        }
        let counters = status.counters
        func count(_ name: String) -> String { counters[name].map(String.init) ?? "-" }
        var lines: [String] = []
        let running = status.dataProcess.pid != nil
        lines.append("hallpass:    \(running ? "filtering" : "filter-data is not running") (queue \(status.queue), fail \(status.failMode))")
        lines.append("rules:       version \(status.rules.version.map(String.init) ?? "?"), loaded \(age(status.rules.installedAt))")
        lines.append("             store \(status.rules.store)")
        lines.append("             source \(status.rules.source ?? "none (rules on disk)")")
        if let result = status.rules.lastFetchResult {
            lines.append("last reload: \(age(status.rules.lastFetchAt)): \(result)")
        }
        var data = "filter-data: "
        if let pid = status.dataProcess.pid {
            data += "pid \(pid), up since \(age(status.dataProcess.startedAt)), "
        }
        data += "\(status.dataProcess.restarts) restart\(status.dataProcess.restarts == 1 ? "" : "s")"
        if let exit = status.dataProcess.lastExit { data += ", last exit: \(exit)" }
        lines.append(data)
        if let refusal = status.dataProcess.lastRulesRefusal { lines.append("             refused new rules: \(refusal)") }
        // filter-control asks filter-data for its counters before it answers;
        // when they did not come in time, these are the last ones it had.
        if status.dataProcess.countersFresh == false {
            if let at = status.dataProcess.countersAt {
                lines.append("counters:    of \(age(at)); " + (running ? "filter-data did not answer just now" : "the last before filter-data stopped"))
            } else {
                lines.append("counters:    none from filter-data yet")
            }
        }
        lines.append(
            "packets:     \(count("packets")) seen, \(count("flows")) flows (\((counters["reopenedConnections"] ?? 0) + (counters["reopenedQUICFlows"] ?? 0)) on reused ports); verdicts: \(count("allowed")) allow, \(count("dropped")) block, \(count("neededRules")) ask, \(count("neededMoreData")) wait"
        )
        lines.append(
            "needRules:   \(count("heldFlows")) flows held (\(count("heldPackets")) packets), \(count("questions")) asked, \(count("answers")) answered, \(count("askTimeouts")) timed out; round trip p50 \(count("roundTripP50Micros")) µs, p99 \(count("roundTripP99Micros")) µs"
        )
        lines.append(
            "kernel:      queue drops \(count("queueDropped")) (full) + \(count("queueUserDropped")) (socket), netlink errors \(count("netlinkErrors")), \(count("queueWaiting")) waiting"
        )
        if let policy = status.policy {
            lines.append("policy:      from \(policy.source); groups: \(policy.groups.isEmpty ? "none" : policy.groups.joined(separator: ", "))")
            lines.append("             school clock \(policy.clock); exam: \(policy.exam); \(policy.overrides) override(s); \(policy.placedUsers) user(s) placed")
            for schedules in policy.schedulesInForce { lines.append("             schedules in force: \(schedules)") }
            for key in policy.ignoredLocalKeys { lines.append("             note: \(key) in hallpass.yaml has no effect (the school's policy is in force)") }
        }
        lines.append(
            "reports:     \(count("reportsSent")) decisions reported, \(count("reportsDropped")) dropped; \(count("connectionsRecorded")) open connections recorded"
        )
        if counters["auditQueued"] != nil {
            lines.append(
                "audit log:   \(count("auditWritten")) written, \(count("auditDropped")) dropped, \(count("auditFileFailed")) file errors"
                    + (counters["syslogSent"] != nil ? "; syslog \(count("syslogSent")) sent, \(count("syslogBuffered")) waiting, \(counters["syslogConnected"] == 1 ? "connected" : "not connected")" : ""))
        }
        if counters["noticesSent"] != nil {
            lines.append("notices:     \(count("noticesSent")) sent, \(count("noticesRateLimited")) held back, \(count("noticesFailed")) failed")
        }
        if counters["schoolRecordsWaiting"] != nil {
            lines.append(
                "school:      \(count("schoolRecordsStored")) records stored by the server, \(count("schoolRecordsWaiting")) waiting, \(count("schoolRecordsDropped")) dropped unsent")
        }
        if let live = status.live {
            for (index, line) in renderLive(live, age: age).enumerated() { lines.append((index == 0 ? "live:        " : "             ") + line) }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The live channel: whether it reaches the server, the state held, each item in force, the refusals.
    static func renderLive(_ live: AdminStatus.LiveStatus, age: (Date?) -> String) -> [String] {
        var lines: [String] = []
        let state = live.connected ? "connected (last answer \(age(live.lastContactAt)))" : "not connected" + (live.lastError.map { ": \($0)" } ?? "")
        lines.append(state)
        lines.append(
            "state \(live.sequence == 0 ? "none yet" : "\(live.sequence)")" + (live.room.map { ", room \($0)" } ?? "")
                + "; \(live.items.count) item(s) in force; refused: \(live.statesRefused) state(s), \(live.itemsRefused) item(s)"
                + (live.keys == 0 ? "; the school's policy has no live: key, so every item is refused" : ""))
        for item in live.items {
            let targets = item.targets.isEmpty ? "" : " " + item.targets.joined(separator: " ")
            lines.append("\(item.id): \(item.action)\(targets) for \(item.scope), by \(item.by), until \(item.untilText)")
        }
        for refused in live.refusedInState { lines.append("refused: \(refused)") }
        if let last = live.lastRefusal { lines.append("last state refused: \(last)") }
        return lines
    }
}

struct Live: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "live",
        abstract: "Show the live channel to the school's server and the live items in force.",
        discussion: """
            Whether the channel reaches the server, the sequence of the live state held, each item
            in force (what, for whom, who set it, until when), and what was refused. Live items come
            from the school's server (teachers' room controls, approved requests) and end on their
            own; see docs/school-policy.md, "Live items".
            """)

    @Flag(name: .long, help: "Print the live part of the status as one JSON object.")
    var json = false

    @Option(name: .long, help: "The admin socket (default: admin.socket of --config, or /run/hallpass/control.sock).")
    var socket: String?

    @Option(name: .long, help: "A hallpass.yaml naming the admin socket.")
    var config: String?

    func run() throws {
        let data = try AdminCommand.exchange(AdminRequest(command: .status), socket: AdminCommand.socketPath(socket, config: config))
        guard let status = try? AdminCoding.decoder.decode(AdminStatus.self, from: data) else {
            throw fail("filter-control sent a status filterctl does not understand", status: ExitStatus.ioError)
        }
        guard let live = status.live else {
            print("no live channel: this machine is not enrolled with a school's server (school: in hallpass.yaml)")
            return
        }
        if json {
            FileHandle.standardOutput.write((try AdminCoding.encoder.encode(live)) + Data("\n".utf8))
            return
        }
        let lines = Status.renderLive(live) { date in date.map { ISO8601DateFormatter().string(from: $0) } ?? "never" }
        print(lines.joined(separator: "\n"))
    }
}

struct Reload: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Load the rules and the policy again now, and say what happened.",
        discussion: """
            Exit status: 0 new rules in force or already current; 65 the new rules were refused
            (the rules in force stay); 78 the configuration is invalid; 69 filter-control is not running.
            """)

    @Option(name: .long, help: "The admin socket (default: admin.socket of --config, or /run/hallpass/control.sock).")
    var socket: String?

    @Option(name: .long, help: "A hallpass.yaml naming the admin socket.")
    var config: String?

    func run() throws {
        let reply = try AdminCommand.reply(AdminRequest(command: .reload), socket: AdminCommand.socketPath(socket, config: config))
        FileHandle.standardOutput.write(Data(reply.output.utf8))
        if reply.exitCode != 0 { throw ExitCode(reply.exitCode) }
    }
}
