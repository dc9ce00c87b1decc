import FilterControl
import Foundation
public import HallpassConfig
public import VerdictCore
import Yams

/// What the school's policy lets live items be (docs/school-policy.md,
/// `live:` and `locked:`), as machines judge them: the server refuses what
/// machines would refuse, so that a teacher hears it at once rather than
/// finding the rule ignored in the room.
///
/// Read here from the policy's YAML with Yams: the parts of `SchoolPolicy`
/// the live channel needs (`live`, `locked`) are read on their own, and the
/// rest of the policy (schedules, time zone) through `SchoolPolicy(yaml:)`
/// with those two keys taken out, so that this reads the same policy whether
/// or not the machines' parser knows the keys yet.
public struct LiveBounds: Sendable, Hashable {
    public static let allActions: [String] = ["allow", "block", "focus", "pause", "exam"]
    public static let defaultActions: Set<String> = ["allow", "block", "focus", "pause"]
    public static let defaultLongest: Int64 = 2 * 3600
    public static let mostLongest: Int64 = 24 * 3600

    /// `ed25519:BASE64`, as written.
    public var keys: [String]
    public var actions: Set<String>
    public var longestSeconds: Int64
    /// nil: any room.
    public var rooms: Set<String>?
    /// nil: any group.
    public var groups: Set<String>?

    public init(
        keys: [String], actions: Set<String> = LiveBounds.defaultActions, longestSeconds: Int64 = LiveBounds.defaultLongest,
        rooms: Set<String>? = nil, groups: Set<String>? = nil
    ) {
        self.keys = keys
        self.actions = actions
        self.longestSeconds = longestSeconds
        self.rooms = rooms
        self.groups = groups
    }
}

/// The school's published policy as the live channel reads it.
public struct LivePolicy: Sendable {
    /// nil: the policy has no `live:`; machines accept no live item.
    public var live: LiveBounds?
    /// Categories nothing may open.
    public var locked: Set<String>
    /// The rest of the policy (schedules, time zone); nil when there is no policy.
    public var school: SchoolPolicy?

    public init(live: LiveBounds?, locked: Set<String>, school: SchoolPolicy?) {
        self.live = live
        self.locked = locked
        self.school = school
    }

    public static let none = LivePolicy(live: nil, locked: [], school: nil)

    /// Reads `yaml`; throws with the key and the line of what is wrong.
    public init(yaml: String) throws(HallpassConfig.ConfigurationError) {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            throw ConfigurationError(notYAML: error)
        }
        guard let root, case .mapping(let top) = root else {
            self.init(live: nil, locked: [], school: try SchoolPolicy(yaml: yaml))
            return
        }
        var live: LiveBounds? = nil
        var locked: Set<String> = []
        var others: [(Node, Node)] = []
        for (key, value) in top {
            switch key.string {
            case "locked":
                locked = Set(try ConfigNode(value, key: "locked").list().map { entry throws(ConfigurationError) in try entry.string() })
            case "live":
                live = try Self.bounds(ConfigNode(value, key: "live"))
            default:
                others.append((key, value))
            }
        }
        // The rest as machines read it, without the keys read above; the text
        // itself when it has neither, so that errors name its own lines.
        guard others.count < top.count else {
            self.init(live: nil, locked: [], school: try SchoolPolicy(yaml: yaml))
            return
        }
        let rest: String
        do {
            rest = others.isEmpty ? "" : try Yams.serialize(node: .mapping(Node.Mapping(others)))
        } catch {
            throw ConfigurationError(key: "", message: "the policy cannot be read again after its live keys: \(error)")
        }
        self.init(live: live, locked: locked, school: try SchoolPolicy(yaml: rest))
    }

    static func bounds(_ node: ConfigNode) throws(ConfigurationError) -> LiveBounds {
        let fields = try node.mapping(allowed: ["keys", "actions", "longest", "rooms", "groups"])
        guard let keysNode = fields["keys"] else { throw node.error("live: needs keys: the public keys machines accept live state from") }
        let keys = try keysNode.list().map { entry throws(ConfigurationError) in
            let text = try entry.string()
            guard text.hasPrefix("ed25519:"), let raw = Data(base64Encoded: String(text.dropFirst(8))), raw.count == 32 else {
                throw entry.error("'\(text.prefix(80))' is not ed25519:BASE64 of a 32-byte public key (hallpass-server live-key prints it)")
            }
            return text
        }
        guard !keys.isEmpty else { throw keysNode.error("live.keys needs at least one key") }
        var bounds = LiveBounds(keys: keys)
        if let actions = fields["actions"] {
            bounds.actions = Set(
                try actions.list().map { entry throws(ConfigurationError) in
                    let text = try entry.string()
                    guard LiveBounds.allActions.contains(text) else {
                        throw entry.error("'\(text.prefix(40))' is not a live action (\(LiveBounds.allActions.joined(separator: ", ")))")
                    }
                    return text
                })
        }
        if let longest = fields["longest"] {
            let text = try longest.string()
            guard let seconds = DurationText.seconds(text), seconds >= 60, Int64(seconds) <= LiveBounds.mostLongest else {
                throw longest.error("'\(text.prefix(40))' is not a duration from 1m to 24h (90m, 3h)")
            }
            bounds.longestSeconds = Int64(seconds)
        }
        if let rooms = fields["rooms"] {
            bounds.rooms = Set(try rooms.list().map { entry throws(ConfigurationError) in try entry.string() })
        }
        if let groups = fields["groups"] {
            bounds.groups = Set(try groups.list().map { entry throws(ConfigurationError) in try entry.string() })
        }
        return bounds
    }

    /// When the lesson in force at `now` ends (Unix seconds): the nearest end
    /// of the policy's schedules active now, on the policy's clock (its
    /// `timezone:`, else the server's). nil when no schedule is active.
    public func lessonEnd(now: Int64) -> Int64? {
        guard let school, !school.schedules.isEmpty else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        if let name = school.timeZone, let zone = TimeZone(identifier: name) { calendar.timeZone = zone }
        let date = Date(timeIntervalSince1970: TimeInterval(now))
        let parts = calendar.dateComponents([.weekday, .hour, .minute, .second], from: date)
        guard let weekday = parts.weekday, let hour = parts.hour, let minute = parts.minute else { return nil }
        // Foundation's Sunday is 1; the policy's Monday is 1.
        guard let day = Weekday(rawValue: weekday == 1 ? 7 : weekday - 1) else { return nil }
        let time = LocalTime(weekday: day, hour: hour, minute: minute)
        let left = school.schedules.values.compactMap { $0.minutesLeft(at: time) }.min()
        guard let left else { return nil }
        // The schedule counts whole minutes from the start of this one.
        return now - Int64(parts.second ?? 0) + Int64(left) * 60
    }
}
