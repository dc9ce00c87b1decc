// Helpers shared by the unit test targets (not part of any product).

/// A tiny deterministic generator for fuzz-style tests (no global randomness).
public struct SplitMix64: RandomNumberGenerator {
    public var state: UInt64

    public init(state: UInt64) { self.state = state }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Flips a few random bytes of `bytes`, `rounds` times, and calls `body` with each mutant.
public func forEachMutation(of bytes: [UInt8], rounds: Int = 300, seed: UInt64 = 1, _ body: ([UInt8]) -> Void) {
    var generator = SplitMix64(state: seed)
    guard !bytes.isEmpty else { return }
    for _ in 0..<rounds {
        var copy = bytes
        let flips = Int.random(in: 1...4, using: &generator)
        for _ in 0..<flips {
            let index = Int.random(in: 0..<copy.count, using: &generator)
            copy[index] = UInt8.random(in: 0...255, using: &generator)
        }
        body(copy)
    }
}

