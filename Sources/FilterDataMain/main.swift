// filter-data: the sandboxed NFQUEUE data process (see DESIGN.md).
//
//   filter-data --store FILE [--policy FILE] [--queue N] [--fail-open | --fail-closed] [--peek-bytes N]
//               [--control-fd N] [--uid N --gid N]
//   filter-data --sandbox-self-test
//
// filter-control starts it with --control-fd, the inherited end of their
// socket pair (HallpassIPC's ControlCommand: new rules, needRules answers, health checks);
// it exits when filter-control's end closes. Run by hand (no --control-fd)
// it filters the queue until SIGTERM, and names that need rules get
// policy.askDefault at once.
// Started as root, it locks itself down (Sandbox) once the queue socket and
// the rule store are open; if that fails it exits rather than run unconfined.
// It becomes the user and group given by number with --uid and --gid
// (filter-control looks up queue.user: filter-data itself asks no user
// database), never 0; without them, 65534 (nobody).
// --sandbox-self-test locks down, tries everything the sandbox must refuse,
// prints one line per attempt and exits 0 only if all were refused.
import CHallpassSys
import FilterData
import FilterDataKernel
import HallpassSandbox
import HallpassIPC
import HallpassSystem
import SystemPackage
import SharedStore
import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

func say(_ message: String) {
    StandardError.write("filter-data: " + message + "\n")
}

func fail(_ message: String, status: Int32) -> Never {
    say(message)
    exit(status)
}

struct Options {
    var store: String?
    var policy: String?
    var queue: UInt16 = 0
    var failOpen = true
    var peekBytes = 16 * 1024
    var sandboxSelfTest = false
    var controlDescriptor: Int32?
    var identity = Sandbox.Identity.nobody

    init(_ arguments: [String]) {
        var index = 0
        var uid: UInt32?
        var gid: UInt32?
        func value() -> String {
            index += 1
            guard index < arguments.count else { fail("\(arguments[index - 1]) needs a value", status: 64) }
            return arguments[index]
        }
        while index < arguments.count {
            switch arguments[index] {
            case "--store": store = value()
            case "--policy": policy = value()
            case "--queue":
                guard let number = UInt16(value()) else { fail("--queue takes a number from 0 to 65535", status: 64) }
                queue = number
            case "--fail-open": failOpen = true
            case "--fail-closed": failOpen = false
            case "--peek-bytes":
                guard let bytes = Int(value()), (512...(1 << 20)).contains(bytes) else { fail("--peek-bytes takes 512 to 1048576", status: 64) }
                peekBytes = bytes
            case "--control-fd":
                guard let descriptor = Int32(value()), descriptor > 2 else { fail("--control-fd takes an inherited descriptor above 2", status: 64) }
                controlDescriptor = descriptor
            case "--uid", "--gid":
                let option = arguments[index]
                guard let id = UInt32(value()), id != 0 else {
                    fail("\(option) takes a user or group id other than 0: filter-data never runs as root", status: 64)
                }
                if option == "--uid" { uid = id } else { gid = id }
            case "--sandbox-self-test": sandboxSelfTest = true
            case "--help", "-h":
                say(
                    "usage: filter-data --store FILE [--policy FILE] [--queue N] [--fail-open | --fail-closed] [--peek-bytes N] [--control-fd N] [--uid N --gid N]"
                )
                exit(0)
            default:
                fail("unknown argument '\(arguments[index])' (see --help)", status: 64)
            }
            index += 1
        }
        guard store != nil || sandboxSelfTest else { fail("--store FILE is required", status: 64) }
        if uid != nil || gid != nil {
            guard let uid, let gid, let identity = Sandbox.Identity(uid: uid, gid: gid) else { fail("--uid and --gid go together", status: 64) }
            self.identity = identity
        }
    }
}

let options = Options(Array(CommandLine.arguments.dropFirst()))

// Defence in depth: whatever the parent left open (filter-control closes
// everything it does not hand over, but another parent may not) is closed
// before the queue socket and the store are opened, so the sandbox holds
// only standard input and output, the control channel, the queue socket and
// the store.
if let control = options.controlDescriptor {
    for descriptor in 3..<control { close(descriptor) }
    _ = hp_close_from(control + 1)
} else {
    _ = hp_close_from(3)
}
// Standard output and error are a pipe to filter-control: if it is gone, a
// write fails with EPIPE instead of killing the process before it reports.
signal(SIGPIPE, SIG_IGN)

func lockDown() {
    guard getuid() == 0 else {
        say("not started as root: running without dropping privileges (filter-control starts filter-data as root)")
        return
    }
    do {
        try Sandbox.lockDown(as: options.identity)
    } catch {
        fail("\(error); refusing to run unconfined", status: 71)
    }
}

if options.sandboxSelfTest {
    lockDown()
    var allRefused = true
    for probe in Sandbox.probeDenials() {
        print("\(probe.name): \(probe.detail)")
        if probe.name == "open for reading" { allRefused = allRefused && !probe.refused } else { allRefused = allRefused && probe.refused }
    }
    exit(allRefused ? 0 : 1)
}

let engines: PolicyEngines<RuleStore>
do {
    engines = try PolicyEngines.load(store: options.store!, policy: options.policy)
} catch {
    fail("\(error.description) [\(error.code)]", status: error.code.hasPrefix("policy.") ? 78 : 65)
}
var control: DataEnd? = nil
if let descriptor = options.controlDescriptor {
    guard fcntl(descriptor, F_GETFD) >= 0 else { fail("--control-fd \(descriptor) is not an open descriptor", status: 64) }
    _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
    control = DataEnd(descriptor: FileDescriptor(rawValue: descriptor))
}

let socket: NetfilterQueueSocket
do {
    socket = try NetfilterQueueSocket(queue: options.queue, failOpen: options.failOpen)
} catch {
    fail(error.description, status: 71)
}
guard hp_install_stop_handlers() == 0 else { fail("cannot install signal handlers", status: 71) }
lockDown()

var settings = FlowInspectorSettings()
settings.limits.streamPeekBound = options.peekBytes
// Specialised here for the socket and the clock (the release build's cross-module optimisation): no protocol calls per packet.
let path = DataPath(queue: socket, clock: MonotonicSystemClock(), inspector: FlowInspector(engines: engines, settings: settings), control: control)
say(
    "filtering queue \(options.queue) (fail \(options.failOpen ? "open" : "closed")) with rules version \(engines.rules.version), \(engines.rules.domainNameCount) names, \(engines.engines.count) policies"
)
try? control?.send(.hello(pid: getpid(), rulesVersion: engines.rules.version))
let stop: DataPathStop
do {
    stop = try path.run()
} catch {
    fail(error.description, status: 74)
}
if stop == .controlClosed { say("filter-control closed the control channel") }
// The same counters as the health-check reply, on one line.
say("stopped: " + path.report().fields.map { "\($0.name)=\($0.value)" }.joined(separator: " "))
