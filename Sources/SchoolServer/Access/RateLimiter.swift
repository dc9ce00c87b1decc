import NIOCore
import Synchronization

/// At most `perMinute` requests a key (an address, a machine) in each
/// minute from the key's first request: the sign-in form, the start of an
/// OpenID sign-in and enrolment by address, the machines' signed requests by
/// machine. Kept in memory by each server instance (several instances each
/// allow as many). The table is bounded: past `maxKeys` keys, the ended
/// windows are dropped (at most once a second), and while it stays full a key
/// it has never seen is refused, so a flood from many addresses costs the
/// server a fixed amount of memory and refuses newcomers for the rest of the minute.
final class RateLimiter: Sendable {
    let perMinute: Int
    let maxKeys: Int
    private struct Table {
        var windows: [String: (start: Int64, count: Int)] = [:]
        var prunedAt: Int64 = .min
    }
    private let table = Mutex(Table())

    init(perMinute: Int, maxKeys: Int = 10_000) {
        self.perMinute = perMinute
        self.maxKeys = maxKeys
    }

    /// Counts a request of `key` at `now` (Unix seconds); false when it is one too many.
    func allow(_ key: String, now: Int64) -> Bool {
        table.withLock { table in
            if table.windows[key] == nil, table.windows.count >= maxKeys {
                if table.prunedAt != now {
                    table.prunedAt = now
                    table.windows = table.windows.filter { now - $0.value.start < 60 }
                }
                if table.windows.count >= maxKeys { return false }
            }
            var window = table.windows[key] ?? (now, 0)
            if now - window.start >= 60 { window = (now, 0) }
            window.count += 1
            table.windows[key] = window
            return window.count <= perMinute
        }
    }

    var keys: Int { table.withLock { $0.windows.count } }
}

extension RateLimiter {
    /// The key of a peer's address: an IPv4 address as it is, an IPv6 address
    /// by its /64, which one network hands out whole (SLAAC, privacy
    /// addresses), so that one host cycling through its network's addresses
    /// counts once. An IPv4 address mapped into IPv6 is the IPv4 address.
    static func key(_ address: SocketAddress?) -> String {
        guard let ip = address?.ipAddress else { return "unknown" }
        return key(ip)
    }

    static func key(_ ip: String) -> String {
        guard ip.contains(":") else { return ip }
        if let last = ip.split(separator: ":").last, last.contains(".") { return String(last) }
        let halves = ip.components(separatedBy: "::")
        guard halves.count <= 2 else { return ip }
        let head = halves[0].isEmpty ? [] : halves[0].split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        let tail = halves.count == 2 && !halves[1].isEmpty ? halves[1].split(separator: ":", omittingEmptySubsequences: false).map(String.init) : []
        let missing = 8 - head.count - tail.count
        guard halves.count == 2 ? missing >= 1 : missing == 0 else { return ip }
        let groups = head + Array(repeating: "0", count: halves.count == 2 ? missing : 0) + tail
        guard groups.count == 8, groups.allSatisfy({ (1...4).contains($0.count) && UInt16($0, radix: 16) != nil }) else { return ip }
        return "v6:" + groups.prefix(4).map { String(UInt16($0, radix: 16)!, radix: 16) }.joined(separator: ":") + "::/64"
    }
}
