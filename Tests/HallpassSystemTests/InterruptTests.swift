import Foundation
import Glibc
import HallpassSystem
import Synchronization
import SystemPackage
import Testing

@Suite struct InterruptTests {
    /// A call that fails with EINTR is made again until it answers; other
    /// errors are thrown as they are; a result is returned at once.
    @Test func anInterruptedCallIsMadeAgain() throws {
        var calls = 0
        let value = try retryingOnInterrupt { () -> Int32 in
            calls += 1
            if calls < 3 {
                errno = EINTR
                return -1
            }
            return 42
        }
        #expect(value == 42)
        #expect(calls == 3)

        calls = 0
        #expect(throws: Errno.noSuchFileOrDirectory) {
            try retryingOnInterrupt { () -> Int in
                calls += 1
                errno = calls == 1 ? EINTR : ENOENT
                return -1
            }
        }
        #expect(calls == 2)

        calls = 0
        #expect(try retryingOnInterrupt { () -> Int in
            calls += 1
            return 0
        } == 0)
        #expect(calls == 1)
    }

    /// A poll interrupted by a signal is reported (nil), not retried: a
    /// waiting loop learns of SIGTERM that way.
    @Test func anInterruptedPollIsReportedNotRetried() throws {
        let (read, write) = try FileDescriptor.pipe(options: .closeOnExec)
        defer {
            read.closeQuietly()
            write.closeQuietly()
        }
        var entries = [pollfd(fd: read.rawValue, events: Int16(POLLIN), revents: 0)]
        #expect(try Poll.wait(&entries, timeoutMilliseconds: 0) == 0)
        _ = try write.writeSome(Array("x".utf8))
        #expect(try Poll.wait(&entries, timeoutMilliseconds: 1000) == 1)
        #expect(try Poll.wait(for: Int16(POLLIN), on: read, timeoutMilliseconds: 1000))

        // SIGALRM sent to this very thread while poll waits on the empty pipe
        // (again every 20 ms until poll returns, in case the first one comes
        // before the wait begins). poll is never restarted after a handler.
        var action = sigaction()
        action.__sigaction_handler = .init(sa_handler: { _ in })
        var previous = sigaction()
        #expect(sigaction(SIGALRM, &action, &previous) == 0)
        var drained = [UInt8](repeating: 0, count: 8)
        _ = try read.readSome(into: &drained)
        let target = pthread_self()
        let sender = SignalSender()
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            while !sender.done.load(ordering: .acquiring) {
                usleep(20_000)
                if !sender.done.load(ordering: .acquiring) { pthread_kill(target, SIGALRM) }
            }
            finished.signal()
        }
        // The test runner's threads block most signals: let this one take SIGALRM while it waits.
        var alarm = sigset_t()
        sigemptyset(&alarm)
        sigaddset(&alarm, SIGALRM)
        var mask = sigset_t()
        #expect(pthread_sigmask(SIG_UNBLOCK, &alarm, &mask) == 0)
        var entry = [pollfd(fd: read.rawValue, events: Int16(POLLIN), revents: 0)]
        let result = try Poll.wait(&entry, timeoutMilliseconds: 10_000)
        sender.done.store(true, ordering: .releasing)
        finished.wait()
        _ = pthread_sigmask(SIG_SETMASK, &mask, nil)
        _ = sigaction(SIGALRM, &previous, nil)
        #expect(result == nil)
    }

    @Test func theMonotonicClockDoesNotGoBack() {
        let first = MonotonicClock.nanoseconds()
        let second = MonotonicClock.nanoseconds()
        #expect(second >= first)
        #expect(first > 0)
    }
}

final class SignalSender: Sendable {
    let done = Atomic<Bool>(false)
}
