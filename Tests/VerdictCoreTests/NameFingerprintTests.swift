import Testing
import VerdictCore

@Suite struct NameFingerprintTests {
    @Test func suffixFingerprintsAreTheFingerprintsOfTheSuffixes() throws {
        let name = try HostName("a.very-long-label-over-eight.example.co.uk")
        let suffixes = SuffixFingerprints(name)
        #expect(suffixes.count == 5)
        for index in 0..<suffixes.count {
            let suffix = try HostName(String(name.description.dropFirst(suffixes.starts[index])))
            #expect(suffixes.fingerprints[index] == SuffixFingerprints.fingerprint(of: suffix))
        }
    }

    @Test func labelBoundariesMatter() throws {
        #expect(try SuffixFingerprints.fingerprint(of: HostName("ab.c")) != SuffixFingerprints.fingerprint(of: HostName("a.bc")))
        #expect(try SuffixFingerprints.fingerprint(of: HostName("example.com")) != SuffixFingerprints.fingerprint(of: HostName("example.co")))
    }

    /// The fingerprint is part of the store format: a change here must come with a new format version.
    @Test func fingerprintsAreStableAcrossBuilds() throws {
        let fingerprint = try SuffixFingerprints.fingerprint(of: HostName("example.com"))
        #expect(fingerprint == 6_434_067_043_083_766_777)
        let bytes: [UInt8] = Array("hallpass".utf8)
        #expect(StableHash.checksum(bytes.span) == 12_880_259_304_255_303_185)
    }

    @Test func noCollisionsAmongManyNames() throws {
        var seen = Set<UInt64>()
        for index in 0..<200_000 {
            let name = try HostName("host\(index).example\(index % 97).com")
            #expect(seen.insert(SuffixFingerprints.fingerprint(of: name)).inserted)
        }
    }
}
