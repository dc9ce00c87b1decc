import SystemPackage

/// Why a rule store cannot be used. Each case has a stable code (for logs
/// and `filterctl status`) and a message that says what to do.
public enum StoreError: Error, Hashable, Sendable, CustomStringConvertible {
    case cannotOpen(path: String, errno: Int32)
    case notAStore(path: String)
    case unsupportedVersion(path: String, version: UInt32)
    case truncated(path: String, expected: UInt64, actual: UInt64)
    case corrupt(path: String, detail: String)
    case checksumMismatch(path: String)
    case tooLarge(path: String, size: UInt64)

    /// A short stable identifier, e.g. `store.checksum`.
    public var code: String {
        switch self {
        case .cannotOpen: "store.open"
        case .notAStore: "store.magic"
        case .unsupportedVersion: "store.version"
        case .truncated: "store.truncated"
        case .corrupt: "store.corrupt"
        case .checksumMismatch: "store.checksum"
        case .tooLarge: "store.size"
        }
    }

    public var description: String {
        switch self {
        case .cannotOpen(let path, let errno):
            "cannot open rule store \(path): \(Errno(rawValue: errno))"
        case .notAStore(let path):
            "\(path) is not a hallpass rule store (wrong magic number); build one with 'filterctl compile'"
        case .unsupportedVersion(let path, let version):
            "rule store \(path) has format version \(version), this hallpass reads version \(StoreFormat.formatVersion); recompile it with this filterctl"
        case .truncated(let path, let expected, let actual):
            "rule store \(path) is truncated: its header says \(expected) bytes, the file has \(actual); copy or download it again"
        case .corrupt(let path, let detail):
            "rule store \(path) is corrupt (\(detail)); recompile it or fetch the bundle again"
        case .checksumMismatch(let path):
            "rule store \(path) fails its checksum: the file was changed or damaged after it was written; recompile it or fetch the bundle again"
        case .tooLarge(let path, let size):
            "rule store \(path) is \(size) bytes, more than the 4 GiB a store may have"
        }
    }
}
