// libFuzzer's two entry points. The target is chosen by HALLPASS_FUZZ_TARGET
// (scripts/fuzz.sh sets it); with HALLPASS_FUZZ_SEEDS=DIR the target's seeds
// are written to DIR first (from HALLPASS_TESTDATA, ../shared/testdata).
import Foundation
import HallpassFuzzTargets

let selected: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["HALLPASS_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: " ")
        FileHandle.standardError.write(Data("hallpass-fuzz: set HALLPASS_FUZZ_TARGET to one of: \(names)\n".utf8))
        exit(64)
    }
    return target
}()

@_cdecl("LLVMFuzzerInitialize")
public func fuzzerInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    let environment = ProcessInfo.processInfo.environment
    let target = selected
    if let folder = environment["HALLPASS_FUZZ_SEEDS"] {
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for (index, seed) in target.seeds(testdata: environment["HALLPASS_TESTDATA"]).enumerated() {
            FileManager.default.createFile(atPath: "\(folder)/seed-\(index)", contents: Data(seed))
        }
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    // unsafe: libFuzzer hands over `size` readable bytes at `data` for this call; they are copied at once.
    let input = unsafe data.map { unsafe Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    selected.run(input)
    return 0
}
