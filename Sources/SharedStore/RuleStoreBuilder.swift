public import VerdictCore

/// Collects rules and writes them as a rule store (see `StoreFormat`).
///
/// Memory while building is about 16 bytes per domain rule; names are
/// reduced to fingerprints as they are added, so the builder never holds
/// millions of strings. The output depends only on the rules, the version
/// and the metadata, not on the order rules were added in.
public struct RuleStoreBuilder: Sendable {
    public enum BuildError: Error, Hashable, Sendable, CustomStringConvertible {
        case tooManyCategories
        case invalidCategoryName(String)
        case tooLarge

        public var description: String {
            switch self {
            case .tooManyCategories: "a rule store holds at most \(StoreFormat.maximumCategories) categories"
            case .invalidCategoryName(let name):
                "'\(name)' is not a valid category name: use 1 to 64 of a-z, 0-9, '-' and '_'"
            case .tooLarge: "the rules do not fit the 4 GiB a rule store may have"
            }
        }
    }

    private struct DomainEntry: Sendable {
        var fingerprint: UInt64
        var item: UInt16
    }

    private struct URLEntry: Sendable, Hashable {
        var hostFingerprint: UInt64
        var path: [UInt8]
        var category: CategoryID
    }

    private struct NetworkEntry: Sendable, Hashable {
        var network: IPNetwork
        var category: CategoryID
    }

    public private(set) var categoryNames: [String] = []
    private var categoryIndex: [String: CategoryID] = [:]
    private var domains: [DomainEntry] = []
    private var urls: Set<URLEntry> = []
    private var networks: Set<NetworkEntry> = []
    private var metadata: [String: String] = [:]
    /// Bit n of word n / 64: some domain rule's name has n labels.
    private var labelCounts: (UInt64, UInt64) = (0, 0)

    public init() {}

    /// The number of domain rules added so far (before removing duplicates).
    public var domainRuleCount: Int { domains.count }

    /// The id of a category, creating it on first use. Names are 1 to 64 of
    /// `a-z 0-9 - _` (upper case is folded).
    public mutating func category(named rawName: String) throws(BuildError) -> CategoryID {
        let name = rawName.lowercased()
        if let id = categoryIndex[name] { return id }
        guard RuleStoreBuilder.isValidCategoryName(name) else { throw .invalidCategoryName(rawName) }
        guard categoryNames.count < StoreFormat.maximumCategories else { throw .tooManyCategories }
        let id = CategoryID(categoryNames.count)
        categoryNames.append(name)
        categoryIndex[name] = id
        return id
    }

    public static func isValidCategoryName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy {
                ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9"))
                    || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
            }
    }

    public mutating func add(_ pattern: RulePattern, category: CategoryID) {
        switch pattern {
        case .domain(let host, let kind):
            addDomain(fingerprint: SuffixFingerprints.fingerprint(of: host), labelCount: host.labelCount, kind: kind, category: category)
        case .urlPrefix(let host, let path):
            urls.insert(URLEntry(hostFingerprint: SuffixFingerprints.fingerprint(of: host), path: Array(path.utf8), category: category))
        case .network(let network):
            networks.insert(NetworkEntry(network: network, category: category))
        }
    }

    /// The fast path for list compilers: a name already reduced to its fingerprint.
    public mutating func addDomain(fingerprint: UInt64, labelCount: Int, kind: MatchKind, category: CategoryID) {
        if labelCount < 64 {
            labelCounts.0 |= 1 << UInt64(labelCount)
        } else if labelCount < 128 {
            labelCounts.1 |= 1 << UInt64(labelCount - 64)
        }
        domains.append(DomainEntry(fingerprint: fingerprint, item: StoreFormat.matchItem(category: category, kind: kind.rawValue)))
    }

    /// A free-form key and value kept in the store (shown by `filterctl status`).
    public mutating func setMetadata(_ key: String, _ value: String) {
        metadata[key] = value
    }

    // MARK: - Writing

    /// Statistics of a built store.
    public struct Summary: Sendable, Hashable {
        public var distinctNames: Int
        public var domainSlots: Int
        public var urlRules: Int
        public var networkRules: Int
        public var categories: Int
        public var bytes: Int
    }

    /// The store's bytes.
    public func build(version: UInt64) throws(BuildError) -> (bytes: [UInt8], summary: Summary) {
        var writer = SectionWriter()

        // Strings and categories.
        var categoryRecords: [UInt8] = []
        for name in categoryNames {
            let (offset, length) = writer.addString(Array(name.utf8))
            categoryRecords.appendLittleEndian(offset)
            categoryRecords.appendLittleEndian(length)
        }

        // Domain table: sort by fingerprint (which is also home-slot order),
        // merge the items of each name into a shared match set, place.
        let sorted = domains.sorted { ($0.fingerprint, $0.item) < ($1.fingerprint, $1.item) }
        var names: [UInt64] = []
        var nameSets: [UInt32] = []
        var setIndex: [[UInt16]: UInt32] = [:]
        var singleItemSet = [UInt32](repeating: .max, count: 1 << 16)
        var matchSetStarts: [UInt32] = [0]
        var matchItems: [UInt16] = []
        var index = 0
        var items: [UInt16] = []
        while index < sorted.count {
            let fingerprint = sorted[index].fingerprint
            items.removeAll(keepingCapacity: true)
            while index < sorted.count, sorted[index].fingerprint == fingerprint {
                if items.last != sorted[index].item { items.append(sorted[index].item) }
                index += 1
            }
            let set: UInt32
            if items.count == 1, singleItemSet[Int(items[0])] != .max {
                set = singleItemSet[Int(items[0])]
            } else if let known = setIndex[items] {
                set = known
            } else {
                set = UInt32(matchSetStarts.count - 1)
                matchItems.append(contentsOf: items)
                matchSetStarts.append(UInt32(matchItems.count))
                setIndex[items] = set
                if items.count == 1 { singleItemSet[Int(items[0])] = set }
            }
            names.append(fingerprint)
            nameSets.append(set)
        }
        let domainTable = FingerprintTable(sortedKeys: names, values: nameSets)

        // URL-prefix rules, grouped by host.
        let urlList = urls.sorted { lhs, rhs in
            if lhs.hostFingerprint != rhs.hostFingerprint { return lhs.hostFingerprint < rhs.hostFingerprint }
            if lhs.path != rhs.path { return lhs.path.lexicographicallyPrecedes(rhs.path) }
            return lhs.category < rhs.category
        }
        var urlHosts: [UInt64] = []
        var urlGroups: [UInt32] = []
        var urlGroupStarts: [UInt32] = [0]
        var urlRecords: [UInt8] = []
        for (position, entry) in urlList.enumerated() {
            if urlHosts.last != entry.hostFingerprint {
                if position > 0 { urlGroupStarts.append(UInt32(position)) }
                urlHosts.append(entry.hostFingerprint)
                urlGroups.append(UInt32(urlHosts.count - 1))
            }
            let (offset, length) = writer.addString(entry.path)
            urlRecords.appendLittleEndian(offset)
            urlRecords.appendLittleEndian(length)
            urlRecords.appendLittleEndian(entry.category)
            urlRecords.appendLittleEndian(UInt16(0))
        }
        if !urlList.isEmpty { urlGroupStarts.append(UInt32(urlList.count)) }
        let urlTable = FingerprintTable(sortedKeys: urlHosts, values: urlGroups)

        // Address rules: longest prefix first, then by network.
        var ipv4Records: [UInt8] = []
        var ipv6Records: [UInt8] = []
        let networkList = networks.sorted { lhs, rhs in
            if lhs.network.prefixLength != rhs.network.prefixLength { return lhs.network.prefixLength > rhs.network.prefixLength }
            if lhs.network.address != rhs.network.address {
                return lhs.network.address.sortKey.lexicographicallyPrecedes(rhs.network.address.sortKey)
            }
            return lhs.category < rhs.category
        }
        for entry in networkList {
            switch entry.network.address {
            case .v4(let value):
                ipv4Records.appendLittleEndian(value)
                ipv4Records.append(UInt8(entry.network.prefixLength))
                ipv4Records.append(0)
                ipv4Records.appendLittleEndian(entry.category)
            case .v6(let high, let low):
                ipv6Records.appendLittleEndian(high)
                ipv6Records.appendLittleEndian(low)
                ipv6Records.append(UInt8(entry.network.prefixLength))
                ipv6Records.append(contentsOf: [0, 0, 0, 0, 0])
                ipv6Records.appendLittleEndian(entry.category)
            }
        }

        // Metadata, sorted by key for a deterministic file.
        var metadataRecords: [UInt8] = []
        for key in metadata.keys.sorted() {
            let (keyOffset, keyLength) = writer.addString(Array(key.utf8))
            let (valueOffset, valueLength) = writer.addString(Array(metadata[key]!.utf8))
            for field in [keyOffset, keyLength, valueOffset, valueLength] { metadataRecords.appendLittleEndian(field) }
        }

        var sections = [[UInt8]](repeating: [], count: StoreFormat.Section.allCases.count)
        sections[StoreFormat.Section.strings.rawValue] = writer.strings
        sections[StoreFormat.Section.categories.rawValue] = categoryRecords
        sections[StoreFormat.Section.domainSlots.rawValue] = domainTable.slotBytes
        sections[StoreFormat.Section.domainValues.rawValue] = domainTable.valueBytes
        sections[StoreFormat.Section.matchSetStarts.rawValue] = littleEndianBytes(matchSetStarts)
        sections[StoreFormat.Section.matchItems.rawValue] = littleEndianBytes(matchItems)
        sections[StoreFormat.Section.urlSlots.rawValue] = urlTable.slotBytes
        sections[StoreFormat.Section.urlValues.rawValue] = urlTable.valueBytes
        sections[StoreFormat.Section.urlGroupStarts.rawValue] = littleEndianBytes(urlGroupStarts)
        sections[StoreFormat.Section.urlRules.rawValue] = urlRecords
        sections[StoreFormat.Section.ipv4Rules.rawValue] = ipv4Records
        sections[StoreFormat.Section.ipv6Rules.rawValue] = ipv6Records
        sections[StoreFormat.Section.metadata.rawValue] = metadataRecords
        var labelCountBytes: [UInt8] = []
        labelCountBytes.appendLittleEndian(labelCounts.0)
        labelCountBytes.appendLittleEndian(labelCounts.1)
        sections[StoreFormat.Section.domainLabelCounts.rawValue] = labelCountBytes

        // Lay out: header, section table, then each section 8-aligned.
        var table: [UInt8] = []
        var body: [UInt8] = []
        var offset = StoreFormat.dataStart
        for section in sections {
            let padding = (8 - offset % 8) % 8
            body.append(contentsOf: repeatElement(0, count: padding))
            offset += padding
            table.appendLittleEndian(UInt64(offset))
            table.appendLittleEndian(UInt64(section.count))
            body.append(contentsOf: section)
            offset += section.count
        }
        guard offset <= Int(UInt32.max), names.count <= Int(UInt32.max) else { throw .tooLarge }
        var file: [UInt8] = []
        file.reserveCapacity(offset)
        file.append(contentsOf: StoreFormat.magic)
        file.appendLittleEndian(StoreFormat.formatVersion)
        file.appendLittleEndian(UInt32(StoreFormat.headerLength))
        file.appendLittleEndian(UInt64(offset))
        file.appendLittleEndian(version)
        file.appendLittleEndian(UInt64(0))  // the checksum, filled in below
        file.appendLittleEndian(UInt32(sections.count))
        file.appendLittleEndian(UInt32(names.count))
        file.appendLittleEndian(domainTable.homeRange)
        file.appendLittleEndian(urlTable.homeRange)
        file.append(contentsOf: table)
        file.append(contentsOf: body)
        let checksum = StableHash.checksum(file.span.extracting(0..<32), file.span.extracting(40...))
        for index in 0..<8 { file[32 + index] = UInt8(truncatingIfNeeded: checksum >> (8 * UInt64(index))) }

        let summary = Summary(
            distinctNames: names.count,
            domainSlots: domainTable.slotCount,
            urlRules: urlList.count,
            networkRules: networkList.count,
            categories: categoryNames.count,
            bytes: file.count
        )
        return (file, summary)
    }
}

/// A fingerprint table as the store lays it out, built from keys in increasing order.
private struct FingerprintTable {
    let homeRange: UInt64
    let slotCount: Int
    let slotBytes: [UInt8]
    let valueBytes: [UInt8]

    init(sortedKeys keys: [UInt64], values: [UInt32]) {
        guard !keys.isEmpty else {
            homeRange = 0
            slotCount = 0
            slotBytes = []
            valueBytes = []
            return
        }
        let range = UInt64((Double(keys.count) / StoreFormat.loadFactor).rounded(.up))
        var slots = [UInt64](repeating: 0, count: Int(range))
        var slotValues = [UInt32](repeating: 0, count: Int(range))
        var next = 0
        for (key, value) in zip(keys, values) {
            let position = max(StoreFormat.homeSlot(key, range: range), next)
            if position >= slots.count {
                slots.append(contentsOf: repeatElement(0, count: position - slots.count + 1))
                slotValues.append(contentsOf: repeatElement(0, count: position - slotValues.count + 1))
            }
            slots[position] = key
            slotValues[position] = value
            next = position + 1
        }
        homeRange = range
        slotCount = slots.count
        slotBytes = littleEndianBytes(slots)
        valueBytes = littleEndianBytes(slotValues)
    }
}

/// The strings section, with identical strings stored once.
private struct SectionWriter {
    var strings: [UInt8] = []
    var known: [[UInt8]: UInt32] = [:]

    mutating func addString(_ bytes: [UInt8]) -> (offset: UInt32, length: UInt32) {
        if let offset = known[bytes] { return (offset, UInt32(bytes.count)) }
        let offset = UInt32(strings.count)
        strings.append(contentsOf: bytes)
        known[bytes] = offset
        return (offset, UInt32(bytes.count))
    }
}

private func littleEndianBytes<T: FixedWidthInteger>(_ values: [T]) -> [UInt8] {
    let size = MemoryLayout<T>.size
    var bytes = [UInt8](repeating: 0, count: values.count * size)
    for (position, value) in values.enumerated() {
        for index in 0..<size { bytes[position * size + index] = UInt8(truncatingIfNeeded: value >> (8 * index)) }
    }
    return bytes
}

extension [UInt8] {
    mutating func appendLittleEndian<T: FixedWidthInteger>(_ value: T) {
        for index in 0..<MemoryLayout<T>.size { append(UInt8(truncatingIfNeeded: value >> (8 * index))) }
    }
}

extension IPAddress {
    /// Orders IPv4 before IPv6, then numerically.
    var sortKey: [UInt64] {
        switch self {
        case .v4(let value): [0, UInt64(value)]
        case .v6(let high, let low): [1, high, low]
        }
    }
}
