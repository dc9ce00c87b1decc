import ArgumentParser
import BundleBuilder
import FilterControl

/// The option of the commands that make a store (`compile`, `bundle build`):
/// whether it carries hallpass's own protection lists (`ProtectionLists`).
struct ProtectionOptions: ParsableArguments {
    @Flag(
        name: .customLong("no-builtin-protections"),
        help: """
            Leave out hallpass's own lists of DNS-over-HTTPS resolvers (category doh) and ECH public names \
            (category ech-front). By default every store carries them, whatever the sources, so that bypass.encryptedDNS \
            and bypass.ech block them; a source of the same category adds to them.
            """)
    var noBuiltinProtections = false

    /// The lists to add, nil with --no-builtin-protections, or an exit when they are missing.
    func lists() throws -> ProtectionLists? {
        guard !noBuiltinProtections else { return nil }
        do {
            return try ProtectionLists.forThisProgram()
        } catch {
            throw fail(error.description, status: ExitStatus.noInput)
        }
    }
}
