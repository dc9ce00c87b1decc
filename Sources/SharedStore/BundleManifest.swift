/// The manifest of a signed rule bundle: a small, strict text file whose
/// exact bytes are what the Ed25519 signature covers.
///
/// ```
/// hallpass-bundle 1
/// version 42
/// issued 2026-11-22T08:00:00Z
/// expires 2026-12-22T08:00:00Z
/// file rules.hpstore 1234567 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
/// delta rules.hpstore.60303ae22b998861-9f86d081884c7d65.zst 31337 5994471abb01112afcc18159f6cc74b4f511b99806da59b3caf5a9c173cacfc5 rules.hpstore 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
/// ```
///
/// Lines end in `\n`; fields are separated by one space. `version` is a
/// positive integer that must grow with every bundle. Times are UTC in the
/// form shown. Each `file` line gives a name (1 to 100 of `A-Z a-z 0-9 . _ -`,
/// not starting with `.`: a name can never leave the bundle folder), the size
/// in bytes and the lower-case hex SHA-256. Each `delta` line names a file
/// that rebuilds one of the `file`s from an earlier version of it: the
/// delta's own name, size and SHA-256 (as a `file` line), the name of the
/// `file` it makes, and the SHA-256 of the earlier version it starts from (a
/// zstd frame with that version as its prefix, `zstd --patch-from`). A machine
/// that has the earlier version may fetch the delta instead of the file; the
/// result must still have the file's signed SHA-256. Any other key, a
/// repeated key, or a line out of this shape makes the whole manifest invalid.
public struct BundleManifest: Sendable, Hashable {
    public struct File: Sendable, Hashable {
        public var name: String
        public var size: UInt64
        /// Lower-case hex SHA-256.
        public var sha256: String

        public init(name: String, size: UInt64, sha256: String) {
            self.name = name
            self.size = size
            self.sha256 = sha256
        }
    }

    /// A delta that rebuilds the file `target` from the version of it whose SHA-256 is `baseSHA256`.
    public struct Delta: Sendable, Hashable {
        /// The delta's own file in the bundle folder.
        public var name: String
        public var size: UInt64
        /// Lower-case hex SHA-256 of the delta file.
        public var sha256: String
        /// The `file` the delta makes.
        public var target: String
        /// Lower-case hex SHA-256 of the earlier version of `target` that the delta starts from.
        public var baseSHA256: String

        public init(name: String, size: UInt64, sha256: String, target: String, baseSHA256: String) {
            self.name = name
            self.size = size
            self.sha256 = sha256
            self.target = target
            self.baseSHA256 = baseSHA256
        }
    }

    public static let fileName = "manifest"
    public static let signatureFileName = "manifest.sig"
    /// The store inside a bundle.
    public static let storeFileName = "rules.hpstore"
    /// The school's policy (groups, schedules, exams), when the bundle carries one.
    public static let policyFileName = "policy.yaml"
    public static let maximumManifestBytes = 64 * 1024
    /// `manifest.sig` is one short line; anything longer is not a signature file.
    public static let maximumSignatureBytes = 4096
    public static let maximumFileBytes: UInt64 = 1 << 30
    public static let maximumFiles = 256
    /// Deltas per manifest: a few earlier versions of a few files.
    public static let maximumDeltas = 64

    public var version: UInt64
    /// Unix seconds.
    public var issuedAt: Int64
    /// Unix seconds.
    public var expiresAt: Int64
    public var files: [File]
    public var deltas: [Delta]

    public init(version: UInt64, issuedAt: Int64, expiresAt: Int64, files: [File], deltas: [Delta] = []) {
        self.version = version
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.files = files
        self.deltas = deltas
    }

    /// The deltas that make `file` from a version of it this machine has (`has` says, by SHA-256).
    public func deltas(making file: File, from has: (String) -> Bool) -> [Delta] {
        deltas.filter { $0.target == file.name && $0.baseSHA256 != file.sha256 && has($0.baseSHA256) }
    }

    /// The exact bytes that get signed.
    public var encoded: [UInt8] {
        var text = "hallpass-bundle 1\n"
        text += "version \(version)\n"
        text += "issued \(UTCTime.format(issuedAt))\n"
        text += "expires \(UTCTime.format(expiresAt))\n"
        for file in files {
            text += "file \(file.name) \(file.size) \(file.sha256)\n"
        }
        for delta in deltas {
            text += "delta \(delta.name) \(delta.size) \(delta.sha256) \(delta.target) \(delta.baseSHA256)\n"
        }
        return Array(text.utf8)
    }

    /// Parses manifest bytes; the error names the line and what is wrong with it.
    public init(parsing bytes: [UInt8]) throws(BundleError) {
        guard bytes.count <= BundleManifest.maximumManifestBytes else {
            throw .malformedManifest(line: 0, reason: "the manifest is larger than \(BundleManifest.maximumManifestBytes) bytes")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .malformedManifest(line: 0, reason: "the manifest is not UTF-8 text")
        }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if lines.last == "" { lines.removeLast() }
        guard lines.first == "hallpass-bundle 1" else {
            throw .malformedManifest(line: 1, reason: "the first line must be 'hallpass-bundle 1'")
        }
        var version: UInt64?
        var issued: Int64?
        var expires: Int64?
        var files: [File] = []
        var deltas: [Delta] = []
        var deltaLines: [Int] = []
        var names: Set<String> = []
        for (offset, line) in lines.enumerated().dropFirst() {
            let number = offset + 1
            let fields = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            func fail(_ reason: String) -> BundleError { .malformedManifest(line: number, reason: reason) }
            switch fields.first {
            case "version":
                guard fields.count == 2, version == nil else { throw fail("expected one 'version N' line") }
                guard let value = UInt64(fields[1]), value > 0, fields[1].allSatisfy(\.isASCII) else {
                    throw fail("the version must be a positive integer")
                }
                version = value
            case "issued", "expires":
                guard fields.count == 2, let time = UTCTime.parse(fields[1]) else {
                    throw fail("expected '\(fields[0]) YYYY-MM-DDTHH:MM:SSZ'")
                }
                if fields[0] == "issued" {
                    guard issued == nil else { throw fail("'issued' appears twice") }
                    issued = time
                } else {
                    guard expires == nil else { throw fail("'expires' appears twice") }
                    expires = time
                }
            case "file":
                guard fields.count == 4 else { throw fail("expected 'file NAME SIZE SHA256'") }
                let name = fields[1]
                guard BundleManifest.isSafeFileName(name) else { throw .unsafeFileName(name) }
                guard !names.contains(name) else { throw fail("the file \(name) is listed twice") }
                guard let size = UInt64(fields[2]), fields[2].allSatisfy(\.isASCII), size <= BundleManifest.maximumFileBytes else {
                    throw fail("the size of \(name) must be an integer of at most \(BundleManifest.maximumFileBytes) bytes")
                }
                guard isSHA256(fields[3]) else {
                    throw fail("the SHA-256 of \(name) must be 64 lower-case hex digits")
                }
                guard files.count < BundleManifest.maximumFiles else { throw fail("more than \(BundleManifest.maximumFiles) files") }
                names.insert(name)
                files.append(File(name: name, size: size, sha256: fields[3]))
            case "delta":
                guard fields.count == 6 else { throw fail("expected 'delta NAME SIZE SHA256 TARGET FROM-SHA256'") }
                let name = fields[1]
                guard BundleManifest.isSafeFileName(name) else { throw .unsafeFileName(name) }
                guard !names.contains(name) else { throw fail("the file \(name) is listed twice") }
                guard let size = UInt64(fields[2]), fields[2].allSatisfy(\.isASCII), size > 0, size <= BundleManifest.maximumFileBytes else {
                    throw fail("the size of the delta \(name) must be an integer of 1 to \(BundleManifest.maximumFileBytes) bytes")
                }
                guard isSHA256(fields[3]), isSHA256(fields[5]) else {
                    throw fail("the SHA-256s of the delta \(name) must be 64 lower-case hex digits")
                }
                guard BundleManifest.isSafeFileName(fields[4]) else { throw .unsafeFileName(fields[4]) }
                guard !deltas.contains(where: { $0.target == fields[4] && $0.baseSHA256 == fields[5] }) else {
                    throw fail("a second delta to \(fields[4]) from the same version")
                }
                guard deltas.count < BundleManifest.maximumDeltas else { throw fail("more than \(BundleManifest.maximumDeltas) deltas") }
                names.insert(name)
                deltas.append(Delta(name: name, size: size, sha256: fields[3], target: fields[4], baseSHA256: fields[5]))
                deltaLines.append(number)
            default:
                throw fail("unknown line '\(line.prefix(40))'")
            }
        }
        guard let version else { throw .malformedManifest(line: 0, reason: "no 'version' line") }
        guard let issued else { throw .malformedManifest(line: 0, reason: "no 'issued' line") }
        guard let expires else { throw .malformedManifest(line: 0, reason: "no 'expires' line") }
        guard expires > issued else { throw .malformedManifest(line: 0, reason: "'expires' is not after 'issued'") }
        guard !files.isEmpty else { throw .malformedManifest(line: 0, reason: "no 'file' lines") }
        // A delta makes a file of this bundle, and from another version than the one it makes.
        for (delta, line) in zip(deltas, deltaLines) {
            guard let target = files.first(where: { $0.name == delta.target }) else {
                throw .malformedManifest(line: line, reason: "the delta \(delta.name) makes \(delta.target), which is no file of the bundle")
            }
            guard target.sha256 != delta.baseSHA256 else {
                throw .malformedManifest(line: line, reason: "the delta \(delta.name) starts from the file it makes")
            }
        }
        self.init(version: version, issuedAt: issued, expiresAt: expires, files: files, deltas: deltas)
    }

    /// A name that stays inside the bundle folder: no separators, no leading dot,
    /// not one of the manifest's own names.
    public static func isSafeFileName(_ name: String) -> Bool {
        guard (1...100).contains(name.utf8.count), !name.hasPrefix("."),
            name != fileName, name != signatureFileName
        else { return false }
        return name.utf8.allSatisfy {
            ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z"))
                || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || $0 == UInt8(ascii: ".")
                || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-")
        }
    }
}

private func isSHA256(_ text: String) -> Bool {
    text.utf8.count == 64 && text.utf8.allSatisfy { isLowerHex($0) }
}

private func isLowerHex(_ byte: UInt8) -> Bool {
    (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
}

/// `YYYY-MM-DDTHH:MM:SSZ` times, converted with the proleptic Gregorian
/// calendar (days-from-civil), so the format needs no Foundation.
public enum UTCTime {
    public static func format(_ seconds: Int64) -> String {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let yearText = String(year)
        let paddedYear = String(repeating: "0", count: max(0, 4 - yearText.count)) + yearText
        return "\(paddedYear)-\(two(month))-\(two(day))T\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60))Z"
    }

    public static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
            bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[19] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for index in range {
                guard bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int64(bytes[index] - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60
        else { return nil }
        let days = days(fromCivil: year, month, day)
        // Reject dates like February 30 by converting back.
        guard civil(fromDays: days) == (year, month, day) else { return nil }
        return days * 86_400 + hour * 3600 + minute * 60 + second
    }

    static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
