// The sandbox of hallpass's two confined processes, filter-data and
// hallpass-proxy: one way of locking down, two allow-lists (`Profile`).
// The only file of either that calls libseccomp.
import CHallpassSys
import CSeccomp
#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

/// Locks a process down once its sockets and rule store are open
/// (FIELD-NOTES gives the order: sockets, then signal handlers, then
/// privileges, then the seccomp filter):
///
/// 1. every capability but CAP_NET_ADMIN leaves the bounding set;
/// 2. the process becomes its unprivileged user with no supplementary
///    groups, keeping only CAP_NET_ADMIN, which NFQUEUE verdicts need
///    (without it the kernel answers each verdict with EPERM). The user is
///    the one filter-control hands over by number (`--uid`, `--gid`: the
///    package's own system user, `queue.user`); never root, and 65534
///    (`nobody`) when none is given;
/// 3. `no_new_privs`: nothing it could exec may gain privileges (and the
///    proxy is made undumpable: see `Profile.dumpable`);
/// 4. a seccomp allow-list: every system call not named below fails with
///    EPERM. There is no `socket`, `connect`, `bind`, `execve`, `ptrace`;
///    `open`/`openat` only without write, create, truncate or append flags;
///    `clone` only for threads (`clone3` answers ENOSYS so the C library
///    falls back to `clone`, whose flags a filter can see); `ioctl` only TCGETS.
///
/// The proxy's profile (`Profile.proxy`) adds what relaying TCP takes and no
/// more: `socket` for AF_INET, AF_INET6 and AF_NETLINK only (its connections
/// to servers, and the sock_diag question of who opened a connection),
/// `connect`, `accept4`, socket options and names, `shutdown`, and the epoll,
/// eventfd and timerfd calls of its event loop, and `listen` on its own two
/// listeners only (made before the lock-down). Still no `bind`, `execve`, or
/// writes to files.
public enum Sandbox {
    /// The system calls a process may make, besides the conditional ones every profile has.
    public struct Profile: Sendable {
        public var name: String
        var allowed: [String]
        /// The address families `socket` may make; empty: no `socket` at all.
        var socketFamilies: [Int32]
        /// Whether `prctl(PR_SET_NAME)` is allowed (an event loop names its threads).
        var threadNames: Bool
        /// The descriptors `listen` may be called on (its own listeners, which
        /// SwiftNIO sets listening again when it adopts them); none: no `listen`.
        var listeners: [Int32] = []
        /// Whether the process stays as dumpable as the change of user leaves it
        /// (fs.suid_dumpable: 0 on a plain Debian, 2 with systemd-coredump). The
        /// proxy is made undumpable whatever it says: the interception CA's key
        /// it holds never lands in a core file.
        var dumpable = true

        /// filter-data: its queue socket, memory, time, threads.
        public static let filterData = Profile(name: "filter-data", allowed: Sandbox.allowed, socketFamilies: [], threadNames: false)

        /// hallpass-proxy: filter-data's, and TCP relaying on an event loop;
        /// `listen` only on `listeners`, the sockets it bound before.
        public static func proxy(listeners: [Int32]) -> Profile {
            var profile = proxyBase
            profile.listeners = listeners
            return profile
        }

        static let proxyBase = Profile(
            name: "hallpass-proxy",
            allowed: Sandbox.allowed + [
                "connect", "accept", "accept4", "setsockopt", "getsockopt", "getsockname", "getpeername", "shutdown", "readv",
                "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "pipe2", "timerfd_create", "timerfd_settime",
                "timerfd_gettime", "sched_getparam", "sched_setscheduler", "setpriority", "sysinfo", "getrusage",
            ],
            socketFamilies: [AF_INET, AF_INET6, AF_NETLINK], threadNames: true, dumpable: false)
    }

    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var step: String
        public var errno: Int32
        public var description: String { "sandbox: \(step) failed: \(Errno(rawValue: errno))" }
    }

    /// The user and group filter-data runs as when none is given (`nobody`, `nogroup`).
    public static let unprivilegedID: UInt32 = 65534

    /// The user and group the sandbox switches to: never root.
    public struct Identity: Sendable, Hashable {
        public var uid: UInt32
        public var gid: UInt32
        public static let nobody = Identity(checkedUID: unprivilegedID, gid: unprivilegedID)

        /// nil for uid or gid 0: filter-data never runs as root or with root's group.
        public init?(uid: UInt32, gid: UInt32) {
            guard uid != 0, gid != 0 else { return nil }
            self.init(checkedUID: uid, gid: gid)
        }

        private init(checkedUID uid: UInt32, gid: UInt32) {
            self.uid = uid
            self.gid = gid
        }
    }
    public static let netAdmin: UInt64 = 1 << 12  // CAP_NET_ADMIN
    static let lastCapability = 40  // CAP_CHECKPOINT_RESTORE in Linux 5.9+

    /// System calls a running filter-data makes: the queue socket, memory,
    /// time, threads and the Swift runtime (FIELD-NOTES lists what each needs).
    /// `restart_syscall` is how the kernel resumes a `poll` with a timeout
    /// that a stop interrupted (SIGSTOP and SIGCONT, a debugger, the freezer
    /// of a suspend): without it filter-data woke to EPERM and exited.
    static let allowed = [
        "restart_syscall", "recvfrom", "recvmsg", "sendto", "sendmsg", "poll", "ppoll", "read", "write", "writev", "close",
        "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "futex", "futex_waitv", "set_robust_list", "rseq",
        "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "getrandom",
        "rt_sigreturn", "rt_sigprocmask", "sigaltstack", "exit", "exit_group", "tgkill", "getpid", "gettid",
        "fstat", "newfstatat", "statx", "lseek", "pread64", "readlink", "uname", "sched_yield",
        "sched_getaffinity", "getuid", "geteuid", "getgid", "getegid", "membarrier", "prlimit64", "fcntl",
    ]

    /// Applies every step; on failure the process must exit (it is half locked down).
    public static func lockDown(as identity: Identity = .nobody, profile: Profile = .filterData) throws(Failure) {
        // 1. Bounding set: needs CAP_SETPCAP, which root still has here.
        for capability in 0...lastCapability where capability != 12 {
            if hp_capbset_drop(Int32(capability)) != 0, errno != EINVAL { throw Failure(step: "drop capability \(capability)", errno: errno) }
        }
        // 2. Unprivileged user, CAP_NET_ADMIN kept across the uid change.
        guard setgroups(0, nil) == 0 else { throw Failure(step: "setgroups", errno: errno) }
        guard hp_setresgid(identity.gid, identity.gid, identity.gid) == 0 else { throw Failure(step: "setresgid", errno: errno) }
        guard hp_set_keep_caps(1) == 0 else { throw Failure(step: "keep capabilities", errno: errno) }
        guard hp_setresuid(identity.uid, identity.uid, identity.uid) == 0 else { throw Failure(step: "setresuid", errno: errno) }
        guard hp_capset(netAdmin, netAdmin, 0) == 0 else { throw Failure(step: "capset", errno: errno) }
        guard hp_clear_ambient_caps() == 0 || errno == EINVAL else { throw Failure(step: "clear ambient capabilities", errno: errno) }
        guard hp_set_keep_caps(0) == 0 else { throw Failure(step: "keep capabilities off", errno: errno) }
        // After the change of user, which sets the dumpable flag from fs.suid_dumpable.
        if !profile.dumpable {
            guard hp_set_undumpable() == 0 else { throw Failure(step: "undumpable", errno: errno) }
        }
        // 3.
        guard hp_set_no_new_privs() == 0 else { throw Failure(step: "no_new_privs", errno: errno) }
        // 4.
        try loadSeccompFilter(profile)
    }

    static func loadSeccompFilter(_ profile: Profile) throws(Failure) {
        // unsafe: libseccomp's filter context, released by the defer below and used only before it.
        guard let filter = unsafe seccomp_init(hp_scmp_act_errno(UInt16(EPERM))) else { throw Failure(step: "seccomp_init", errno: ENOMEM) }
        defer { unsafe seccomp_release(filter) }
        func add(_ name: String, action: UInt32 = SCMP_ACT_ALLOW, _ conditions: [scmp_arg_cmp] = []) throws(Failure) {
            // unsafe: the name is passed as a C string for the call only.
            let number = unsafe seccomp_syscall_resolve_name(name)
            // A name this architecture does not have (e.g. `open` on arm64) is simply not there to allow.
            guard number != __NR_SCMP_ERROR else { return }
            // unsafe: libseccomp copies the conditions from the array inside the closure.
            let result = unsafe conditions.withUnsafeBufferPointer { unsafe seccomp_rule_add_array(filter, action, number, UInt32($0.count), $0.baseAddress) }
            guard result == 0 else { throw Failure(step: "seccomp rule for \(name)", errno: -result) }
        }
        for name in profile.allowed { try add(name) }
        for family in profile.socketFamilies {
            try add("socket", [scmp_arg_cmp(arg: 0, op: SCMP_CMP_EQ, datum_a: UInt64(family), datum_b: 0)])
        }
        for descriptor in profile.listeners {
            try add("listen", [scmp_arg_cmp(arg: 0, op: SCMP_CMP_EQ, datum_a: UInt64(descriptor), datum_b: 0)])
        }
        if profile.threadNames {
            try add("prctl", [scmp_arg_cmp(arg: 0, op: SCMP_CMP_EQ, datum_a: 15 /* PR_SET_NAME */, datum_b: 0)])
        }
        // Opening files only to read them (a new rule store after a rules change).
        let writeFlags = UInt64(O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)
        try add("openat", [scmp_arg_cmp(arg: 2, op: SCMP_CMP_MASKED_EQ, datum_a: writeFlags, datum_b: 0)])
        try add("open", [scmp_arg_cmp(arg: 1, op: SCMP_CMP_MASKED_EQ, datum_a: writeFlags, datum_b: 0)])
        // Threads, never new processes.
        let thread = UInt64(CLONE_THREAD)
        try add("clone", [scmp_arg_cmp(arg: 0, op: SCMP_CMP_MASKED_EQ, datum_a: thread, datum_b: thread)])
        try add("clone3", action: hp_scmp_act_errno(UInt16(ENOSYS)))
        try add("ioctl", [scmp_arg_cmp(arg: 1, op: SCMP_CMP_EQ, datum_a: UInt64(TCGETS), datum_b: 0)])
        let result = unsafe seccomp_load(filter)
        guard result == 0 else { throw Failure(step: "seccomp_load", errno: -result) }
    }

    /// Tries what the sandbox must refuse and reports each outcome as
    /// `name: refused (ERRNO)` or `name: ALLOWED`. Used by the tests on the real binary.
    public static func probeDenials() -> [(name: String, refused: Bool, detail: String)] {
        var results: [(String, Bool, String)] = []
        func record(_ name: String, _ value: Int32) {
            let code = errno
            if value >= 0 {
                results.append((name, false, "ALLOWED"))
                close(value)
            } else {
                results.append((name, true, "refused (\(Errno(rawValue: code)))"))
            }
        }
        record("socket(AF_INET)", socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0))
        record("socket(AF_INET6)", socket(AF_INET6, Int32(SOCK_DGRAM.rawValue), 0))
        record("socket(AF_UNIX)", socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0))
        var address = sockaddr()
        // unsafe (the probes): each call gets a local or a literal for its duration; they must fail anyway.
        unsafe record("connect", connect(0, &address, socklen_t(MemoryLayout<sockaddr>.size)))
        unsafe record("bind", bind(0, &address, socklen_t(MemoryLayout<sockaddr>.size)))
        unsafe record("open for writing", open("/tmp/hallpass-sandbox-probe", O_WRONLY | O_CREAT, 0o600))
        unsafe record("openat for read-write", openat(AT_FDCWD, "/etc/hostname", O_RDWR))
        let path = unsafe strdup("/bin/true")
        var argv: [UnsafeMutablePointer<CChar>?] = unsafe [path, nil]
        unsafe record("execve", execve("/bin/true", &argv, nil))
        unsafe free(path)
        record("ptrace", Int32(hp_ptrace_traceme()))
        record("fork", fork())
        // What must still work: reading a file.
        // unsafe: the path literal is a C string for the call only.
        let readable = unsafe open("/proc/self/status", O_RDONLY)
        results.append(("open for reading", readable < 0, readable >= 0 ? "allowed (as it must be)" : "REFUSED"))
        if readable >= 0 { close(readable) }
        return results
    }
}
