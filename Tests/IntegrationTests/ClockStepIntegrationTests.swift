import Foundation
import Testing

/// A step of the wall clock under a running filter-control (NTP's first sync
/// after a lab machine boots, an admin setting the time) restarts nothing:
/// the supervisor's health check and restart delays run on a monotonic clock.
///
/// filter-control runs under libfaketime (Debian's faketime) with only its
/// wall clock faked: CLOCK_MONOTONIC and CLOCK_BOOTTIME stay real
/// (DONT_FAKE_MONOTONIC), and the offset is read from a file at every call
/// (FAKETIME_NO_CACHE), so the test steps the clock while filter-control runs.
extension FilterIntegrationTests {
    static let libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

    /// filter-control's wall clock: the time of filter-data's counters in `filterctl status`,
    /// taken when filter-data answers the ping that status sends it.
    func wallClock(_ network: TestNetwork) throws -> Date? {
        let text = try shell("\(TestNetwork.binaries)/filterctl status --json --socket \(network.folder)/control.sock").output
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
            let data = object["dataProcess"] as? [String: Any], let at = data["countersAt"] as? String
        else { return nil }
        return ISO8601DateFormatter().date(from: at)
    }

    @Test func aStepOfTheWallClockRestartsNothing() throws {
        try #require(FileManager.default.fileExists(atPath: Self.libfaketime), "no libfaketime: scripts/install-deps.sh installs Debian's faketime")
        let network = try TestNetwork()
        defer { network.tearDown() }
        try network.startNginx()
        let (config, store) = try prepare(network)
        let offset = network.folder + "/wall-clock-offset"
        try "+0\n".write(toFile: offset, atomically: true, encoding: .utf8)
        let faked = [
            "env", "LD_PRELOAD=\(Self.libfaketime)", "FAKETIME_TIMESTAMP_FILE=\(offset)", "FAKETIME_NO_CACHE=1", "DONT_FAKE_MONOTONIC=1",
            // Without it, libfaketime's constructor makes shared memory for the children and
            // setenv()s its name, which moves `environ` off the stack, next to which Swift's
            // runtime finds argv: filter-control would start with no arguments. A name that
            // does not exist: nothing shared, and the environment stays where it was.
            "FAKETIME_SHARED=none none",
        ]
        _ = try startHallpass(network, config: config, store: store, wrapper: faked)
        try network.waitFor("filter-data to filter") { network.log("filter-control").contains("is filtering with rules version 1") }
        let pid = try filterData(network)
        // filter-data, in its sandbox, gets none of filter-control's environment: not the
        // preloaded libfaketime, only what the supervisor sets for it.
        let environment = try String(contentsOfFile: "/proc/\(pid)/environ", encoding: .utf8).split(separator: "\0")
        #expect(environment == ["SWIFT_BACKTRACE=enable=no"], "\(environment)")
        let before = try #require(try wallClock(network), "no counters in filterctl status")
        #expect(abs(before.timeIntervalSinceNow) < 5, "filter-control's wall clock is not the real one yet: \(before)")

        // 30 s forward, then 60 s back (30 s behind the real clock).
        for (step, seconds) in [("+30s", 30.0), ("-30s", -30.0)] {
            try (step + "\n").write(toFile: offset, atomically: true, encoding: .utf8)
            // Longer than the supervisor waits for an answer (5 s): a supervisor on the wall
            // clock kills filter-data at its first health check after a step forward, and
            // checks nothing for the length of a step back. Nothing asks filter-control
            // anything meanwhile (status's own ping would count as an answer).
            sleep(8)
            let clock = try #require(try wallClock(network), "no counters in filterctl status")
            #expect(abs(clock.timeIntervalSinceNow - seconds) < 5, "filter-control's wall clock did not step \(step): \(clock)")
            #expect(try filterData(network) == pid, "filter-data changed after the step \(step)\n\(network.log("filter-control"))")
        }
        let log = network.log("filter-control")
        #expect(!log.contains("killing it") && !log.contains("restarting"), "\(log)")
        #expect(try network.curl("https", "allowed.test").status == 0)
        #expect([35, 56].contains(try network.curl("https", "blocked.test").status))
        let status = try shell("\(TestNetwork.binaries)/filterctl status --socket \(network.folder)/control.sock")
        #expect(status.output.contains("pid \(pid),") && status.output.contains("0 restarts"), "\(status.output)")

        // With the clock behind, the health check still does its work: a filter-data that
        // stops answering is killed and started again.
        let silent = try filterData(network)
        #expect(kill(silent, SIGSTOP) == 0)
        var replacement: Int32 = 0
        try network.waitFor("the silent filter-data to be replaced") {
            let pids = network.processIDs(runningExecutable: "filter-data")
            guard let new = pids.first, !pids.contains(silent) else { return false }
            replacement = new
            return true
        }
        #expect(network.log("filter-control").contains("filter-data \(silent) has not answered for 5 seconds; killing it"))
        try network.waitFor("the new filter-data to filter") {
            network.log("filter-control").contains("filter-data \(replacement) is filtering with rules version 1")
        }
        #expect([35, 56].contains(try network.curl("https", "blocked.test").status))
    }
}
