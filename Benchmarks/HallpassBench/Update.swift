// hallpass-bench update: one rule update as filter-control makes it (RuleUpdater),
// for scripts/bench-updates.sh, which counts the bytes on nginx's side as well.
#if canImport(Glibc)
import Glibc
#endif
import FilterControl
import SharedStore

/// `update --directory DIR --source URL --trusted-key ed25519:... --ca-file PEM`:
/// prints the outcome, the bytes the update downloaded and how its files came.
func update(_ arguments: [String]) async {
    guard let directory = option("--directory", in: arguments), let source = option("--source", in: arguments),
        let keyText = option("--trusted-key", in: arguments), let key = try? BundlePublicKey(keyText)
    else { fail("usage: update --directory DIR --source URL --trusted-key ed25519:BASE64 [--ca-file PEM]") }
    var settings = RuleUpdater.Settings(directory: directory, source: source, trustedKeys: [key], caFile: option("--ca-file", in: arguments))
    settings.useSystemTrustRoots = false
    let updater = RuleUpdater(settings: settings)
    let started = nanoseconds()
    let outcome = await updater.update()
    let elapsed = Double(nanoseconds() - started) / 1e9
    let state = updater.state()
    print("\(outcome); \(state.lastDownloadBytes ?? 0) bytes downloaded; files: \(state.lastFiles ?? "-"); \(decimal(elapsed, places: 2)) s")
    if case .refused = outcome { exit(1) }
}
