// The libFuzzer driver. The target is chosen by HALLPASS_FUZZ_TARGET
// (scripts/fuzz.sh sets it); with HALLPASS_FUZZ_SEEDS=DIR the target's seeds
// are written to DIR first (from HALLPASS_TESTDATA, ../shared/testdata).
// libFuzzer's flags and corpus folders are the command line's.
import CLibFuzzer
import Foundation
import HallpassFuzzTargets

let environment = ProcessInfo.processInfo.environment
guard let target = FuzzTarget(rawValue: environment["HALLPASS_FUZZ_TARGET"] ?? "") else {
    let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: " ")
    FileHandle.standardError.write(Data("hallpass-fuzz: set HALLPASS_FUZZ_TARGET to one of: \(names)\n".utf8))
    exit(64)
}
if let folder = environment["HALLPASS_FUZZ_SEEDS"] {
    try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    for (index, seed) in target.seeds(testdata: environment["HALLPASS_TESTDATA"]).enumerated() {
        _ = FileManager.default.createFile(atPath: "\(folder)/seed-\(index)", contents: Data(seed))
    }
}

/// The target of this process, for the C callback (which cannot capture it).
enum Selected {
    static let target: FuzzTarget = FuzzTarget(rawValue: ProcessInfo.processInfo.environment["HALLPASS_FUZZ_TARGET"] ?? "") ?? .ip
}

var argc = CommandLine.argc
var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = unsafe CommandLine.unsafeArgv
// unsafe: libFuzzer reads the process's own argc/argv, and hands the callback `size`
// readable bytes at `data` for the duration of that call; they are copied at once.
let status = unsafe LLVMFuzzerRunDriver(&argc, &argv) { data, size in
    let input = unsafe data.map { unsafe Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    Selected.target.run(input)
    return 0
}
exit(status)
