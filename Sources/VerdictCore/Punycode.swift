/// Punycode (RFC 3492) encoding of one label, as used by IDNA to carry
/// non-ASCII host names in DNS (`bücher` becomes `xn--bcher-kva`).
enum Punycode {
    private static let base = 36
    private static let tMin = 1
    private static let tMax = 26
    private static let skew = 38
    private static let damp = 700
    private static let initialBias = 72
    private static let initialN = 128

    /// The Punycode form of `scalars` without the `xn--` prefix, or nil when
    /// the label is too long to encode without overflow (never for DNS-sized labels).
    static func encode(_ scalars: [Unicode.Scalar]) -> [UInt8]? {
        var output: [UInt8] = []
        for scalar in scalars where scalar.isASCII {
            output.append(UInt8(scalar.value))
        }
        let basicCount = output.count
        var handled = basicCount
        if basicCount > 0 { output.append(UInt8(ascii: "-")) }

        var n = initialN
        var delta = 0
        var bias = initialBias
        let codePoints = scalars.map { Int($0.value) }
        while handled < codePoints.count {
            // The smallest code point not yet handled.
            guard let next = codePoints.filter({ $0 >= n }).min() else { return nil }
            let (product, overflow) = (next - n).multipliedReportingOverflow(by: handled + 1)
            guard !overflow, delta <= Int(Int32.max) - product else { return nil }
            delta += product
            n = next
            for codePoint in codePoints {
                if codePoint < n {
                    delta += 1
                    guard delta <= Int(Int32.max) else { return nil }
                }
                if codePoint == n {
                    var q = delta
                    var k = base
                    while true {
                        let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                        if q < t { break }
                        output.append(digit(t + (q - t) % (base - t)))
                        q = (q - t) / (base - t)
                        k += base
                    }
                    output.append(digit(q))
                    bias = adapt(delta: delta, count: handled + 1, first: handled == basicCount)
                    delta = 0
                    handled += 1
                }
            }
            delta += 1
            n += 1
        }
        return output
    }

    private static func digit(_ value: Int) -> UInt8 {
        value < 26 ? UInt8(ascii: "a") + UInt8(value) : UInt8(ascii: "0") + UInt8(value - 26)
    }

    private static func adapt(delta: Int, count: Int, first: Bool) -> Int {
        var delta = first ? delta / damp : delta / 2
        delta += delta / count
        var k = 0
        while delta > ((base - tMin) * tMax) / 2 {
            delta /= base - tMin
            k += base
        }
        return k + (base - tMin + 1) * delta / (delta + skew)
    }
}
