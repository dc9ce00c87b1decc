/// The binary layout of a compiled rule store (format version 1).
///
/// All integers are little-endian; every section starts on an 8-byte
/// boundary. The file is read in place through `mmap`: nothing is parsed or
/// copied at load except the category names and the metadata.
///
/// ```
/// header (64 bytes)
///   0  magic "HPSTORE\0"
///   8  format version   u32 (1)
///  12  header length    u32 (64)
///  16  file length      u64
///  24  rules version    u64
///  32  checksum         u64  StableHash.checksum of bytes 0..<32 and 40..<end (all but itself)
///  40  section count    u32 (14)
///  44  domain names     u32 (distinct names with domain rules)
///  48  domain home range u64 (m: a fingerprint f starts its probe at slot (f * m) >> 64)
///  56  url home range   u64
/// section table: 14 x (offset u64, length u64), in the order of `Section`
/// sections
/// ```
///
/// Domain rules live in a table of 64-bit name fingerprints sorted in slot
/// order (slot `i` holds either 0, empty, or a fingerprint whose home slot is
/// at most `i`, and the non-empty fingerprints increase with `i`). A lookup
/// starts at the home slot and stops at the fingerprint, at an empty slot,
/// or at a larger fingerprint: usually within one cache line. A parallel
/// array holds, per slot, the index of its match set: the list of
/// (category, match kind) items of that name, shared by every name with the
/// same list.
enum StoreFormat {
    static let magic: [UInt8] = Array("HPSTORE\0".utf8)
    static let formatVersion: UInt32 = 1
    static let headerLength = 64
    static let sectionTableLength = Section.allCases.count * 16
    static let dataStart = headerLength + sectionTableLength
    /// Slots per name in the domain table: 1 / 0.85.
    static let loadFactor = 0.85

    enum Section: Int, CaseIterable {
        /// UTF-8 bytes referenced by offset and length from other sections.
        case strings
        /// Per category: name offset u32, name length u32.
        case categories
        /// Domain fingerprints, u64 per slot (0 = empty).
        case domainSlots
        /// Match set index of each domain slot, u32 per slot.
        case domainValues
        /// Start of each match set in `matchItems`, u32, one more than the number of sets.
        case matchSetStarts
        /// u16 per item: category id in the low 14 bits, MatchKind in the top 2.
        case matchItems
        /// Host fingerprints of URL-prefix rules, u64 per slot (0 = empty).
        case urlSlots
        /// URL group index of each URL slot, u32 per slot.
        case urlValues
        /// Start of each URL group in `urlRules`, u32, one more than the number of groups.
        case urlGroupStarts
        /// Per URL rule: path offset u32, path length u32, category u16, reserved u16 (12 bytes).
        case urlRules
        /// Per IPv4 rule: network u32, prefix length u8, reserved u8, category u16.
        /// Sorted by prefix length (longest first), then network.
        case ipv4Rules
        /// Per IPv6 rule: network high u64, low u64, prefix length u8, reserved 5 bytes, category u16.
        /// Sorted like the IPv4 rules.
        case ipv6Rules
        /// Per entry: key offset u32, key length u32, value offset u32, value length u32.
        case metadata
        /// Two u64 words: bit n set when some domain rule's name has n labels (1...127).
        /// Lookups skip suffixes whose label count no rule has (bare top-level labels, usually).
        case domainLabelCounts

        var elementSize: Int {
            switch self {
            case .strings: 1
            case .categories: 8
            case .domainSlots, .urlSlots: 8
            case .domainValues, .urlValues, .matchSetStarts, .urlGroupStarts: 4
            case .matchItems: 2
            case .urlRules: 12
            case .ipv4Rules: 8
            case .ipv6Rules: 24
            case .metadata: 16
            case .domainLabelCounts: 16
            }
        }
    }

    static let maximumCategories = 1 << 14

    @inline(__always)
    static func matchItem(category: UInt16, kind: UInt8) -> UInt16 { UInt16(kind) << 14 | category }

    /// The first slot a fingerprint's probe looks at.
    @inline(__always)
    static func homeSlot(_ fingerprint: UInt64, range: UInt64) -> Int {
        Int(truncatingIfNeeded: fingerprint.multipliedFullWidth(by: range).high)
    }
}

#if _endian(big)
#error("The rule store format is little-endian; a big-endian reader is not written yet.")
#endif
