#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
public import VerdictCore
import CHallpassSys
import HallpassSystem

/// A compiled rule store, mapped read-only and read in place.
///
/// Opening checks the header, the section table, the category names and the
/// metadata (and, with `.full` verification, the checksum of every byte).
/// Every later read that follows an index found in the file is bounds-checked
/// again, so a damaged file can give an error or a missing rule, never a
/// read outside the mapping.
public final class RuleStore: RuleSource, @unchecked Sendable {
    // @unchecked Sendable: the mapping is read-only and never changes after init;
    // all stored properties are immutable.

    public enum Verification: Sendable {
        /// Structure and checksum: reads every byte once (about 10 ms per 50 MB).
        case full
        /// Structure only: for a file whose bundle hash filter-control already verified.
        case structure
    }

    public let path: String
    /// The rules version: the one recorded in the header (`filterctl compile
    /// --version`, a store used on its own, or a store from a bundle made before
    /// stores left it out), or, when the header says 0 (every store
    /// `filterctl bundle build` writes, so that equal rules give equal files),
    /// the `version` of the bundle manifest in the store's own folder
    /// (`versions/N/manifest`); 0 when there is none.
    public let version: UInt64
    public let categoryNames: [String]
    public let metadata: [String: String]
    /// The size of the file in bytes.
    public let byteCount: Int
    /// The number of distinct names with domain rules.
    public let domainNameCount: Int

    private let mapping: Mapping
    /// unsafe: the mapping's first byte; every use checks its range against `mapping.length`.
    private var base: UnsafeRawPointer { unsafe mapping.base }
    private let sections: [Range<Int>]
    private let domainHomeRange: UInt64
    private let domainSlotCount: Int
    private let urlHomeRange: UInt64
    private let urlSlotCount: Int
    private let matchSetCount: Int
    private let matchItemCount: Int
    private let urlGroupCount: Int
    private let urlRuleCount: Int
    /// Per prefix length 0...32, the range of IPv4 rules with that length.
    private let ipv4Ranges: [(length: Int, rules: Range<Int>)]
    private let ipv6Ranges: [(length: Int, rules: Range<Int>)]
    private let domainLabelCounts: (UInt64, UInt64)

    /// Maps the store at `path`.
    public convenience init(path: String, verification: Verification = .full) throws(StoreError) {
        try self.init(mapping: Mapping.map(path: path), path: path, verification: verification, besideManifest: true)
    }

    /// Reads a store from memory (tests and tools); the bytes are copied once.
    public convenience init(bytes: [UInt8], name: String = "<memory>", verification: Verification = .full) throws(StoreError) {
        try self.init(mapping: Mapping.copy(bytes), path: name, verification: verification, besideManifest: false)
    }

    private init(mapping: Mapping, path: String, verification: Verification, besideManifest: Bool) throws(StoreError) {
        self.mapping = mapping
        self.path = path
        let length = mapping.length
        self.byteCount = length
        // unsafe: a span over the mapping, which this object keeps alive; every read while
        // opening goes through it, with its bounds (the mapping's length).
        let bytes = unsafe Span<UInt8>(_unsafeStart: mapping.base.assumingMemoryBound(to: UInt8.self), count: length)

        guard length >= StoreFormat.headerLength, bytes.copied(0..<StoreFormat.magic.count) == StoreFormat.magic else {
            throw .notAStore(path: path)
        }
        let formatVersion = bytes.loadLE(UInt32.self, at: 8)
        guard formatVersion == StoreFormat.formatVersion else {
            throw .unsupportedVersion(path: path, version: formatVersion)
        }
        guard bytes.loadLE(UInt32.self, at: 12) == UInt32(StoreFormat.headerLength) else {
            throw .corrupt(path: path, detail: "unexpected header length")
        }
        let declaredLength = bytes.loadLE(UInt64.self, at: 16)
        guard declaredLength == UInt64(length) else {
            if declaredLength > UInt64(length) {
                throw .truncated(path: path, expected: declaredLength, actual: UInt64(length))
            }
            throw .corrupt(path: path, detail: "the file is \(length) bytes but the header says \(declaredLength)")
        }
        guard bytes.loadLE(UInt32.self, at: 40) == UInt32(StoreFormat.Section.allCases.count) else {
            throw .corrupt(path: path, detail: "unexpected section count")
        }
        guard length >= StoreFormat.dataStart else {
            throw .corrupt(path: path, detail: "the section table is cut short")
        }
        let recordedVersion = bytes.loadLE(UInt64.self, at: 24)
        self.version = recordedVersion != 0 || !besideManifest ? recordedVersion : RuleStore.bundleVersion(besideStore: path) ?? 0
        let storedChecksum = bytes.loadLE(UInt64.self, at: 32)
        self.domainHomeRange = bytes.loadLE(UInt64.self, at: 48)
        self.urlHomeRange = bytes.loadLE(UInt64.self, at: 56)

        var sections: [Range<Int>] = []
        for section in StoreFormat.Section.allCases {
            let entry = StoreFormat.headerLength + section.rawValue * 16
            let offset = bytes.loadLE(UInt64.self, at: entry)
            let size = bytes.loadLE(UInt64.self, at: entry + 8)
            guard offset >= UInt64(StoreFormat.dataStart), offset <= UInt64(length), size <= UInt64(length) - offset,
                offset % 8 == 0, size % UInt64(section.elementSize) == 0
            else {
                throw .corrupt(path: path, detail: "section \(section) lies outside the file or is misaligned")
            }
            sections.append(Int(offset)..<Int(offset + size))
        }
        self.sections = sections

        if verification == .full {
            guard StableHash.checksum(bytes.extracting(0..<32), bytes.extracting(40...)) == storedChecksum else {
                throw .checksumMismatch(path: path)
            }
        }

        func count(_ section: StoreFormat.Section) -> Int { sections[section.rawValue].count / section.elementSize }
        self.domainSlotCount = count(.domainSlots)
        self.urlSlotCount = count(.urlSlots)
        guard count(.domainValues) == domainSlotCount, count(.urlValues) == urlSlotCount else {
            throw .corrupt(path: path, detail: "fingerprint and value tables differ in length")
        }
        guard domainHomeRange <= UInt64(domainSlotCount), urlHomeRange <= UInt64(urlSlotCount),
            (domainSlotCount == 0) == (domainHomeRange == 0), (urlSlotCount == 0) == (urlHomeRange == 0)
        else {
            throw .corrupt(path: path, detail: "hash table size out of range")
        }
        self.matchSetCount = max(0, count(.matchSetStarts) - 1)
        self.matchItemCount = count(.matchItems)
        self.urlGroupCount = max(0, count(.urlGroupStarts) - 1)
        self.urlRuleCount = count(.urlRules)

        // Categories and metadata are small: read and check them all now.
        let strings = sections[StoreFormat.Section.strings.rawValue]
        func string(offset: UInt32, length: UInt32) -> String? {
            let start = strings.lowerBound + Int(offset)
            guard Int(offset) <= strings.count, Int(length) <= strings.count - Int(offset) else { return nil }
            return try? String(copying: UTF8Span(validating: bytes.extracting(start..<(start + Int(length)))))
        }
        var names: [String] = []
        let categories = sections[StoreFormat.Section.categories.rawValue]
        guard categories.count / 8 <= StoreFormat.maximumCategories else {
            throw .corrupt(path: path, detail: "too many categories")
        }
        for record in stride(from: categories.lowerBound, to: categories.upperBound, by: 8) {
            guard let name = string(offset: bytes.loadLE(UInt32.self, at: record), length: bytes.loadLE(UInt32.self, at: record + 4)),
                RuleStoreBuilder.isValidCategoryName(name)
            else {
                throw .corrupt(path: path, detail: "category \(names.count) has an invalid name")
            }
            names.append(name)
        }
        self.categoryNames = names
        var metadata: [String: String] = [:]
        let metadataSection = sections[StoreFormat.Section.metadata.rawValue]
        for record in stride(from: metadataSection.lowerBound, to: metadataSection.upperBound, by: 16) {
            guard let key = string(offset: bytes.loadLE(UInt32.self, at: record), length: bytes.loadLE(UInt32.self, at: record + 4)),
                let value = string(offset: bytes.loadLE(UInt32.self, at: record + 8), length: bytes.loadLE(UInt32.self, at: record + 12))
            else {
                throw .corrupt(path: path, detail: "a metadata entry points outside the strings")
            }
            metadata[key] = value
        }
        self.metadata = metadata

        // Address rules are sorted by prefix length, longest first: find each length's run.
        func runs(_ section: StoreFormat.Section, lengthOffset: Int, maximum: Int) throws(StoreError) -> [(Int, Range<Int>)] {
            let range = sections[section.rawValue]
            let size = section.elementSize
            var result: [(Int, Range<Int>)] = []
            var index = 0
            let total = range.count / size
            var previous = Int.max
            while index < total {
                let length = Int(bytes[range.lowerBound + index * size + lengthOffset])
                guard length <= maximum, length < previous else {
                    throw .corrupt(path: path, detail: "address rules are not in order")
                }
                previous = length
                // Binary search for the end of this length's run.
                var low = index + 1
                var high = total
                while low < high {
                    let middle = (low + high) / 2
                    if Int(bytes[range.lowerBound + middle * size + lengthOffset]) >= length { low = middle + 1 } else { high = middle }
                }
                result.append((length, index..<low))
                index = low
            }
            return result
        }
        self.ipv4Ranges = try runs(.ipv4Rules, lengthOffset: 4, maximum: 32)
        self.ipv6Ranges = try runs(.ipv6Rules, lengthOffset: 16, maximum: 128)

        self.domainNameCount = Int(bytes.loadLE(UInt32.self, at: 44))
        let labelCounts = sections[StoreFormat.Section.domainLabelCounts.rawValue]
        guard labelCounts.count == 16 else { throw .corrupt(path: path, detail: "the label-count section is not 16 bytes") }
        self.domainLabelCounts = (bytes.loadLE(UInt64.self, at: labelCounts.lowerBound), bytes.loadLE(UInt64.self, at: labelCounts.lowerBound + 8))
    }

    // MARK: - RuleSource

    public func forEachDomainRule(fingerprint: UInt64, _ body: (CategoryID, MatchKind) -> Void) {
        guard let slot = find(fingerprint, in: .domainSlots, count: domainSlotCount, homeRange: domainHomeRange) else { return }
        let set = Int(load(UInt32.self, section: .domainValues, index: slot))
        guard set < matchSetCount else { return }
        let start = Int(load(UInt32.self, section: .matchSetStarts, index: set))
        let end = Int(load(UInt32.self, section: .matchSetStarts, index: set + 1))
        guard start <= end, end <= matchItemCount else { return }
        for index in start..<end {
            let item = load(UInt16.self, section: .matchItems, index: index)
            guard let kind = MatchKind(rawValue: UInt8(item >> 14)) else { continue }
            body(item & 0x3FFF, kind)
        }
    }

    public func hasDomainRules(labelCount: Int) -> Bool {
        switch labelCount {
        case 0..<64: domainLabelCounts.0 & (1 << UInt64(labelCount)) != 0
        case 64..<128: domainLabelCounts.1 & (1 << UInt64(labelCount - 64)) != 0
        default: false
        }
    }

    public func prefetchDomainRules(fingerprints: Span<UInt64>) {
        guard domainSlotCount > 0 else { return }
        let start = sections[StoreFormat.Section.domainSlots.rawValue].lowerBound
        for index in fingerprints.indices {
            let slot = StoreFormat.homeSlot(fingerprints[index], range: domainHomeRange)
            // unsafe: only a hint; a prefetch of any address never faults, and the slot is inside the table anyway.
            if slot < domainSlotCount { unsafe hp_prefetch_read(base + start + slot * 8) }
        }
    }

    public func forEachURLRule(hostFingerprint: UInt64, _ body: (Span<UInt8>, CategoryID) -> Void) {
        guard let slot = find(hostFingerprint, in: .urlSlots, count: urlSlotCount, homeRange: urlHomeRange) else { return }
        let group = Int(load(UInt32.self, section: .urlValues, index: slot))
        guard group < urlGroupCount else { return }
        let start = Int(load(UInt32.self, section: .urlGroupStarts, index: group))
        let end = Int(load(UInt32.self, section: .urlGroupStarts, index: group + 1))
        guard start <= end, end <= urlRuleCount else { return }
        let strings = sections[StoreFormat.Section.strings.rawValue]
        let rules = sections[StoreFormat.Section.urlRules.rawValue]
        for index in start..<end {
            let record = rules.lowerBound + index * 12
            let offset = Int(loadLE(UInt32.self, at: record))
            let length = Int(loadLE(UInt32.self, at: record + 4))
            let category = loadLE(UInt16.self, at: record + 8)
            guard offset <= strings.count, length <= strings.count - offset else { continue }
            // unsafe: the range was checked against the strings section, which lies inside the mapping;
            // the span lives for the call of `body`.
            unsafe body(Span(_unsafeStart: (base + strings.lowerBound + offset).assumingMemoryBound(to: UInt8.self), count: length), category)
        }
    }

    public func forEachNetworkRule(containing address: IPAddress, _ body: (IPNetwork, CategoryID) -> Void) {
        switch address.unmappingIPv4 {
        case .v4(let value):
            let section = sections[StoreFormat.Section.ipv4Rules.rawValue]
            for (length, run) in ipv4Ranges {
                let key = IPAddress.v4(value).masked(toPrefixLength: length)
                guard case .v4(let masked) = key else { continue }
                var low = run.lowerBound
                var high = run.upperBound
                while low < high {
                    let middle = (low + high) / 2
                    if loadLE(UInt32.self, at: section.lowerBound + middle * 8) < masked { low = middle + 1 } else { high = middle }
                }
                var index = low
                while index < run.upperBound, loadLE(UInt32.self, at: section.lowerBound + index * 8) == masked {
                    body(IPNetwork(address: key, prefixLength: length), loadLE(UInt16.self, at: section.lowerBound + index * 8 + 6))
                    index += 1
                }
            }
        case .v6:
            let section = sections[StoreFormat.Section.ipv6Rules.rawValue]
            for (length, run) in ipv6Ranges {
                let key = address.masked(toPrefixLength: length)
                guard case .v6(let high, let low) = key else { continue }
                func less(_ index: Int) -> Bool {
                    let recordHigh = loadLE(UInt64.self, at: section.lowerBound + index * 24)
                    let recordLow = loadLE(UInt64.self, at: section.lowerBound + index * 24 + 8)
                    return (recordHigh, recordLow) < (high, low)
                }
                var lower = run.lowerBound
                var upper = run.upperBound
                while lower < upper {
                    let middle = (lower + upper) / 2
                    if less(middle) { lower = middle + 1 } else { upper = middle }
                }
                var index = lower
                while index < run.upperBound, loadLE(UInt64.self, at: section.lowerBound + index * 24) == high,
                    loadLE(UInt64.self, at: section.lowerBound + index * 24 + 8) == low
                {
                    body(IPNetwork(address: key, prefixLength: length), loadLE(UInt16.self, at: section.lowerBound + index * 24 + 22))
                    index += 1
                }
            }
        }
    }

    // MARK: - Reading

    /// The slot holding `fingerprint`, or nil. Bounded by the table size even if the file lies.
    @inline(__always)
    private func find(_ fingerprint: UInt64, in section: StoreFormat.Section, count: Int, homeRange: UInt64) -> Int? {
        guard count > 0 else { return nil }
        var slot = StoreFormat.homeSlot(fingerprint, range: homeRange)
        let start = sections[section.rawValue].lowerBound
        while slot < count {
            let key = loadLE(UInt64.self, at: start + slot * 8)
            if key == fingerprint { return slot }
            if key == 0 || key > fingerprint { return nil }
            slot += 1
        }
        return nil
    }

    /// Element `index` of a section; the caller has checked `index` against the section's count.
    @inline(__always)
    private func load<T: FixedWidthInteger>(_ type: T.Type, section: StoreFormat.Section, index: Int) -> T {
        loadLE(type, at: sections[section.rawValue].lowerBound + index * MemoryLayout<T>.size)
    }

    @inline(__always)
    private func loadLE<T: FixedWidthInteger>(_ type: T.Type, at offset: Int) -> T {
        precondition(offset >= 0 && offset + MemoryLayout<T>.size <= mapping.length, "rule store read out of bounds")
        // unsafe: checked against the mapping's length just above.
        return unsafe T(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

extension Span where Element == UInt8 {
    /// A little-endian integer at `offset` (bounds-checked).
    func loadLE<T: FixedWidthInteger>(_ type: T.Type, at offset: Int) -> T {
        let size = MemoryLayout<T>.size
        let field = extracting(offset..<(offset + size))
        var value = T.zero
        for index in 0..<size { value |= T(truncatingIfNeeded: field[index]) << (8 * index) }
        return value
    }

    /// The bytes at `range`, copied.
    func copied(_ range: Range<Int>) -> [UInt8] {
        let part = extracting(range)
        var copy = [UInt8](repeating: 0, count: part.count)
        for index in part.indices { copy[index] = part[index] }
        return copy
    }
}

/// The memory behind a store: a read-only file mapping, or a private copy.
/// `@safe`: the base pointer is read only by RuleStore, within `length`,
/// and the memory is released only in deinit, when no store refers to it.
@safe private final class Mapping: @unchecked Sendable {
    // @unchecked Sendable: the memory is never written after init and is freed only in deinit.
    let base: UnsafeRawPointer
    let length: Int
    private let isFileMapping: Bool

    private init(base: UnsafeRawPointer, length: Int, isFileMapping: Bool) {
        unsafe self.base = base
        self.length = length
        self.isFileMapping = isFileMapping
    }

    /// unsafe: the path is a C string for the open call only, `status` a local filled by
    /// fstat; the mapping is released only by deinit.
    static func map(path: String) throws(StoreError) -> Mapping {
        let descriptor = unsafe open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .cannotOpen(path: path, errno: errno) }
        defer { close(descriptor) }
        var status = stat()
        guard unsafe fstat(descriptor, &status) == 0 else { throw .cannotOpen(path: path, errno: errno) }
        guard (status.st_mode & S_IFMT) == S_IFREG else { throw .cannotOpen(path: path, errno: EISDIR) }
        let size = Int(status.st_size)
        guard size > 0 else { throw .notAStore(path: path) }
        guard size <= Int(UInt32.max) else { throw .tooLarge(path: path, size: UInt64(size)) }
        guard let address = unsafe mmap(nil, size, PROT_READ, MAP_PRIVATE, descriptor, 0), unsafe address != MAP_FAILED else {
            throw .cannotOpen(path: path, errno: errno)
        }
        return unsafe Mapping(base: UnsafeRawPointer(address), length: size, isFileMapping: true)
    }

    /// unsafe: the copy is `bytes.count` bytes into memory of at least that size, freed only by deinit.
    static func copy(_ bytes: [UInt8]) -> Mapping {
        let memory = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 16)
        unsafe bytes.withUnsafeBytes { source in
            if let address = source.baseAddress { unsafe memory.copyMemory(from: address, byteCount: source.count) }
        }
        return unsafe Mapping(base: UnsafeRawPointer(memory), length: bytes.count, isFileMapping: false)
    }

    deinit {
        // unsafe: the last reference to the memory is going; nothing reads it after this.
        if isFileMapping {
            unsafe munmap(UnsafeMutableRawPointer(mutating: base), length)
        } else {
            unsafe UnsafeMutableRawPointer(mutating: base).deallocate()
        }
    }
}

extension RuleStore {
    /// The `version` line of the bundle manifest in the same folder as the
    /// store at `path`, or nil when there is none or it does not parse.
    ///
    /// Not a check of the bundle: filter-control verified the signature when it
    /// installed the folder, and the version is only what the store is called
    /// (status, records); the rules themselves come from the store, checked in full.
    public static func bundleVersion(besideStore path: String) -> UInt64? {
        let folder = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        guard let bytes = try? BoundedFile.read(folder + "/" + BundleManifest.fileName, limit: UInt64(BundleManifest.maximumManifestBytes)),
            let manifest = try? BundleManifest(parsing: bytes)
        else { return nil }
        return manifest.version
    }
}
