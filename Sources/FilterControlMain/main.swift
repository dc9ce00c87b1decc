// filter-control: the control daemon (see DESIGN.md).
// The daemon is not in this build yet; say so plainly instead of pretending to run.
#if canImport(Glibc)
import Glibc
#endif

let message = Array("filter-control: the control daemon is not available in this build yet (see README, Status); use filterctl's offline commands\n".utf8)
_ = message.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
exit(69)  // EX_UNAVAILABLE
