public import HallpassIPC
import Foundation
import HallpassSystem
import SharedStore

/// hallpass's own iptables and ip6tables chain on the OUTPUT hook.
///
/// Per flow, the kernel does the per-packet work (FIELD-NOTES: this kernel
/// ignores a conntrack mark sent in a verdict, so the decision travels as a
/// packet mark on an NF_REPEAT verdict and these rules save it):
///
/// ```
/// -o lo                                   -> RETURN   (the block page and local services)
/// tcp not to port 53, not a SYN,
///   connmark = allow                      -> RETURN   (the fast path for most packets: an allowed
///                                             connection's data and ACKs, in two rules)
/// tcp not to port 53, no mark, no
///   decision on the connection:
///   carrying payload (BPF match)          -> NFQUEUE  (a new connection's first data, TFO SYNs too)
///   anything else                         -> RETURN   (its SYN, ACKs and bare resets carry no name)
/// mark = allow or block, connection has
///   no decision yet                        -> CONNMARK --save-mark (the decision reaches the connection;
///                                             a late packet judged apart never replaces it)
/// tcp not to port 53, mark = allow on
///   a connection marked allow             -> RETURN   (a judged packet coming back, in five rules)
/// udp dport 53, mark has dnsAnswer        -> CONNMARK --or-mark dnsAnswer, RETURN (a judged query)
/// udp dport 53, mark = allow              -> RETURN   (filter-control's own lookups of SafeSearch's
///                                             enforcement hosts, from a socket with the allow mark:
///                                             they need no filter-data, in closed mode too)
/// udp dport 53                            -> NFQUEUE  (every DNS query is judged on its own)
/// tcp dport 53, mark = block              -> CONNMARK block, REJECT with a reset (a refused query ends its connection)
/// tcp dport 53 carrying payload, no mark,
///   connection not blocked                 -> NFQUEUE  (every write of queries is judged, not only the first)
/// tcp SYN, no decision in its mark, on a
///   connection that carries one            -> MARK reopened (a new connection on a decided one's ports)
/// udp carrying a QUIC v1 or v2 Initial
///   (BPF match), no decision in its mark,
///   on a connection that carries one       -> MARK reopened (filter-data judges it again when it holds
///                                             the start of a ClientHello)
/// mark has reopened                       -> CONNMARK decision cleared, NFQUEUE (filter-data forgets the old flow)
/// connmark = allow                        -> RETURN   (the fast path: decided flows skip user space)
/// tcp RST without payload or options       -> RETURN   (the local end of a refused connection answering
///                                             the server's FIN or challenge ACK: the server's end closes
///                                             instead of waiting out its timeouts; nothing is carried)
/// connmark = block, tcp                   -> REJECT with a TCP reset (fast failure, no hang)
/// connmark = block                        -> REJECT (ICMP port unreachable)
/// mark = allow                            -> RETURN   (judged, but no connection to carry it:
/// mark = block                            -> REJECT    a packet conntrack found invalid; never queued again)
/// tcp carrying payload (BPF match)        -> NFQUEUE  (SYNs and bare ACKs pass: they carry no name)
/// udp                                     -> NFQUEUE
/// ```
///
/// The inspection proxy (docs/inspection.md) gets its connections from two
/// sets of addresses, `hallpass-inspect4` and `hallpass-inspect6` (ipset
/// `hash:ip` with a timeout per address, at most 65,536 each), which
/// filter-data fills from the DNS answers of inspected names. The rule
///
/// ```
/// udp dport 443, destination in the set   -> DROP     (QUIC falls back to TCP, which the proxy gets)
/// ```
///
/// comes right after the fast path of allowed TCP connections in
/// `HALLPASS_OUT` (their packets never see it; an allowed QUIC connection's
/// do, so one to an address selected later is cut too), and a chain of
/// the nat table, `HALLPASS_NAT` on its OUTPUT hook, sends TCP 443 to them
/// to the proxy:
///
/// ```
/// mark = allow                            -> RETURN   (the proxy's own connections, filter-control's)
/// tcp dport 443, destination in the set   -> REDIRECT to the proxy's port (127.0.0.1 or ::1)
/// ```
///
/// The kernel keeps a connection's redirect (or its absence) in its
/// connection-tracking entry, keyed by the two addresses and ports, and an
/// entry left behind in a state where a new SYN does not replace it (an
/// established one whose end the kernel did not follow, kept for days)
/// hands its decision to the next connection with that key. The proxy's own
/// connection to a server and a person's connection to the same server from
/// the same local port have the same key, so a third chain, `HALLPASS_RAW`
/// in the raw table's OUTPUT hook (before connection tracking), puts the
/// original direction of every connection that carries the allow mark in a
/// zone of its own:
///
/// ```
/// mark = allow                            -> CT --zone-orig 18512
/// ```
///
/// A person's connection then never takes the proxy's entry (and goes
/// around the redirect), nor the proxy's a person's (and is redirected to
/// the proxy itself). Answers come in the default zone and find the
/// entry by their own direction, as before.
///
/// A redirected connection still passes `HALLPASS_OUT` (its packets keep
/// the interface they were routed to), so filter-data judges its name for
/// the person who opened it, as any other; the proxy's own connection to
/// the server carries the allow mark and is judged by nobody again.
///
/// Only packets that can carry data are queued, so a TCP flow usually
/// costs one trip to user space: its first payload packet. Tiny segments
/// still all reach user space until the flow is decided. The chain is
/// rewritten whole with `iptables-restore --noflush` (atomic per table) and
/// the OUTPUT jump is inserted once, so installing twice changes nothing
/// and other firewall rules are left alone.
///
/// DNS costs one trip to user space per lookup: the query, where the asking
/// user is known, carries the judgement. When filter-data must change the
/// answer (a blocked name pointed at the block page), it sends the query
/// back through the hook with the `dnsAnswer` mark (NF_REPEAT), the chain
/// ors that bit into the connection mark and lets the query go; the second
/// chain, `HALLPASS_IN` on the INPUT hook, queues the answers (UDP from port
/// 53, not from loopback) of connections that carry the bit. Every other
/// answer passes in the kernel.
public struct KernelRules: Sendable {
    public static let chain = "HALLPASS_OUT"
    public static let inputChain = "HALLPASS_IN"
    /// The nat table's chain that redirects inspected addresses to the proxy.
    public static let natChain = "HALLPASS_NAT"
    /// The raw table's chain that gives the allow mark's connections their own connection-tracking zone.
    public static let rawChain = "HALLPASS_RAW"
    /// The connection-tracking zone of the original direction of the
    /// connections with the allow mark (the proxy's, filter-control's):
    /// 0x4850, "HP".
    public static let ownZone: UInt16 = 0x4850

    public var queue: UInt16
    public var failOpen: Bool
    public var marks: FlowMarks
    /// The port the inspection proxy listens on (127.0.0.1 and ::1).
    public var proxyPort: UInt16

    public init(queue: UInt16, failOpen: Bool, marks: FlowMarks = FlowMarks(), proxyPort: UInt16 = Configuration.Proxy().port) {
        self.queue = queue
        self.failOpen = failOpen
        self.marks = marks
        self.proxyPort = proxyPort
    }

    public enum Family: String, Sendable, CaseIterable {
        case ipv4, ipv6

        var restoreCommand: String { self == .ipv4 ? "iptables-restore" : "ip6tables-restore" }
        var saveCommand: String { self == .ipv4 ? "iptables-save" : "ip6tables-save" }
        var command: String { self == .ipv4 ? "iptables" : "ip6tables" }
        /// The ipset of this family's inspected addresses.
        var inspectionSet: String { self == .ipv4 ? InspectionSets.ipv4 : InspectionSets.ipv6 }
    }

    /// The `ipset restore -exist` input that makes both sets (a set already there is kept, with its addresses).
    static var setsInput: String {
        [(InspectionSets.ipv4, "inet"), (InspectionSets.ipv6, "inet6")].map { name, family in
            "create \(name) hash:ip family \(family) timeout \(InspectionSets.maximumTimeout) maxelem \(InspectionSets.maximumEntries)\n"
        }.joined()
    }

    /// `iptables -m bpf --bytecode` text: the count, then each instruction's code, jt, jf and k.
    private static func bytecode(_ instructions: [(UInt16, UInt8, UInt8, UInt32)]) -> String {
        "\(instructions.count)," + instructions.map { "\($0.0) \($0.1) \($0.2) \($0.3)" }.joined(separator: ",")
    }

    /// A classic BPF program: true when a UDP packet carries a QUIC long
    /// header of version 1 with the Initial type, or of version 2 (RFC 9369)
    /// with its Initial type; the fixed bit is not looked at (RFC 9287 lets a
    /// client grease it). RTP and other traffic whose first bit is set do not
    /// match: the version word must be exact. IPv6 packets with extension
    /// headers always match (filter-data reads past them).
    static func quicInitialProgram(_ family: Family) -> String {
        let instructions: [(UInt16, UInt8, UInt8, UInt32)]
        switch family {
        case .ipv4:
            instructions = [
                (0x30, 0, 0, 0),  // 0  ldb [0]          version / IHL
                (0x54, 0, 0, 15),  // 1  and #15
                (0x64, 0, 0, 2),  // 2  lsh #2           IP header length
                (0x07, 0, 0, 0),  // 3  tax
                (0x50, 0, 0, 8),  // 4  ldb [x + 8]      first payload byte (none: no match)
                (0x45, 0, 10, 0x80),  // 5  jset #0x80       a long header? else 16
                (0x54, 0, 0, 0x30),  // 6  and #0x30        the type bits
                (0x02, 0, 0, 0),  // 7  st M[0]
                (0x40, 0, 0, 9),  // 8  ld [x + 9]       the version
                (0x15, 0, 2, 0x0000_0001),  // 9  jeq #1           else 12
                (0x60, 0, 0, 0),  // 10 ld M[0]
                (0x15, 3, 4, 0x00),  // 11 jeq #0 (Initial) -> 15, else 16
                (0x15, 0, 3, 0x6b33_43cf),  // 12 jeq #v2         else 16
                (0x60, 0, 0, 0),  // 13 ld M[0]
                (0x15, 0, 1, 0x10),  // 14 jeq #0x10 (v2 Initial) -> 15, else 16
                (0x06, 0, 0, 65535),  // 15 ret match
                (0x06, 0, 0, 0),  // 16 ret no match
            ]
        case .ipv6:
            instructions = [
                (0x30, 0, 0, 6),  // 0  ldb [6]          next header
                (0x15, 0, 11, 17),  // 1  jeq #17          UDP right after the fixed header? else 13 (match)
                (0x30, 0, 0, 48),  // 2  ldb [48]         first payload byte
                (0x45, 0, 10, 0x80),  // 3  jset #0x80       else 14
                (0x54, 0, 0, 0x30),  // 4  and #0x30
                (0x02, 0, 0, 0),  // 5  st M[0]
                (0x20, 0, 0, 49),  // 6  ld [49]          the version
                (0x15, 0, 2, 0x0000_0001),  // 7  jeq #1           else 10
                (0x60, 0, 0, 0),  // 8  ld M[0]
                (0x15, 3, 4, 0x00),  // 9  jeq #0 -> 13, else 14
                (0x15, 0, 3, 0x6b33_43cf),  // 10 jeq #v2          else 14
                (0x60, 0, 0, 0),  // 11 ld M[0]
                (0x15, 0, 1, 0x10),  // 12 jeq #0x10 -> 13, else 14
                (0x06, 0, 0, 65535),  // 13 ret match
                (0x06, 0, 0, 0),  // 14 ret no match
            ]
        }
        return bytecode(instructions)
    }

    /// A classic BPF program (run by the xt `bpf` match on the IP header):
    /// true when a TCP packet carries payload. IPv6 packets with extension
    /// headers are always queued.
    static func payloadProgram(_ family: Family) -> String {
        let instructions: [(UInt16, UInt8, UInt8, UInt32)]
        switch family {
        case .ipv4:
            instructions = [
                (0x30, 0, 0, 0),  // ldb [0]          version / IHL
                (0x54, 0, 0, 15),  // and #15
                (0x64, 0, 0, 2),  // lsh #2           IP header length
                (0x07, 0, 0, 0),  // tax
                (0x50, 0, 0, 12),  // ldb [x + 12]     TCP data offset
                (0x74, 0, 0, 4),  // rsh #4
                (0x64, 0, 0, 2),  // lsh #2           TCP header length
                (0x0C, 0, 0, 0),  // add x            both headers
                (0x07, 0, 0, 0),  // tax
                (0x28, 0, 0, 2),  // ldh [2]          total length
                (0x2D, 0, 1, 0),  // jgt x            more than the headers: payload
                (0x06, 0, 0, 65535),  // ret match
                (0x06, 0, 0, 0),  // ret no match
            ]
        case .ipv6:
            instructions = [
                (0x30, 0, 0, 6),  // ldb [6]          next header
                (0x15, 0, 6, 6),  // jeq #6           TCP right after the fixed header? else match
                (0x30, 0, 0, 52),  // ldb [52]         TCP data offset
                (0x74, 0, 0, 4),  // rsh #4
                (0x64, 0, 0, 2),  // lsh #2
                (0x07, 0, 0, 0),  // tax
                (0x28, 0, 0, 4),  // ldh [4]          payload length
                (0x2D, 0, 1, 0),  // jgt x
                (0x06, 0, 0, 65535),  // ret match
                (0x06, 0, 0, 0),  // ret no match
            ]
        }
        return bytecode(instructions)
    }

    /// The `iptables-restore --noflush` input that (re)writes the chain.
    public func restoreInput(_ family: Family) -> String {
        let mask = hex(marks.mask)
        let allow = hex(marks.allow)
        let answer = hex(marks.dnsAnswer)
        let reopened = hex(marks.reopened)
        let queueTarget = "NFQUEUE --queue-num \(queue)" + (failOpen ? " --queue-bypass" : "")
        let rejectOther = family == .ipv4 ? "REJECT --reject-with icmp-port-unreachable" : "REJECT --reject-with icmp6-port-unreachable"
        let chain = KernelRules.chain
        return """
            *filter
            :\(chain) - [0:0]
            -A \(chain) -o lo -j RETURN
            -A \(chain) -p tcp ! --dport 53 ! --syn -m connmark --mark \(allow)/\(mask) -j RETURN
            -A \(chain) -p udp --dport 443 -m set --match-set \(family.inspectionSet) dst -j DROP
            -A \(chain) -p tcp ! --dport 53 -m mark --mark 0x0/\(mask) -m connmark --mark 0x0/\(mask) -m bpf --bytecode "\(KernelRules.payloadProgram(family))" -j \(queueTarget)
            -A \(chain) -p tcp ! --dport 53 -m mark --mark 0x0/\(mask) -m connmark --mark 0x0/\(mask) -j RETURN
            -A \(chain) -m mark --mark \(allow)/\(mask) -m connmark --mark 0x0/\(mask) -j CONNMARK --save-mark --nfmask \(mask) --ctmask \(mask)
            -A \(chain) -m mark --mark \(hex(marks.block))/\(mask) -m connmark --mark 0x0/\(mask) -j CONNMARK --save-mark --nfmask \(mask) --ctmask \(mask)
            -A \(chain) -p tcp ! --dport 53 -m mark --mark \(allow)/\(mask) -m connmark --mark \(allow)/\(mask) -j RETURN
            -A \(chain) -p udp --dport 53 -m mark --mark \(answer)/\(answer) -j CONNMARK --or-mark \(answer)
            -A \(chain) -p udp --dport 53 -m mark --mark \(answer)/\(answer) -j RETURN
            -A \(chain) -p udp --dport 53 -m mark --mark \(allow)/\(mask) -j RETURN
            -A \(chain) -p udp --dport 53 -j \(queueTarget)
            -A \(chain) -p tcp --dport 53 -m mark --mark \(hex(marks.block))/\(mask) -j CONNMARK --set-xmark \(hex(marks.block))/\(mask)
            -A \(chain) -p tcp --dport 53 -m mark --mark \(hex(marks.block))/\(mask) -j REJECT --reject-with tcp-reset
            -A \(chain) -p tcp --dport 53 -m mark --mark 0x0/\(mask) -m connmark ! --mark \(hex(marks.block))/\(mask) -m bpf --bytecode "\(KernelRules.payloadProgram(family))" -j \(queueTarget)
            -A \(chain) -p tcp --syn -m mark --mark 0x0/\(mask) -m connmark ! --mark 0x0/\(mask) -j MARK --set-xmark \(reopened)/\(reopened)
            -A \(chain) -p udp -m mark --mark 0x0/\(mask) -m connmark ! --mark 0x0/\(mask) -m bpf --bytecode "\(KernelRules.quicInitialProgram(family))" -j MARK --set-xmark \(reopened)/\(reopened)
            -A \(chain) -m mark --mark \(reopened)/\(reopened) -j CONNMARK --set-xmark 0x0/\(mask)
            -A \(chain) -m mark --mark \(reopened)/\(reopened) -j \(queueTarget)
            -A \(chain) -m connmark --mark \(hex(marks.allow))/\(mask) -j RETURN
            -A \(chain) -p tcp --tcp-flags RST RST -m length --length \(family == .ipv4 ? 40 : 60) -j RETURN
            -A \(chain) -p tcp -m connmark --mark \(hex(marks.block))/\(mask) -j REJECT --reject-with tcp-reset
            -A \(chain) -m connmark --mark \(hex(marks.block))/\(mask) -j \(rejectOther)
            -A \(chain) -m mark --mark \(hex(marks.allow))/\(mask) -j RETURN
            -A \(chain) -p tcp -m mark --mark \(hex(marks.block))/\(mask) -j REJECT --reject-with tcp-reset
            -A \(chain) -m mark --mark \(hex(marks.block))/\(mask) -j \(rejectOther)
            -A \(chain) -p tcp -m bpf --bytecode "\(KernelRules.payloadProgram(family))" -j \(queueTarget)
            -A \(chain) -p udp -j \(queueTarget)
            :\(KernelRules.inputChain) - [0:0]
            -A \(KernelRules.inputChain) -i lo -j RETURN
            -A \(KernelRules.inputChain) -p udp --sport 53 -m connmark --mark \(answer)/\(answer) -j \(queueTarget)
            COMMIT
            *nat
            :\(KernelRules.natChain) - [0:0]
            -A \(KernelRules.natChain) -m mark --mark \(allow)/\(mask) -j RETURN
            -A \(KernelRules.natChain) -p tcp --dport 443 -m set --match-set \(family.inspectionSet) dst -j REDIRECT --to-ports \(proxyPort)
            COMMIT

            """
    }

    /// The `iptables-restore --noflush` input of the raw table's chain: the
    /// allow mark's connections in their own connection-tracking zone. Kept
    /// apart from `restoreInput` because a kernel without connection-tracking
    /// zones (or the CT target) refuses it, and filtering must not stop for that.
    public func rawRestoreInput(_ family: Family) -> String {
        """
        *raw
        :\(KernelRules.rawChain) - [0:0]
        -A \(KernelRules.rawChain) -m mark --mark \(hex(marks.allow))/\(hex(marks.mask)) -j CT --zone-orig \(KernelRules.ownZone)
        COMMIT

        """
    }

    private func hex(_ value: UInt32) -> String { "0x" + String(value, radix: 16) }

    public struct CommandError: Error, CustomStringConvertible {
        public var command: String
        public var status: Int32
        public var output: String
        public var description: String { "\(command) failed (exit \(status)): \(output.trimmingCharacters(in: .whitespacesAndNewlines))" }
    }

    /// Installs the chains and the OUTPUT and INPUT jumps for both families.
    /// Returns what could not be installed without stopping the filter: the
    /// raw table's chain on a kernel that refuses it (the proxy's connections
    /// then share tracking entries with people's, docs/inspection.md).
    @discardableResult
    public func install() throws -> [String] {
        // The sets first: a rule that names a set the kernel does not have is refused.
        try KernelRules.run("ipset", ["restore", "-exist"], input: KernelRules.setsInput, waiting: false)
        var problems: [String] = []
        for family in Family.allCases {
            try KernelRules.run(family.restoreCommand, ["--noflush"], input: restoreInput(family))
            var jumps = KernelRules.allJumps.filter { $0.table != "raw" }
            do {
                try KernelRules.run(family.restoreCommand, ["--noflush"], input: rawRestoreInput(family))
                jumps += KernelRules.allJumps.filter { $0.table == "raw" }
            } catch {
                problems.append(
                    "\(family.rawValue): the raw table's \(KernelRules.rawChain) (the allow mark's own connection-tracking zone) "
                        + "cannot be installed, so the inspection proxy's connections share tracking entries with people's: \(error)")
            }
            // Insert each jump once: a second install must not add a second jump.
            for (table, hook, chain) in jumps where !KernelRules.jumpExists(family, table: table, hook: hook, chain: chain) {
                try KernelRules.run(family.command, ["-t", table, "-I", hook, "1", "-j", chain])
            }
        }
        return problems
    }

    /// Removes the jumps and the chains; safe to call when nothing is installed.
    /// Per family, one iptables-save shows what is there and one
    /// iptables-restore --noflush removes all of it in one step: a stop
    /// (and the unit's ExecStopPost after it) waits for these commands, two
    /// per table and family (the filter, nat and raw tables). Should the
    /// restore fail (a rule of someone else's jumps to a chain of hallpass),
    /// what can go goes one command at a time.
    public static func remove() {
        for family in Family.allCases {
            for table in ["filter", "nat", "raw"] {
                guard let saved = try? run(family.saveCommand, ["-t", table], waiting: false) else {
                    removeOneByOne(family, table: table)
                    continue
                }
                guard let input = removalInput(saved: saved, table: table) else { continue }
                if (try? run(family.restoreCommand, ["--noflush"], input: input)) == nil { removeOneByOne(family, table: table) }
            }
        }
        // Once no rule names them (the kernel refuses to destroy a set in use).
        for set in [InspectionSets.ipv4, InspectionSets.ipv6] { _ = try? run("ipset", ["destroy", set], waiting: false) }
    }

    /// The `iptables-restore --noflush` input that removes what `saved` (the
    /// table `table`, as iptables-save writes it) holds of hallpass: every
    /// jump to its chains from their hooks, and the chains; nil when none is there.
    static func removalInput(saved: String, table: String = "filter") -> String? {
        let lines = saved.split(separator: "\n")
        var removal: [String] = []
        let jumps = allJumps.filter { $0.table == table }
        for (_, hook, chain) in jumps {
            let jump = "-A \(hook) -j \(chain)"
            removal += lines.filter { $0 == jump }.map { _ in "-D \(hook) -j \(chain)" }
        }
        for (_, _, chain) in jumps where lines.contains(where: { $0.hasPrefix(":\(chain) ") }) {
            removal += ["-F \(chain)", "-X \(chain)"]
        }
        guard !removal.isEmpty else { return nil }
        return (["*" + table] + removal + ["COMMIT"]).joined(separator: "\n") + "\n"
    }

    private static func removeOneByOne(_ family: Family, table: String) {
        for (_, hook, chain) in allJumps where allJumps.contains(where: { $0.table == table && $0.chain == chain }) {
            while (try? run(family.command, ["-t", table, "-D", hook, "-j", chain])) != nil {}
            _ = try? run(family.command, ["-t", table, "-F", chain])
            _ = try? run(family.command, ["-t", table, "-X", chain])
        }
    }

    /// The hooks of the filter table and the chains they jump to.
    static let jumps = [("OUTPUT", chain), ("INPUT", inputChain)]
    /// Every jump: the filter table's, the nat table's and the raw table's.
    static let allJumps: [(table: String, hook: String, chain: String)] =
        jumps.map { ("filter", $0.0, $0.1) } + [("nat", "OUTPUT", natChain), ("raw", "OUTPUT", rawChain)]

    /// Whether the OUTPUT jump is in place for `family`.
    public static func isInstalled(_ family: Family) -> Bool {
        jumpExists(family, hook: "OUTPUT", chain: chain)
    }

    static func jumpExists(_ family: Family, table: String = "filter", hook: String, chain: String) -> Bool {
        (try? run(family.command, ["-t", table, "-C", hook, "-j", chain])) != nil
    }

    /// The kernel's counters for `queue` (from /proc/net/netfilter/nfnetlink_queue):
    /// packets waiting now, dropped because the queue was full, and dropped
    /// because filter-data's socket could not take them. Empty when nobody has the queue.
    public static func queueStatistics(queue: UInt16) -> [String: UInt64] {
        // BoundedFile reads to the end; Foundation stops after 4 KB of a /proc file.
        guard let bytes = try? BoundedFile.read("/proc/net/netfilter/nfnetlink_queue", limit: 1 << 20) else { return [:] }
        let text = String(decoding: bytes, as: UTF8.self)
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true).compactMap { UInt64($0) }
            // queue, portid, waiting, copy mode, copy range, queue dropped, user dropped, id sequence, 1
            guard fields.count >= 7, fields[0] == UInt64(queue) else { continue }
            return ["queueWaiting": fields[2], "queueDropped": fields[5], "queueUserDropped": fields[6]]
        }
        return [:]
    }

    @discardableResult
    static func run(_ command: String, _ arguments: [String], input: String? = nil, waiting: Bool = true) throws -> String {
        // -w: wait for the xtables lock instead of failing when another tool holds it
        // (iptables-save takes no lock, and no -w).
        let result = try ChildProcess.run("/usr/sbin/" + command, (waiting ? ["-w"] : []) + arguments, input: input)
        guard result.status == 0 else {
            throw CommandError(command: ([command] + arguments).joined(separator: " "), status: result.status, output: result.output)
        }
        return result.output
    }
}
