// filter-data: the sandboxed NFQUEUE data process (see DESIGN.md).
// The queue loop and the sandbox are not in this build yet; say so plainly
// instead of pretending to filter.
#if canImport(Glibc)
import Glibc
#endif

let message = Array("filter-data: the NFQUEUE data path is not available in this build yet (see README, Status)\n".utf8)
_ = message.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
exit(69)  // EX_UNAVAILABLE
