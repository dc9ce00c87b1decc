import Foundation
@testable import SchoolServer
import Testing

/// The server's rate limits: the limiter's windows and its bounded table,
/// then through the real server (SQLite) a machine over `machines.requestRate`
/// and an address over `machines.enrolRate`, answered 429 with Retry-After,
/// and served again in the next minute of the test clock.
@Suite struct RateLimitTests {
    @Test func aKeyGetsItsAllowanceEachMinuteAndTheTableStaysBounded() {
        let limiter = RateLimiter(perMinute: 3, maxKeys: 4)
        #expect((0..<5).map { _ in limiter.allow("a", now: 100) } == [true, true, true, false, false])
        #expect(limiter.allow("a", now: 159) == false)
        #expect(limiter.allow("a", now: 160), "a new minute from the window's start")
        for key in ["b", "c", "d"] { #expect(limiter.allow(key, now: 160)) }
        // Full of live windows: a newcomer is refused, the known keep their allowance.
        #expect(!limiter.allow("e", now: 161) && limiter.keys == 4)
        #expect(limiter.allow("b", now: 161))
        // Once the windows end they are dropped and newcomers come in.
        #expect(limiter.allow("e", now: 221) && limiter.keys == 1)
    }

    @Test func aMachineOverItsRateAndAnAddressOverTheEnrolmentRateGet429() async throws {
        try await withRunningServer(.sqlite) { configuration in
            configuration.machines.requestRate = 10
            configuration.machines.enrolRate = 3
        } _: { server async throws in
            let machine = try await server.enrol(TestMachine())
            let checkIn =
                #"{"version":"1.0","rulesVersion":1,"filterData":"running","filterDataRestarts":0,"failMode":"open","queueDrops":0,"recordsWaiting":0,"recordsDropped":0,"users":[]}"#
            var statuses: [Int] = []
            for _ in 0..<11 { statuses.append(try await server.post("/api/v1/machine/checkin", checkIn, signedBy: machine).status) }
            #expect(statuses.prefix(10).allSatisfy { $0 == 200 }, "\(statuses)")
            let refused = try await server.post("/api/v1/machine/checkin", checkIn, signedBy: machine)
            #expect(refused.status == 429 && refused.header("Retry-After") == "60" && refused.text.contains(#""error":"rate-limited""#))
            // Another machine is not held back by this one.
            let other = try await server.enrol(TestMachine())
            #expect(try await server.post("/api/v1/machine/checkin", checkIn, signedBy: other).status == 200)
            // Unsigned requests under its id are refused for their signature and use none of its allowance;
            // the next minute it is served again.
            for _ in 0..<5 { #expect(try await server.post("/api/v1/machine/checkin", checkIn).status == 401) }
            server.clock.advance(60)
            #expect(try await server.post("/api/v1/machine/checkin", checkIn, signedBy: machine).status == 200)

            // Enrolment by address (a new minute began with the clock's step): three, then 429, a known token or not.
            for _ in 0..<3 {
                let answer = try await server.post("/api/v1/enrol", RunningServer.enrolBody(token: "hp1.x.unknown", machine: TestMachine()))
                #expect(answer.status == 401, "\(answer.status) \(answer.text)")
            }
            let fourth = try await server.post("/api/v1/enrol", RunningServer.enrolBody(token: "hp1.x.unknown", machine: TestMachine()))
            #expect(fourth.status == 429 && fourth.text.contains(#""error":"rate-limited""#), "\(fourth.status) \(fourth.text)")
        }
    }
}

@Suite struct RateLimitKeyTests {
    @Test(arguments: [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "v6:2001:db8:1:2::/64"),
        ("2001:db8:1:2::1", "v6:2001:db8:1:2::/64"),
        ("2001:0db8:0001:0002:ffff::9", "v6:2001:db8:1:2::/64"),
        ("::1", "v6:0:0:0:0::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("fe80::1::2", "fe80::1::2"),
    ])
    func anIPv6AddressCountsByItsNetwork(address: String, key: String) {
        #expect(RateLimiter.key(address) == key)
    }
}
