import FilterData
import FilterDataKernel
import Foundation
import NIOCore
import NIOPosix
import Testing

/// The NFQUEUE socket against the real kernel, in a namespace the test makes:
/// a queue another socket holds is refused with a clear error, and the
/// refused socket releases what it opened exactly once (it used to free its
/// buffer twice and abort the process with glibc's `double free`).
@Suite(.serialized) struct QueueBindIntegrationTests {
    /// The outcome of one bind, carried out of the namespace's thread.
    enum Bind: Sendable, Equatable {
        case bound
        case refused(operation: String, errno: Int32, message: String)
    }

    @Test func aQueueAlreadyBoundIsRefusedAndTheSocketClosesOnce() async throws {
        let network = try TestNetwork()
        defer { network.tearDown() }
        // One thread in the client namespace: the netlink sockets are made there,
        // so the queue numbers are that namespace's, not the machine's.
        let group = try AuditIntegrationTests.eventLoopGroup(inNamespace: network.client)
        let outcomes: [Bind]
        do {
            outcomes = try await Self.bindWhileHeld(on: group.next())
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()

        #expect(outcomes.count == 4)
        #expect(outcomes.first == .bound)
        for refused in outcomes.dropFirst().prefix(2) {
            guard case .refused(let operation, let code, let message) = refused else {
                Issue.record("a second bind of a held queue succeeded: \(refused)")
                continue
            }
            #expect(operation == "bind queue 77")
            #expect(code == EPERM)
            #expect(message.contains("already bound by another process"), "\(message)")
        }
        #expect(outcomes.last == .bound)
    }

    /// Binds queue 77 and, while it is held, twice more; then releases the
    /// holder and binds once more.
    static func bindWhileHeld(on loop: any EventLoop) async throws -> [Bind] {
        try await loop.submit { () -> [Bind] in
            func bind() -> (NetfilterQueueSocket?, Bind) {
                do {
                    return (try NetfilterQueueSocket(queue: 77, failOpen: false), .bound)
                } catch {
                    return (nil, .refused(operation: error.operation, errno: error.errno, message: error.description))
                }
            }
            var outcomes: [Bind] = []
            var holder = bind()
            outcomes.append(holder.1)
            // Each refused socket is released at the end of its statement.
            outcomes.append(bind().1)
            outcomes.append(bind().1)
            holder.0 = nil
            // The kernel frees the queue when the socket's last reference goes.
            // Other suites of this process spawn programs meanwhile, and a child
            // between its fork and its exec holds a copy of every descriptor (the
            // socket is close-on-exec, so no longer than that): a few tries.
            var again = bind()
            for _ in 0..<50 where again.1 != .bound {
                usleep(20_000)
                again = bind()
            }
            outcomes.append(again.1)
            return outcomes
        }.get()
    }
}
