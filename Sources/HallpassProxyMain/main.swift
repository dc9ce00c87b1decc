// hallpass-proxy: the inspection proxy (docs/inspection.md).
//
//   hallpass-proxy --store FILE [--policy FILE] [--port N] [--connections N] [--idle-timeout SECONDS]
//                  [--control-fd N] [--uid N --gid N] [--trust-file FILE]
//                  [--organization NAME] [--language TAG] [--templates FOLDER]
//                  [--request-text TEXT --request-url TEMPLATE]
//   hallpass-proxy --sandbox-self-test
//
// The kernel rules send it TCP 443 to the addresses of names the school's
// policy inspects. For each connection it reads the original destination
// and the ClientHello (filter-data's parser), and the group of the user
// who opened it; a name that group does not inspect is spliced to the
// original destination as a plain byte relay. An inspected name is
// terminated with a leaf from the interception CA filter-control hands over
// on the control channel, and each of its HTTP/1.1 requests is decided:
// forwarded over TLS to the original destination, whose certificate must
// verify against `--trust-file` (the system's trust store, hallpass's own CAs
// left out), or answered with the block page in the school's name
// (`--organization` and the other block page settings). Until a CA is
// handed over, inspected names are refused (a TLS alert), never passed unseen.
//
// filter-control starts it as it starts filter-data (its supervisor, the
// same control channel on descriptor 3: rules, placements of users, health
// checks, the CA) and ends it by ending the channel or with SIGTERM. Started
// as root, it reads the trust store and the block page's templates, opens its
// listeners (127.0.0.1 and ::1, `--port`), installs its stop handlers and
// locks itself down before any thread starts: its own user (`--uid`, `--gid`;
// 65534 without them), only CAP_NET_ADMIN (for the allow mark on its own
// connections), no_new_privs, and HallpassSandbox's proxy profile (no exec,
// no files written, sockets for TCP and sock_diag only).
import BlockPage
import CHallpassSys
import FilterData
import HallpassIPC
import HallpassSandbox
import HallpassSystem
import InspectionProxy
import NIOCore
import NIOPosix
import SharedStore
import SystemPackage
import VerdictCore
#if canImport(Glibc)
import Glibc
#endif

func say(_ message: String) {
    StandardError.write("hallpass-proxy: " + message + "\n")
}

func fail(_ message: String, status: Int32) -> Never {
    say(message)
    exit(status)
}

struct Options {
    var store: String?
    var policy: String?
    var port: UInt16 = 1023
    var settings = ProxySettings()
    var controlDescriptor: Int32?
    var identity = Sandbox.Identity.nobody
    var sandboxSelfTest = false
    /// The certificates servers are checked against.
    var trustFile = "/etc/ssl/certs/ca-certificates.crt"
    /// The block page's settings, as filter-control passes them.
    var page = BlockPageSettings(organization: "hallpass")
    var requestText: String?
    var requestURL: String?

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
            case "--port":
                guard let number = UInt16(value()), number > 0 else { fail("--port takes 1 to 65535", status: 64) }
                port = number
            case "--connections":
                guard let number = Int(value()), (16...65_536).contains(number) else { fail("--connections takes 16 to 65536", status: 64) }
                settings.maximumConnections = number
            case "--idle-timeout":
                guard let seconds = Int64(value()), seconds >= 10 else { fail("--idle-timeout takes seconds, at least 10", status: 64) }
                settings.idleTimeout = .seconds(seconds)
            case "--control-fd":
                guard let descriptor = Int32(value()), descriptor > 2 else { fail("--control-fd takes an inherited descriptor above 2", status: 64) }
                controlDescriptor = descriptor
            case "--uid", "--gid":
                let option = arguments[index]
                guard let id = UInt32(value()), id != 0 else { fail("\(option) takes a user or group id other than 0: hallpass-proxy never runs as root", status: 64) }
                if option == "--uid" { uid = id } else { gid = id }
            case "--sandbox-self-test": sandboxSelfTest = true
            case "--trust-file": trustFile = value()
            case "--organization": page.organization = value()
            case "--language": page.defaultLanguage = value()
            case "--templates": page.templateFolder = value()
            case "--request-text": requestText = value()
            case "--request-url": requestURL = value()
            case "--help", "-h":
                say(
                    "usage: hallpass-proxy --store FILE [--policy FILE] [--port N] [--connections N] [--idle-timeout SECONDS] [--control-fd N] [--uid N --gid N]"
                        + " [--trust-file FILE] [--organization NAME] [--language TAG] [--templates FOLDER] [--request-text TEXT --request-url TEMPLATE]"
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
        if requestText != nil || requestURL != nil {
            guard let requestText, let requestURL else { fail("--request-text and --request-url go together", status: 64) }
            page.requestAccess = .link(text: requestText, urlTemplate: requestURL)
        }
    }
}

let options = Options(Array(CommandLine.arguments.dropFirst()))

// Only what filter-control handed over stays open (standard output and error, the channel).
if let control = options.controlDescriptor {
    for descriptor in 3..<control { close(descriptor) }
    _ = hp_close_from(control + 1)
} else {
    _ = hp_close_from(3)
}
signal(SIGPIPE, SIG_IGN)

func lockDown(listeners: [Int32] = []) {
    guard getuid() == 0 else {
        say("not started as root: running without dropping privileges (filter-control starts hallpass-proxy as root)")
        return
    }
    do {
        try Sandbox.lockDown(as: options.identity, profile: .proxy(listeners: listeners))
    } catch {
        fail("\(error); refusing to run unconfined", status: 71)
    }
}

if options.sandboxSelfTest {
    lockDown()
    var allRefused = true
    for probe in Sandbox.probeDenials() {
        print("\(probe.name): \(probe.detail)")
        // The proxy makes TCP connections: AF_INET and AF_INET6 sockets and `connect` are its job.
        if probe.name == "connect" { continue }
        let mustWork = probe.name == "open for reading" || probe.name == "socket(AF_INET)" || probe.name == "socket(AF_INET6)"
        allRefused = allRefused && (mustWork ? !probe.refused : probe.refused)
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

// What the sandbox leaves readable anyway, read now: the trust store (the
// servers of inspected names are checked against it) and the block page's
// templates and strings (their errors said now, the built-in pages used then).
let trustRoots = Interception.readTrustRoots(file: options.trustFile)
if trustRoots.isEmpty {
    say("no certificates in \(options.trustFile): no server of an inspected name can be checked, and every request to one gets the block page")
}
let pages: ProxyPages
do {
    pages = ProxyPages(renderer: try BlockPageRenderer(settings: options.page))
} catch {
    say("the block page's settings cannot be used (\(error)); inspected requests get the built-in page")
    var builtIn = BlockPageSettings(organization: options.page.organization)
    builtIn.requestAccess = options.page.requestAccess
    pages = (try? BlockPageRenderer(settings: builtIn)).map(ProxyPages.init(renderer:)) ?? .builtIn
}

// The listeners, while still root (a port below 1024), before any thread.
var listeners: [Int32] = []
for address in ["127.0.0.1", "::1"] {
    do {
        listeners.append(try ProxySockets.listen(on: IPAddress(address)!, port: options.port))
    } catch {
        fail("\(error)", status: 71)
    }
}
guard hp_install_stop_handlers() == 0 else { fail("cannot install signal handlers", status: 71) }
// Before the event loop's thread exists: the seccomp filter and the change of
// user reach only the calling thread and the threads it starts afterwards.
lockDown(listeners: listeners)

let state = ProxyState(engines: engines, control: control, trustRoots: trustRoots, pages: pages)
let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
let server = ProxyServer(state: state, settings: options.settings, group: group)
let channels: [any Channel]
do {
    channels = try server.serve(listeners: listeners)
} catch {
    fail("cannot serve the listeners: \(error)", status: 71)
}
say("relaying on port \(options.port) (127.0.0.1 and ::1) with rules version \(engines.rules.version), \(engines.engines.count) policies")
try? control?.send(.hello(pid: getpid(), rulesVersion: engines.rules.version))

// The control channel, on this thread, until SIGTERM or its end; the counters
// go to the log when they changed, at most once a minute.
var lastSummary = ""
var lastSummaryAt = MonotonicClock.nanoseconds()
var controlClosed = false
while hp_stop_requested() == 0 {
    if let control {
        _ = control.wait(timeoutMilliseconds: 1000)
        do {
            while let message = try control.receive(invalid: { say("filter-control sent a bad message: \($0)") }) {
                if let answer = state.apply(message, log: say) { try? control.send(answer) }
            }
        } catch {
            controlClosed = true
            break
        }
    } else {
        usleep(250_000)
    }
    let now = MonotonicClock.nanoseconds()
    if now &- lastSummaryAt >= 60_000_000_000 {
        let summary = state.counters.summary
        if summary != lastSummary { say("counters: " + summary) }
        lastSummary = summary
        lastSummaryAt = now
    }
}
if controlClosed { say("filter-control closed the control channel") }
for channel in channels { try? channel.close().wait() }
try? group.syncShutdownGracefully()
say("stopped: " + state.counters.summary)
