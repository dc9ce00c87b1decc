import HallpassIPC
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import UnixSignals
#if canImport(Glibc)
import Glibc
#endif

/// Runs filter-data (DataSupervisor) until the shutdown, then stops it: it
/// gives held packets their default and sends the verdicts in hand. It
/// stops after every service but the audit log and the notices, so
/// filtering goes on until the end; the services stopped before it answer
/// at once (their waits for filter-data end with the shutdown's
/// cancellation), so its turn comes at once too.
struct DataSupervisorService: Service {
    let control: Control
    let logger: Logger

    func run() async throws {
        let supervisor = control.supervisor
        await withGracefulShutdownHandler {
            await supervisor.run()
        } onGracefulShutdown: {
            supervisor.stop()
        }
    }
}

/// Runs the inspection proxy (hallpass-proxy) as filter-data is run, and
/// stops it before filter-data (services stop in reverse order): the
/// connections it relays end, then filtering ends, then the kernel rules go.
struct ProxySupervisorService: Service {
    let control: Control

    func run() async throws {
        guard let supervisor = control.proxySupervisor else {
            try? await gracefulShutdown()
            return
        }
        await withGracefulShutdownHandler {
            await supervisor.run()
        } onGracefulShutdown: {
            supervisor.stop()
        }
    }
}

/// The school's clock: every second the policy in force is worked out again
/// (schedules switch at the minute, exams and overrides end at their time, a
/// stepped clock is simply read again); a change reaches filter-data and
/// cuts the open connections it now blocks.
struct PolicyClockService: Service {
    let control: Control

    func run() async throws {
        // Cancelled at the shutdown, the first hand-over too: a stop right after the
        // start must not wait for filter-data's answer. The sleep ends early, and that is no error.
        await cancelWhenGracefulShutdown {
            await control.applyPolicy(reason: "start")
            while (try? await Task.sleep(for: .seconds(1))) != nil {
                await control.applyPolicy(reason: "the school's clock", skipWhenBusy: true)
            }
        }
    }
}

/// Looks up the SafeSearch enforcement hosts the policy needs when their
/// answers are due (it checks every second: a failed lookup is retried
/// after 1 s, then 2, 4, ... up to 30 s); changed addresses go to
/// filter-data at once (`Control.refreshSafeSearch`).
struct SafeSearchService: Service {
    let control: Control
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown {
            repeat {
                await control.refreshSafeSearch()
            } while (try? await Task.sleep(for: .seconds(1))) != nil
        }
    }
}

/// "Ready" means filtering: once filter-data said it filters (its hello,
/// with the first policy, which carries the SafeSearch addresses resolved
/// at start), filter-control logs a "ready" line and tells systemd READY=1
/// (the unit is `Type=notify`, so `systemctl start` and the units ordered
/// after hallpass wait for it).
struct ReadinessService: Service {
    let control: Control
    let notifier: SystemdNotifier?
    let logger: Logger

    func run() async throws {
        let supervisor = control.supervisor
        await cancelWhenGracefulShutdown {
            guard let version = await supervisor.filtering() else { return }
            let safeSearch = await control.safeSearchSummary()
            let line = "ready: filter-data filters with rules version \(version)" + (safeSearch.map { "; SafeSearch: \($0)" } ?? "")
            logger.notice("\(line)")
            guard let notifier else { return }
            do {
                try notifier.notify("READY=1\nSTATUS=filtering with rules version \(version)")
            } catch {
                logger.warning("cannot tell systemd that hallpass is ready: \(error)")
            }
        }
        try? await gracefulShutdown()
    }
}

/// Asks `rules.source` for a newer bundle every `rules.refresh` (±10 %).
struct RuleRefreshService: Service {
    let control: Control
    let interval: Duration
    let enabled: Bool

    func run() async throws {
        guard enabled else {
            try? await gracefulShutdown()
            return
        }
        let seconds = Double(interval.components.seconds)
        await cancelWhenGracefulShutdown {
            while (try? await Task.sleep(for: .seconds(seconds * Double.random(in: 0.9...1.1)))) != nil {
                _ = await control.refresh()
            }
        }
    }
}

/// Posts the audit records and the check-ins to the school's server
/// (`school:`); stops at once on shutdown: what is not posted stays in the
/// outbox for the next start.
struct SchoolReportingService: Service {
    let reporter: SchoolReporter

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await reporter.run()
        }
    }
}

/// Holds the live channel to the school's server (`school:`); stops at
/// once on shutdown: the state held is in its file for the next start.
struct LiveChannelService: Service {
    let channel: LiveChannel

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await channel.run()
        }
    }
}

/// Sends the block page's access requests to the school's server; stops at
/// once on shutdown: what is not sent waits in the store for the next start.
struct AccessRequestForwardingService: Service {
    let forwarder: AccessRequestForwarder

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await forwarder.run()
        }
    }
}

/// SIGHUP reloads (systemd's reload runs `filterctl reload`, which reports
/// the result; SIGHUP from elsewhere gets the same reload, logged). SIGUSR1
/// reopens the audit log's file (logrotate's convention).
struct SignalService: Service {
    let control: Control
    let logger: Logger

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup, .sigusr1)
        await cancelWhenGracefulShutdown {
            for await signal in signals {
                if signal == .sigusr1 {
                    logger.info("SIGUSR1: reopening the audit log")
                    control.audit?.reopen()
                } else {
                    logger.info("SIGHUP: reloading")
                    _ = await control.reload()
                }
            }
        }
    }
}

/// A service that works through a queue: on shutdown it is told to finish,
/// writes what is queued, and returns (the audit log, the desktop notices).
/// Listed after filter-data's supervisor, it stops before it, so the last
/// reports of a stopping filter-data may still arrive after it finished;
/// they are counted as dropped.
struct DrainingService: Service {
    let body: @Sendable () async -> Void
    let finish: @Sendable () -> Void

    init(_ body: @escaping @Sendable () async -> Void, finish: @escaping @Sendable () -> Void) {
        self.body = body
        self.finish = finish
    }

    func run() async throws {
        await withGracefulShutdownHandler {
            await body()
        } onGracefulShutdown: {
            finish()
        }
    }
}

extension Control {
    /// The periodic refresh: reload only when a newer bundle was installed.
    func refresh() async -> UpdateOutcome? {
        guard let updater else { return nil }
        let outcome = await updater.update()
        if case .installed = outcome {
            await reload()
        } else {
            logger.info("rule refresh: \(outcome)")
        }
        return outcome
    }
}
