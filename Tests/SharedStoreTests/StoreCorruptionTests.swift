import SharedStore
import Testing
import VerdictCore

/// A damaged store must give an error or the right answers, never a crash.
@Suite struct StoreCorruptionTests {
    @Test func everyTruncationIsAnError() throws {
        let bytes = try sampleStore()
        for length in 0..<bytes.count {
            #expect(throws: StoreError.self) { try RuleStore(bytes: Array(bytes.prefix(length))) }
        }
    }

    @Test func everyFlippedByteIsRefused() throws {
        let bytes = try sampleStore()
        for position in 0..<bytes.count {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var damaged = bytes
                damaged[position] ^= mask
                #expect(throws: StoreError.self, "byte \(position) ^ \(mask)") { try RuleStore(bytes: damaged) }
            }
        }
    }

    /// Without the checksum (as filter-data opens an already verified file)
    /// damage may change answers, but every read stays inside the file.
    @Test func structureOnlyReadsOfDamagedStoresNeverCrash() throws {
        let bytes = try sampleStore()
        for position in 0..<bytes.count {
            for mask: UInt8 in [0x01, 0x10, 0xFF] {
                var damaged = bytes
                damaged[position] ^= mask
                if let store = try? RuleStore(bytes: damaged, verification: .structure) {
                    _ = try answers(store)
                }
            }
        }
    }

    @Test func randomBytesAreRefused() throws {
        var generator = SystemRandomNumberGenerator()
        for length in [0, 1, 8, 63, 64, 65, 300, 1000, 5000] {
            for _ in 0..<20 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
                #expect(throws: StoreError.self) { try RuleStore(bytes: bytes) }
            }
        }
        // A valid header over random sections still fails cleanly.
        var bytes = try sampleStore()
        for index in 64..<bytes.count { bytes[index] = UInt8.random(in: 0...255, using: &generator) }
        #expect(throws: StoreError.self) { try RuleStore(bytes: bytes) }
    }

    @Test func errorsSayWhatIsWrong() throws {
        let bytes = try sampleStore()
        #expect(throws: StoreError.notAStore(path: "<memory>")) { try RuleStore(bytes: Array("hello".utf8)) }
        #expect(throws: StoreError.truncated(path: "<memory>", expected: UInt64(bytes.count), actual: UInt64(bytes.count - 1))) {
            try RuleStore(bytes: Array(bytes.dropLast()))
        }
        var other = bytes
        other[8] = 9
        #expect(throws: StoreError.unsupportedVersion(path: "<memory>", version: 9)) { try RuleStore(bytes: other) }
        var damaged = bytes
        damaged[bytes.count - 3] ^= 1
        #expect(throws: StoreError.checksumMismatch(path: "<memory>")) { try RuleStore(bytes: damaged) }
        #expect(throws: StoreError.self) { try RuleStore(path: "/nonexistent/rules.hpstore") }
        #expect(throws: StoreError.self) { try RuleStore(path: "/") }
    }
}
