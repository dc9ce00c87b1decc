// DNS answers rewritten against the ways around the filter (issue 14):
//
// 1. `ech` removed from HTTPS and SVCB records (RFC 9460 section 2.2 for the
//    RDATA: SvcPriority, an uncompressed TargetName, SvcParams in increasing
//    key order; key 5 is `ech`, RFC 9460 section 14.3.2), so a browser gets
//    no ECH configuration and shows the real server name; the rest of the
//    record stays. Removing bytes moves what follows, so every RDLENGTH and
//    every compression pointer past a removed byte is corrected (RFC 1035
//    section 4.1.4). For DNS over TCP, where a segment must keep its length,
//    `keepingLength` puts the removed bytes back as EDNS(0) Padding (RFC 7830)
//    in the OPT record, or, without an OPT record, leaves the parameter in
//    place and marks every ECHConfig in it with a version no client knows
//    (RFC 9849 section 4: clients skip configurations of unknown versions).
// 2. NXDOMAIN for a question (the Firefox canary `use-application-dns.net`,
//    Apple's Private Relay names), the question and any OPT record kept.
// 3. SafeSearch: the answer replaced by a CNAME from the question's name to
//    the engine's enforcement host, then A or AAAA records of that host with
//    the addresses filter-control resolved.
//
// Message-level functions take a DNS message (a UDP payload, or a TCP
// message without its length prefix); `DNSPacketRewrite` puts a new message
// into a whole IPv4 or IPv6 UDP packet (lengths and checksums) or into a
// length-prefixed TCP stream. Every function reads through bounds-checked
// spans, reads a bounded number of records, labels, pointers and
// parameters, and returns nil or throws on anything it cannot read.

import HallpassWire
public import VerdictCore

/// Why a DNS message or packet cannot be rewritten.
public struct DNSRewriteError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A stable code: `dns.truncated`, `dns.malformed`, `dns.unsupported`, `dns.packet`.
    public var code: String
    public var reason: String
    /// Where in the message (or packet) the problem was found.
    public var offset: Int

    public init(_ code: String, _ reason: String, at offset: Int) {
        self.code = code
        self.reason = reason
        self.offset = offset
    }

    /// A name that cannot be read, as the rewrites report it (made out of
    /// line: the name readers that throw it are inlined into their loops).
    @inline(never)
    init(_ malformation: DNSMalformation) {
        self.init(malformation.isTruncation ? "dns.truncated" : "dns.malformed", malformation.reason, at: malformation.offset)
    }

    static func truncated(_ what: String, at offset: Int) -> DNSRewriteError { DNSRewriteError("dns.truncated", what, at: offset) }
    static func malformed(_ what: String, at offset: Int) -> DNSRewriteError { DNSRewriteError("dns.malformed", what, at: offset) }

    public var description: String { "\(code): \(reason) (offset \(offset))" }
}

/// The records of a message, as positions in it.
struct DNSRecordLayout {
    enum Section: Hashable { case answer, authority, additional }

    struct Record {
        var section: Section
        /// Where the owner name field starts.
        var ownerOffset: Int
        var type: UInt16
        var recordClass: UInt16
        /// The TTL field.
        var timeToLiveOffset: Int
        /// The RDLENGTH field; RDATA follows it.
        var dataLengthOffset: Int
        var data: Range<Int>
    }

    var id: UInt16
    var flags: UInt16
    var questionCount: Int
    /// Where the first question's name starts and its QTYPE/QCLASS end.
    var question: Range<Int>?
    var questionType: UInt16?
    var records: [Record]
    /// Offsets of every compression pointer in a name field the layout knows
    /// (questions, owners, RDATA names of the RFC 1035 types that may be compressed).
    var pointerOffsets: [Int]
}

public enum DNSBypassRewrite {
    /// Records read per message, at most (all sections together).
    public static let maximumRecords = 256
    /// SvcParams read per HTTPS or SVCB record, at most.
    public static let maximumServiceParameters = 64
    /// Labels per SVCB TargetName, at most: as many as `DNSName` skips in a name field.
    static var maximumLabels: Int { DNSName.maximumLabels }
    /// The SvcParamKey of `ech` (RFC 9460 section 14.3.2) and of `mandatory` (section 8).
    static let echKey: UInt16 = 5
    static let mandatoryKey: UInt16 = 0
    /// HTTPS and SVCB (RFC 9460 section 14.1).
    static let svcbTypes: Set<UInt16> = [64, 65]
    /// The EDNS(0) OPT pseudo-record (RFC 6891) and its Padding option (RFC 7830).
    static let optType: UInt16 = 41
    static let paddingOption: UInt16 = 12
    /// The ECHConfig version written over real ones by `keepingLength` without an OPT record.
    public static let neutralizedECHVersion: UInt16 = 0xFFFF

    // MARK: 1. ech out of HTTPS and SVCB

    /// The message with the `ech` SvcParam removed from every HTTPS and SVCB
    /// record in any section (and `ech` taken out of a `mandatory` list that
    /// names it); nil when no record carries `ech`. With `keepingLength`, the
    /// result has the message's length (see the file comment).
    public static func removingECH(fromMessage bytes: Span<UInt8>, keepingLength: Bool = false) throws(DNSRewriteError) -> [UInt8]? {
        let layout = try readLayout(bytes)
        var edits = SpliceEdits()
        var removedTotal = 0
        var echValues: [Range<Int>] = []
        for record in layout.records where svcbTypes.contains(record.type) {
            guard let plan = try serviceParameterPlan(bytes, record: record) else { continue }
            let removed = plan.removals.reduce(0) { $0 + $1.count }
            for range in plan.removals { edits.remove(range) }
            for (offset, value) in plan.patches { edits.patch(offset, value) }
            edits.patch(record.dataLengthOffset, UInt16(record.data.count - removed))
            removedTotal += removed
            echValues.append(contentsOf: plan.echValues)
        }
        guard removedTotal > 0 else { return nil }
        if keepingLength {
            if let opt = layout.records.last(where: { $0.type == optType && $0.section == .additional }) {
                try padOPT(bytes, opt, by: removedTotal, into: &edits)
            } else {
                return try neutralizingECHConfigs(bytes, values: echValues)
            }
        }
        return try edits.apply(to: bytes, pointers: layout.pointerOffsets)
    }

    /// Convenience for an array.
    public static func removingECH(fromMessage bytes: [UInt8], keepingLength: Bool = false) throws(DNSRewriteError) -> [UInt8]? {
        try removingECH(fromMessage: bytes.span, keepingLength: keepingLength)
    }

    struct ServiceParameterPlan {
        var removals: [Range<Int>] = []
        var patches: [(Int, UInt16)] = []
        /// The values of the `ech` parameters (their ECHConfigLists).
        var echValues: [Range<Int>] = []
    }

    /// What to take out of one HTTPS or SVCB record; nil when it has no `ech`.
    static func serviceParameterPlan(_ bytes: Span<UInt8>, record: DNSRecordLayout.Record) throws(DNSRewriteError) -> ServiceParameterPlan? {
        var cursor = WireReader(bytes, from: record.data.lowerBound, to: record.data.upperBound)
        guard let priority = cursor.readU16(in: bytes) else { throw .truncated("SVCB RDATA ends before SvcPriority", at: cursor.offset) }
        // TargetName: never compressed (RFC 9460 section 2.2).
        var labels = 0
        while true {
            guard let length = cursor.readU8(in: bytes) else { throw .truncated("SVCB TargetName runs past its RDATA", at: cursor.offset) }
            if length == 0 { break }
            guard length & 0xC0 == 0 else { throw .malformed("compressed or extended label in an SVCB TargetName", at: cursor.offset - 1) }
            labels += 1
            guard labels <= maximumLabels, cursor.skip(Int(length)) else { throw .truncated("SVCB TargetName runs past its RDATA", at: cursor.offset) }
        }
        // AliasMode (priority 0) carries no parameters worth reading (section 2.4.2).
        if priority == 0 { return nil }
        var plan = ServiceParameterPlan()
        var mandatory: (keyOffset: Int, value: Range<Int>)? = nil
        var parameters = 0
        var previousKey: Int = -1
        while !cursor.isAtEnd {
            parameters += 1
            guard parameters <= maximumServiceParameters else { throw .malformed("more than \(maximumServiceParameters) SvcParams", at: cursor.offset) }
            let start = cursor.offset
            guard let key = cursor.readU16(in: bytes), let length = cursor.readU16(in: bytes),
                  let value = cursor.readRange(Int(length)) else { throw .truncated("SvcParam runs past its RDATA", at: start) }
            guard Int(key) > previousKey else { throw .malformed("SvcParamKeys out of order", at: start) }
            previousKey = Int(key)
            if key == echKey {
                plan.removals.append(start..<value.upperBound)
                plan.echValues.append(value)
            } else if key == mandatoryKey {
                mandatory = (start, value)
            }
        }
        guard !plan.removals.isEmpty else { return nil }
        // A `mandatory` list that names `ech` would make the record unusable without it.
        if let mandatory {
            var echEntries: [Int] = []
            var offset = mandatory.value.lowerBound
            guard mandatory.value.count % 2 == 0 else { throw .malformed("odd-length mandatory list", at: offset) }
            while offset < mandatory.value.upperBound {
                if bytes.bigEndianU16(at: offset) == echKey { echEntries.append(offset) }
                offset += 2
            }
            if !echEntries.isEmpty {
                if echEntries.count * 2 == mandatory.value.count {
                    plan.removals.append(mandatory.keyOffset..<mandatory.value.upperBound)
                } else {
                    for entry in echEntries { plan.removals.append(entry..<(entry + 2)) }
                    plan.patches.append((mandatory.keyOffset + 2, UInt16(mandatory.value.count - 2 * echEntries.count)))
                }
            }
        }
        return plan
    }

    /// Adds `count` bytes of EDNS(0) Padding to the OPT record `opt`: an
    /// existing Padding option grows, or a new one (4 bytes of header) is added.
    static func padOPT(_ bytes: Span<UInt8>, _ opt: DNSRecordLayout.Record, by count: Int, into edits: inout SpliceEdits) throws(DNSRewriteError) {
        var cursor = WireReader(bytes, from: opt.data.lowerBound, to: opt.data.upperBound)
        var options = 0
        while !cursor.isAtEnd {
            options += 1
            guard options <= maximumServiceParameters else { throw .malformed("more than \(maximumServiceParameters) EDNS options", at: cursor.offset) }
            let start = cursor.offset
            guard let code = cursor.readU16(in: bytes), let length = cursor.readU16(in: bytes),
                  let value = cursor.readRange(Int(length)) else { throw .truncated("EDNS option runs past the OPT record", at: start) }
            if code == paddingOption {
                guard Int(length) + count <= 0xFFFF, opt.data.count + count <= 0xFFFF else { throw .malformed("padding too long", at: start) }
                edits.insert(at: value.upperBound, [UInt8](repeating: 0, count: count))
                edits.patch(start + 2, UInt16(Int(length) + count))
                edits.patch(opt.dataLengthOffset, UInt16(opt.data.count + count))
                return
            }
        }
        guard count >= 4, opt.data.count + count <= 0xFFFF else { throw DNSRewriteError("dns.unsupported", "cannot pad \(count) bytes", at: opt.data.lowerBound) }
        let padding = Self.be16(paddingOption) + Self.be16(UInt16(count - 4)) + [UInt8](repeating: 0, count: count - 4)
        edits.insert(at: opt.data.upperBound, padding)
        edits.patch(opt.dataLengthOffset, UInt16(opt.data.count + count))
    }

    /// The message with the version of every ECHConfig in `values` (ECHConfigLists) set to `neutralizedECHVersion`.
    static func neutralizingECHConfigs(_ bytes: Span<UInt8>, values: [Range<Int>]) throws(DNSRewriteError) -> [UInt8] {
        var output = bytes.copied(0..<bytes.count)
        for value in values {
            // ECHConfigList: a 2-byte length, then ECHConfigs (version, length, contents).
            guard value.count >= 2 else { throw .truncated("ech value shorter than its list length", at: value.lowerBound) }
            let listEnd = value.lowerBound + 2 + Int(bytes.bigEndianU16(at: value.lowerBound))
            guard listEnd == value.upperBound else { throw .malformed("ECHConfigList length does not match its SvcParam", at: value.lowerBound) }
            var offset = value.lowerBound + 2
            var configs = 0
            while offset < listEnd {
                configs += 1
                guard configs <= maximumServiceParameters, listEnd - offset >= 4 else { throw .truncated("ECHConfig runs past its list", at: offset) }
                let length = Int(bytes.bigEndianU16(at: offset + 2))
                guard listEnd - offset - 4 >= length else { throw .truncated("ECHConfig runs past its list", at: offset) }
                output[offset] = UInt8(truncatingIfNeeded: neutralizedECHVersion >> 8)
                output[offset + 1] = UInt8(truncatingIfNeeded: neutralizedECHVersion)
                offset += 4 + length
            }
        }
        return output
    }

    // MARK: 2. NXDOMAIN

    /// A response saying the question's name does not exist (RCODE 3, RFC
    /// 1035 section 4.1.1), made from a query or from the real response: the
    /// ID, opcode, RD and the first question are kept, RA is set, the other
    /// sections are empty but for the OPT record (EDNS is kept as it was).
    public static func nxdomain(for bytes: Span<UInt8>) throws(DNSRewriteError) -> [UInt8] {
        try negativeOrSynthesized(bytes, responseCode: 3, answers: { _, _ in [] })
    }

    /// Convenience for an array.
    public static func nxdomain(for bytes: [UInt8]) throws(DNSRewriteError) -> [UInt8] {
        try nxdomain(for: bytes.span)
    }

    // MARK: 3. SafeSearch

    /// A response (made from the query or the real response) whose answer is
    /// a CNAME from the question's name to `target`, then the records of
    /// `target` for the question's type: A records for the IPv4 addresses in
    /// `addresses` to an A question, AAAA for the IPv6 ones to an AAAA
    /// question, none to an HTTPS or any other question (the client then
    /// asks for `target` itself, whose answers are real). TTLs are
    /// `timeToLive`.
    public static func safeSearchAnswer(for bytes: Span<UInt8>, target: [UInt8], addresses: [IPAddress],
                                        timeToLive: UInt32 = 300) throws(DNSRewriteError) -> [UInt8] {
        let targetName = try encodeName(target)
        return try negativeOrSynthesized(bytes, responseCode: 0) { questionOffset, questionType in
            // The CNAME's owner points at the question's name (offset 12); the
            // address records' owners point at the CNAME's target.
            var records: [[UInt8]] = []
            var cname = be16(0xC000 | UInt16(questionOffset)) + be16(5) + be16(1) + be32(timeToLive)
            cname += be16(UInt16(targetName.count)) + targetName
            records.append(cname)
            let wanted: UInt16? = questionType == 1 ? 1 : questionType == 28 ? 28 : nil
            guard let wanted else { return records }
            for address in addresses where (address.isIPv4 ? 1 : 28) == wanted {
                let data = address.networkBytes
                records.append([0, 0] + be16(wanted) + be16(1) + be32(timeToLive) + be16(UInt16(data.count)) + data)
            }
            return records
        }
    }

    /// Convenience for an array.
    public static func safeSearchAnswer(for bytes: [UInt8], target: [UInt8], addresses: [IPAddress],
                                        timeToLive: UInt32 = 300) throws(DNSRewriteError) -> [UInt8] {
        try safeSearchAnswer(for: bytes.span, target: target, addresses: addresses, timeToLive: timeToLive)
    }

    /// A response built from `bytes`' header and first question: RCODE
    /// `responseCode`, the records `answers` gives (called with the offset of
    /// the question's name in the new message and its type), the original
    /// OPT record if any. Address records whose owner is `[0, 0]` get a
    /// pointer to the first answer's target name.
    private static func negativeOrSynthesized(_ bytes: Span<UInt8>, responseCode: UInt16,
                                              answers: (Int, UInt16) -> [[UInt8]]) throws(DNSRewriteError) -> [UInt8] {
        let layout = try readLayout(bytes)
        guard layout.questionCount == 1, let question = layout.question, let questionType = layout.questionType else {
            throw DNSRewriteError("dns.unsupported", "a rewritten answer needs exactly one question (\(layout.questionCount))", at: 4)
        }
        let opcode = (layout.flags >> 11) & 0x0F
        guard opcode == 0 else { throw DNSRewriteError("dns.unsupported", "opcode \(opcode) is not a standard query", at: 2) }
        // QR, the opcode, RD kept, RA set, RCODE.
        let flags: UInt16 = 0x8000 | (layout.flags & 0x7900) | 0x0080 | responseCode
        var name = try decompressedName(bytes, at: question.lowerBound)
        name += bytes.copied((question.upperBound - 4)..<question.upperBound)
        var records = answers(12, questionType)
        // The target name of the CNAME (first record) sits right after its fixed fields.
        let firstAnswerOffset = 12 + name.count
        for index in records.indices.dropFirst() where records[index].count >= 2 && records[index][0] == 0 && records[index][1] == 0 {
            records[index].removeFirst(2)
            records[index].insert(contentsOf: be16(0xC000 | UInt16(firstAnswerOffset + 12)), at: 0)
        }
        let opt = layout.records.last(where: { $0.type == optType && $0.section == .additional })
        var output = be16(layout.id) + be16(flags) + be16(1) + be16(UInt16(records.count)) + be16(0) + be16(opt == nil ? 0 : 1)
        output += name
        for record in records { output += record }
        if let opt {
            // The OPT owner is the root (one zero byte); copied from its fixed fields on.
            output += [0] + bytes.copied((opt.dataLengthOffset - 8)..<opt.data.upperBound)
        }
        return output
    }

    // MARK: Reading

    /// Reads the header, the questions and every record's position.
    static func readLayout(_ bytes: Span<UInt8>) throws(DNSRewriteError) -> DNSRecordLayout {
        guard bytes.count >= 12 else { throw .truncated("shorter than the 12-byte header", at: 0) }
        var counts: [Int] = []
        for field in 1...4 { counts.append(Int(bytes.bigEndianU16(at: 2 + 2 * field))) }
        var layout = DNSRecordLayout(id: bytes.bigEndianU16(at: 0), flags: bytes.bigEndianU16(at: 2), questionCount: counts[0],
                                     question: nil, questionType: nil, records: [], pointerOffsets: [])
        guard counts.reduce(0, +) <= maximumRecords else { throw .malformed("more than \(maximumRecords) records", at: 4) }
        var cursor = WireReader(bytes, from: 12)
        for index in 0..<counts[0] {
            let start = cursor.offset
            try skipName(bytes, &cursor, pointers: &layout.pointerOffsets)
            guard let type = cursor.readU16(in: bytes), cursor.skip(2) else { throw .truncated("question ends before QTYPE/QCLASS", at: cursor.offset) }
            if index == 0 {
                layout.question = start..<cursor.offset
                layout.questionType = type
            }
        }
        let sections: [(DNSRecordLayout.Section, Int)] = [(.answer, counts[1]), (.authority, counts[2]), (.additional, counts[3])]
        for (section, count) in sections {
            for _ in 0..<count {
                let owner = cursor.offset
                try skipName(bytes, &cursor, pointers: &layout.pointerOffsets)
                guard let type = cursor.readU16(in: bytes), let recordClass = cursor.readU16(in: bytes) else {
                    throw .truncated("record ends inside its fixed fields", at: cursor.offset)
                }
                let ttlOffset = cursor.offset
                guard cursor.skip(4) else { throw .truncated("record ends inside its TTL", at: cursor.offset) }
                let lengthOffset = cursor.offset
                guard let length = cursor.readU16(in: bytes), let data = cursor.readRange(Int(length)) else {
                    throw .truncated("record data runs past the message", at: lengthOffset)
                }
                layout.records.append(.init(section: section, ownerOffset: owner, type: type, recordClass: recordClass,
                                            timeToLiveOffset: ttlOffset, dataLengthOffset: lengthOffset, data: data))
                try notePointers(inDataOf: type, bytes, data, into: &layout.pointerOffsets)
            }
        }
        return layout
    }

    /// Skips a name field, noting the offset of its compression pointer if it ends in one.
    static func skipName(_ bytes: Span<UInt8>, _ cursor: inout WireReader, pointers: inout [Int]) throws(DNSRewriteError) {
        let pointer: Int?
        do throws(DNSMalformation) {
            pointer = try DNSName.skip(&cursor, bytes)
        } catch {
            throw DNSRewriteError(error)
        }
        guard let pointer else { return }
        // A pointer is moved with the bytes it points at: it must point into the message.
        guard Int(bytes.bigEndianU16(at: pointer) & 0x3FFF) < bytes.count else { throw .malformed("compression pointer past the message", at: pointer) }
        pointers.append(pointer)
    }

    /// Notes the pointers in RDATA names of the types RFC 1035 lets a server
    /// compress (RFC 3597 section 4): NS, MD, MF, CNAME, SOA, MB, MG, MR, PTR, MINFO, MX.
    static func notePointers(inDataOf type: UInt16, _ bytes: Span<UInt8>, _ data: Range<Int>, into pointers: inout [Int]) throws(DNSRewriteError) {
        var cursor = WireReader(bytes, from: data.lowerBound, to: data.upperBound)
        switch type {
        case 2, 3, 4, 5, 7, 8, 9, 12:
            try skipName(bytes, &cursor, pointers: &pointers)
        case 6, 14:
            try skipName(bytes, &cursor, pointers: &pointers)
            try skipName(bytes, &cursor, pointers: &pointers)
        case 15:
            guard cursor.skip(2) else { throw .truncated("MX ends before its exchange", at: cursor.offset) }
            try skipName(bytes, &cursor, pointers: &pointers)
        default:
            break
        }
    }

    /// The name at `offset`, pointers followed, written uncompressed (its
    /// labels as they are, the root's zero byte at the end); bounded as
    /// `DNSName.Labels` reads names.
    static func decompressedName(_ bytes: Span<UInt8>, at offset: Int) throws(DNSRewriteError) -> [UInt8] {
        var labels = DNSName.Labels(at: offset, end: bytes.count)
        var output: [UInt8] = []
        // Written into one allocation of its size: each label with its length byte, and the root's.
        if let size = labels.size(in: bytes) { output.reserveCapacity(size.labelBytes + size.labels + 1) }
        do throws(DNSMalformation) {
            while let label = try labels.next(in: bytes) {
                // The label with its length byte, which stands just before it.
                output += bytes.copied((label.lowerBound - 1)..<label.upperBound)
            }
        } catch {
            throw DNSRewriteError(error)
        }
        output.append(0)
        return output
    }

    /// `www.example.com` (ASCII, dots between labels, no trailing dot needed) in wire form.
    static func encodeName(_ name: [UInt8]) throws(DNSRewriteError) -> [UInt8] {
        var output: [UInt8] = []
        var label: [UInt8] = []
        for byte in name + [0x2E] {
            if byte == 0x2E {
                if label.isEmpty { continue }
                guard label.count <= 63 else { throw DNSRewriteError("dns.unsupported", "label longer than 63 bytes", at: 0) }
                output.append(UInt8(label.count))
                output += label
                label = []
            } else {
                label.append(byte)
            }
        }
        output.append(0)
        guard output.count <= 255, output.count > 1 else { throw DNSRewriteError("dns.unsupported", "not a usable target name", at: 0) }
        return output
    }

    static func be16(_ value: UInt16) -> [UInt8] { [UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)] }
    static func be32(_ value: UInt32) -> [UInt8] { be16(UInt16(truncatingIfNeeded: value >> 16)) + be16(UInt16(truncatingIfNeeded: value)) }
}

/// Removals, insertions and 16-bit patches at offsets of an original
/// message, applied in one pass; compression pointers are moved with the
/// bytes they point at.
struct SpliceEdits {
    /// Replace `range` (original offsets) with `bytes`.
    private var replacements: [(range: Range<Int>, bytes: [UInt8])] = []
    /// Original offset -> new 16-bit value (for fields that are kept).
    private var patches: [Int: UInt16] = [:]

    mutating func remove(_ range: Range<Int>) { replacements.append((range, [])) }
    mutating func insert(at offset: Int, _ bytes: [UInt8]) { replacements.append((offset..<offset, bytes)) }
    mutating func patch(_ offset: Int, _ value: UInt16) { patches[offset] = value }

    /// Where the byte at original offset `offset` lands: after every edit
    /// that ends at or before it (bytes inserted at an offset go before the
    /// byte that was there).
    private func moved(_ offset: Int, _ sorted: [(range: Range<Int>, bytes: [UInt8])]) -> Int {
        var shift = 0
        for edit in sorted where edit.range.upperBound <= offset {
            shift += edit.bytes.count - edit.range.count
        }
        return offset + shift
    }

    func apply(to bytes: Span<UInt8>, pointers: [Int]) throws(DNSRewriteError) -> [UInt8] {
        let sorted = replacements.sorted { ($0.range.lowerBound, $0.range.upperBound) < ($1.range.lowerBound, $1.range.upperBound) }
        var previousEnd = 0
        for edit in sorted {
            guard edit.range.lowerBound >= previousEnd, edit.range.upperBound <= bytes.count else {
                throw .malformed("overlapping edits", at: edit.range.lowerBound)
            }
            previousEnd = edit.range.upperBound
        }
        var allPatches = patches
        for pointer in pointers {
            let target = Int(bytes.bigEndianU16(at: pointer) & 0x3FFF)
            if sorted.contains(where: { $0.range.contains(target) }) { throw .malformed("compression pointer into removed bytes", at: pointer) }
            let newTarget = moved(target, sorted)
            guard newTarget < 0x4000 else { throw .malformed("compression pointer out of range", at: pointer) }
            allPatches[pointer] = 0xC000 | UInt16(newTarget)
        }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var offset = 0
        var editIndex = 0
        while offset <= bytes.count {
            while editIndex < sorted.count, sorted[editIndex].range.lowerBound == offset {
                output += sorted[editIndex].bytes
                offset = max(offset, sorted[editIndex].range.upperBound)
                editIndex += 1
            }
            guard offset < bytes.count else { break }
            if let value = allPatches[offset], offset + 1 < bytes.count {
                output.append(UInt8(truncatingIfNeeded: value >> 8))
                output.append(UInt8(truncatingIfNeeded: value))
                offset += 2
            } else {
                output.append(bytes[offset])
                offset += 1
            }
        }
        // An edit that starts inside a patched field was never reached.
        guard editIndex == sorted.count else { throw .malformed("an edit overlaps a rewritten field", at: sorted[editIndex].range.lowerBound) }
        return output
    }
}

/// Puts a rewritten DNS message back into what carries it.
public enum DNSPacketRewrite {
    /// `packet` (a whole IPv4 or IPv6 packet carrying UDP, not a fragment)
    /// with its UDP payload replaced by `message`: the UDP length, the IPv4
    /// total length and header checksum (RFC 791 section 3.1) or the IPv6
    /// payload length (RFC 8200 section 3), and the UDP checksum (RFC 768;
    /// RFC 8200 section 8.1; an IPv4 checksum of zero stays zero) made right.
    public static func replacingUDPPayload(of packet: Span<UInt8>, with message: [UInt8]) throws(DNSRewriteError) -> [UInt8] {
        let ip: IPPacket
        do {
            ip = try IPPacketParser.parse(packet)
        } catch {
            throw DNSRewriteError("dns.packet", "not an IP packet: \(error)", at: 0)
        }
        guard ip.protocolNumber == 17, ip.sourcePort != nil, ip.fragmentation == .unfragmented else {
            throw DNSRewriteError("dns.packet", "not a whole UDP datagram", at: 0)
        }
        let udp = ip.transportOffset
        let udpLength = 8 + message.count
        let total = udp + udpLength
        guard udpLength <= 0xFFFF, ip.version == 4 ? total <= 0xFFFF : total - 40 <= 0xFFFF else {
            throw DNSRewriteError("dns.packet", "rewritten datagram too long", at: udp)
        }
        var output = packet.copied(0..<(udp + 8)) + message
        output[udp + 4] = UInt8(truncatingIfNeeded: udpLength >> 8)
        output[udp + 5] = UInt8(truncatingIfNeeded: udpLength)
        if ip.version == 4 {
            output[2] = UInt8(truncatingIfNeeded: total >> 8)
            output[3] = UInt8(truncatingIfNeeded: total)
            InternetChecksum.setIPv4HeaderChecksum(&output)
        } else {
            output[4] = UInt8(truncatingIfNeeded: (total - 40) >> 8)
            output[5] = UInt8(truncatingIfNeeded: total - 40)
        }
        // The header still holds the original UDP checksum: zero (none, IPv4 only) stays zero.
        guard InternetChecksum.setUDPChecksum(&output, ip: ip) else {
            throw DNSRewriteError("dns.packet", "the rewritten datagram's lengths do not add up", at: udp)
        }
        return output
    }

    /// Convenience for an array.
    public static func replacingUDPPayload(of packet: [UInt8], with message: [UInt8]) throws(DNSRewriteError) -> [UInt8] {
        try replacingUDPPayload(of: packet.span, with: message)
    }

    /// The UDP payload of `packet`, for the message-level rewrites.
    public static func udpPayload(of packet: Span<UInt8>) throws(DNSRewriteError) -> [UInt8] {
        guard let ip = try? IPPacketParser.parse(packet), ip.protocolNumber == 17, ip.sourcePort != nil,
              ip.fragmentation == .unfragmented else { throw DNSRewriteError("dns.packet", "not a whole UDP datagram", at: 0) }
        return packet.copied(ip.payload)
    }

    /// Convenience for an array.
    public static func udpPayload(of packet: [UInt8]) throws(DNSRewriteError) -> [UInt8] {
        try udpPayload(of: packet.span)
    }

    /// Applies `rewrite` to the first message of a DNS-over-TCP stream
    /// (RFC 1035 section 4.2.2: each message after its 2-byte length) and
    /// returns the stream with the new message and length, the bytes after
    /// the message unchanged; nil when `rewrite` changes nothing.
    public static func rewritingFirstTCPMessage(of stream: Span<UInt8>,
                                                _ rewrite: ([UInt8]) throws(DNSRewriteError) -> [UInt8]?) throws(DNSRewriteError) -> [UInt8]? {
        guard stream.count >= 2 else { throw .truncated("TCP stream shorter than its length prefix", at: 0) }
        let length = Int(stream.bigEndianU16(at: 0))
        guard stream.count >= 2 + length else { throw .truncated("TCP stream shorter than its first message", at: 2) }
        guard let message = try rewrite(stream.copied(2..<(2 + length))) else { return nil }
        guard message.count <= 0xFFFF else { throw DNSRewriteError("dns.unsupported", "rewritten message too long", at: 2) }
        return DNSBypassRewrite.be16(UInt16(message.count)) + message + stream.copied((2 + length)..<stream.count)
    }

    /// `removingECH` for DNS over TCP: the first message of the stream; with
    /// `keepingLength` (for a segment rewritten in place) its length stays.
    public static func removingECH(fromTCPStream stream: Span<UInt8>, keepingLength: Bool = false) throws(DNSRewriteError) -> [UInt8]? {
        try rewritingFirstTCPMessage(of: stream) { message throws(DNSRewriteError) in
            try DNSBypassRewrite.removingECH(fromMessage: message, keepingLength: keepingLength)
        }
    }

    /// Convenience for an array.
    public static func removingECH(fromTCPStream stream: [UInt8], keepingLength: Bool = false) throws(DNSRewriteError) -> [UInt8]? {
        try removingECH(fromTCPStream: stream.span, keepingLength: keepingLength)
    }
}
