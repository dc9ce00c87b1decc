// Starting a child process with posix_spawn, waiting for it by its pid, and
// signalling it.
//
// unsafe in this file: the posix_spawn file actions and attributes and the
// signal sets are locals passed by address and destroyed before return;
// argv and the environment hold strdup'ed copies freed by a defer after
// posix_spawn returned; `environ` is read entry by entry, each copied before
// the next; waitpid fills a local status.
import CHallpassSys
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
public import SystemPackage

/// A child process of this one, by its pid.
public struct ProcessID: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public var description: String { String(rawValue) }

    /// Starts `executable` (looked up in PATH when it names no folder) with
    /// `arguments`.
    ///
    /// - `descriptors` maps a descriptor of this process to the number the
    ///   child sees it under (dup2, which clears close-on-exec on the copy);
    ///   standard input is /dev/null unless mapped.
    /// - Standard output and error are appended to `outputPath` when given
    ///   (created with mode 0644), else inherited unless mapped.
    /// - Every other descriptor of this process is closed in the child.
    /// - The child gets this process's environment with `environment` set on
    ///   top, or with `inheritEnvironment` false `environment` alone.
    /// - The child starts with default signal handling and nothing blocked.
    public static func spawn(
        executable: String, arguments: [String], descriptors: [(from: FileDescriptor, to: FileDescriptor)] = [], outputPath: String? = nil,
        environment extra: [String: String] = [:], inheritEnvironment: Bool = true
    ) throws(Errno) -> ProcessID {
        var actions = unsafe posix_spawn_file_actions_t()
        unsafe posix_spawn_file_actions_init(&actions)
        defer { unsafe posix_spawn_file_actions_destroy(&actions) }
        if !descriptors.contains(where: { $0.to == .standardInput }) {
            unsafe posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        if let outputPath {
            unsafe posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            unsafe posix_spawn_file_actions_adddup2(&actions, 1, 2)
        }
        for mapping in descriptors {
            unsafe posix_spawn_file_actions_adddup2(&actions, mapping.from.rawValue, mapping.to.rawValue)
        }
        // The child holds what it is given and nothing else: filter-control's
        // own descriptors (the block page's listening sockets from NIO, the
        // admin socket, rule downloads in flight) are not all close-on-exec,
        // and filter-data must never inherit a network socket. Gaps below the
        // highest mapped descriptor are closed one by one, the rest at once.
        let given = Set([0, 1, 2] + descriptors.map(\.to.rawValue))
        let highest = given.max()!
        for gap in 3..<max(3, highest) where !given.contains(gap) {
            unsafe posix_spawn_file_actions_addclose(&actions, gap)
        }
        unsafe hp_spawn_add_close_from(&actions, highest + 1)
        var attributes = posix_spawnattr_t()
        unsafe posix_spawnattr_init(&attributes)
        defer { unsafe posix_spawnattr_destroy(&attributes) }
        // Default signal handling and nothing blocked: filter-control ignores
        // SIGTERM and SIGINT in favour of its own handling, and a test
        // runner's threads block most signals.
        var defaults = sigset_t()
        unsafe sigemptyset(&defaults)
        for signal in [SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD] { unsafe sigaddset(&defaults, signal) }
        var empty = sigset_t()
        unsafe sigemptyset(&empty)
        unsafe posix_spawnattr_setsigdefault(&attributes, &defaults)
        unsafe posix_spawnattr_setsigmask(&attributes, &empty)
        unsafe posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        var argv: [UnsafeMutablePointer<CChar>?] = unsafe ([executable] + arguments).map { unsafe strdup($0) } + [nil]
        defer { unsafe argv.forEach { unsafe free($0) } }
        // This process's environment (or none), with `extra` set on top.
        var environment: [UnsafeMutablePointer<CChar>?] = unsafe []
        var cursor = unsafe environ
        while inheritEnvironment, let entry = unsafe cursor.pointee {
            let text = unsafe String(cString: entry)
            if let name = text.split(separator: "=", maxSplits: 1).first, extra[String(name)] == nil { unsafe environment.append(strdup(entry)) }
            unsafe cursor += 1
        }
        unsafe environment += extra.map { unsafe strdup("\($0.key)=\($0.value)") } + [nil]
        defer { unsafe environment.forEach { unsafe free($0) } }
        var child: pid_t = 0
        // posix_spawn returns the error rather than setting errno, and is not interrupted.
        let result =
            unsafe executable.contains("/")
            ? posix_spawn(&child, executable, &actions, &attributes, &argv, &environment)
            : posix_spawnp(&child, executable, &actions, &attributes, &argv, &environment)
        guard result == 0 else { throw Errno(rawValue: result) }
        return ProcessID(rawValue: child)
    }

    /// Reaps the child if it has ended (or waits for it with `blocking`): its
    /// exit status, the code or 128 + the signal that ended it; nil while it
    /// runs. A child that somebody else reaped (ECHILD) is gone either way:
    /// 255.
    public func reap(blocking: Bool) -> Int32? {
        var raw: Int32 = 0
        let result: pid_t
        do {
            result = try retryingOnInterrupt { unsafe waitpid(rawValue, &raw, blocking ? 0 : WNOHANG) }
        } catch {
            return 255
        }
        guard result == rawValue else { return nil }
        return (raw & 0x7F) == 0 ? (raw >> 8) & 0xFF : 128 + (raw & 0x7F)
    }

    /// kill(2).
    public func send(_ signal: Int32) throws(Errno) {
        guard kill(rawValue, signal) == 0 else { throw Errno(rawValue: errno) }
    }
}

/// This process's environment, which children inherit.
public enum Environment {
    /// unsetenv(3): children started after this do not inherit `name`.
    public static func remove(_ name: String) {
        // unsafe: the name is a C string for this call only.
        unsafe unsetenv(name)
    }
}
