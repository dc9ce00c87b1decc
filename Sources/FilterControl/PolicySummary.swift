import SharedStore
public import VerdictCore

/// Plain-text descriptions of the school's policy for filterctl.
public enum PolicySummary {
    /// A few lines: groups in order, schedules, exam, overrides.
    public static func describe(_ school: SchoolPolicy) -> String {
        var lines = ["school policy:"]
        lines.append("  groups (first match wins): " + (school.groups.isEmpty ? "none" : school.groups.map { group in
            group.name + (group.examExempt ? " (exam: exempt)" : "")
        }.joined(separator: ", ")))
        lines.append("  schedules: " + (school.schedules.isEmpty ? "none" : school.schedules.keys.sorted().map { name in
            let schedule = school.schedules[name]!
            return "\(name) (\(schedule.days.sorted().map(\.shortName).joined(separator: " ")) \(schedule.times.map(\.description).joined(separator: " ")))"
        }.joined(separator: ", ")))
        if let exam = school.exam {
            lines.append("  exam: \(exam.allow.count) allowed entr\(exam.allow.count == 1 ? "y" : "ies"), groups "
                + (exam.groups?.joined(separator: ", ") ?? "all but the exempt") + (exam.during.isEmpty ? ", started by hand" : ", during " + exam.during.joined(separator: ", ")))
        } else {
            lines.append("  exam: none")
        }
        lines.append("  overrides: \(school.overrides.rawValue)" + (school.timeZone.map { ", time zone \($0)" } ?? ""))
        lines.append("  locked: " + (school.locked.isEmpty ? "none" : school.locked.sorted().joined(separator: ", ")))
        if let live = school.live {
            let actions = LiveAction.allCases.filter(live.actions.contains).map(\.rawValue).joined(separator: ", ")
            lines.append(
                "  live: \(live.keys.count) key(s); actions \(actions); longest \(live.longestSeconds / 60) min"
                    + "; rooms " + (live.rooms.map { $0.sorted().joined(separator: ", ") } ?? "any")
                    + "; groups " + (live.groups.map { $0.sorted().joined(separator: ", ") } ?? "any"))
        } else {
            lines.append("  live: none (no live item is accepted)")
        }
        return lines.joined(separator: "\n")
    }

    /// Every key of an effective policy, one per line, as `filterctl policy show` prints it.
    public static func describe(_ effective: EffectivePolicy) -> String {
        let policy = effective.policy
        var lines = ["policy for \(effective.audience)"]
        if !effective.schedules.isEmpty { lines.append("  schedules in force: \(effective.schedules.joined(separator: ", "))") }
        if let exam = effective.exam {
            lines.append("  EXAM in force (\(exam.startedBy))" + (exam.until.map { ", until \(UTCTime.format($0))" } ?? ", until stopped"))
            lines.append("  exam allows: " + (policy.exam?.allow.map(\.description).joined(separator: " ") ?? ""))
        }
        if let focus = policy.focus {
            lines.append(
                "  " + (focus.allow.isEmpty ? "PAUSE" : "FOCUS") + " in force (live), until \(UTCTime.format(focus.until))"
                    + (focus.allow.isEmpty ? "" : "; reachable: " + focus.allow.map(\.description).joined(separator: " ")))
        }
        if !effective.live.isEmpty { lines.append("  live items: " + effective.live.joined(separator: " ")) }
        switch policy.blockedCategories {
        case .all: lines.append("  block: all categories")
        case .only(let names): lines.append("  block: " + (names.isEmpty ? "none" : names.sorted().joined(separator: " ")))
        }
        if !policy.locked.isEmpty { lines.append("  locked (nothing opens): " + policy.locked.sorted().joined(separator: " ")) }
        if !policy.allow.isEmpty { lines.append("  allow: " + policy.allow.map(\.description).joined(separator: " ")) }
        if !policy.deny.isEmpty { lines.append("  deny: " + policy.deny.map(\.description).joined(separator: " ")) }
        if !policy.overrideAllow.isEmpty { lines.append("  overrides allow: " + policy.overrideAllow.map(\.description).joined(separator: " ")) }
        if !policy.overrideBlock.isEmpty { lines.append("  overrides block: " + policy.overrideBlock.map(\.description).joined(separator: " ")) }
        lines.append("  unknown: \(policy.unknown.rawValue), noName: \(policy.noName.rawValue)")
        let bypass = policy.bypass
        lines.append(
            "  bypass: encryptedDNS \(bypass.encryptedDNS.rawValue), ech \(bypass.ech.rawValue), tunnels \(bypass.tunnels.rawValue),"
                + " unreadableQUIC \(bypass.unreadableQUIC.rawValue), quic \(bypass.quic.rawValue), ssh \(bypass.ssh.rawValue)")
        if !bypass.proxies.isEmpty { lines.append("  school proxies: " + bypass.proxies.map(\.description).joined(separator: " ")) }
        if !bypass.sshServers.isEmpty { lines.append("  school SSH servers: " + bypass.sshServers.map(\.description).joined(separator: " ")) }
        let engines = SafeSearchEngine.allCases.filter(bypass.safeSearch.contains).map(\.rawValue)
        lines.append("  safeSearch: " + (engines.isEmpty ? "none" : engines.joined(separator: " ")))
        return lines.joined(separator: "\n")
    }
}
