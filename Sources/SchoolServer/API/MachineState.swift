/// What the server makes of a machine from its last check-ins
/// (docs/server.md, "Machine states"). Pure: the time and the published
/// version are passed in. The first that applies wins, in this order:
/// a revoked machine is `revoked`; one silent for `staleAfter` (or never
/// heard from) `stale`; one not filtering `unfiltered`; one on older rules
/// than the published bundle `behind`; otherwise `ok`.
public enum MachineState: String, Sendable, Hashable, Codable, CaseIterable {
    case ok, stale, unfiltered, behind, revoked

    public static func of(_ machine: StoredMachine, now: Int64, staleAfter: Int, publishedVersion: Int64) -> MachineState {
        if machine.revokedAt != nil { return .revoked }
        guard let at = machine.checkInAt, let checkIn = machine.lastCheckIn, now - at < Int64(staleAfter) else { return .stale }
        if checkIn.filterData != .running { return .unfiltered }
        // Drops while failing open are packets that went out unjudged. A
        // restarted filter-control counts from zero again: only growth counts.
        if checkIn.failMode == .open, let previous = machine.previousQueueDrops, checkIn.queueDrops > previous { return .unfiltered }
        if checkIn.rulesVersion < publishedVersion { return .behind }
        return .ok
    }
}
