import Hummingbird
import Logging

/// The routes of the school's own tools, behind an API token whose role may
/// view machines; a token with a scope sees the machines of its rooms.
struct AdminRoutes {
    let storage: any ServerStorage
    let staleAfter: Int
    let clock: @Sendable () -> Int64

    struct MachineView: Codable, Sendable {
        let id: String
        let room: String
        let hostname: String
        let state: MachineState
        let enrolledAt: Int64
        let revokedAt: Int64?
        let lastCheckInAt: Int64?
        let lastCheckIn: CheckIn?
        let storedThrough: Int64
        let recordsDropped: Int64
    }

    struct MachinesResponse: ResponseEncodable {
        let publishedVersion: Int64
        let machines: [MachineView]
    }

    func add(to router: Router<ServerRequestContext>) {
        router.group("/api/v1/machines")
            .add(middleware: APITokenMiddleware(storage: storage, permission: .viewMachines))
            .get { _, context in try await machines(scope: context.principal?.scope ?? Scope(rooms: [""])) }
    }

    /// The machines in `scope` (a machine is in it by its room; a scope of groups only holds none).
    func machines(scope: Scope) async throws -> MachinesResponse {
        let published = try await storage.publishedVersion()
        let now = clock()
        let views = try await storage.machines().filter { scope.contains(room: $0.room) }.map { machine in
            MachineView(
                id: machine.id, room: machine.room, hostname: machine.hostname,
                state: MachineState.of(machine, now: now, staleAfter: staleAfter, publishedVersion: published),
                enrolledAt: machine.enrolledAt, revokedAt: machine.revokedAt, lastCheckInAt: machine.checkInAt,
                lastCheckIn: machine.lastCheckIn, storedThrough: machine.storedThrough, recordsDropped: machine.recordsDropped)
        }
        return MachinesResponse(publishedVersion: published, machines: views)
    }
}
