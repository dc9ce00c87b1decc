import Foundation
import VerdictCore

/// hallpass's own lists against the ways around the filter: the DNS-over-HTTPS
/// resolvers (category `doh`, blocked with `bypass.encryptedDNS: block`) and the
/// ECH public names (category `ech-front`, blocked with `bypass.ech: block`).
///
/// `filterctl compile` and `filterctl bundle build` add them to every store they
/// make, whatever lists the school gives, so these protections do not depend on
/// the school's lists carrying the two categories (a school's own `doh` list adds
/// to them). They are data files read when a store is made, never linked into a
/// program: `rules/bypass` in the source tree, `PREFIX/share/hallpass/bypass`
/// where hallpass is installed (the Debian package: `/usr/share/hallpass/bypass`).
///
/// The canary and Private Relay names are no list: `BypassCanaryNames` answers
/// them in every policy with `bypass.encryptedDNS: block`.
public struct ProtectionLists: Sendable, Hashable {
    /// The categories, each a folder of that name holding a `domains` file.
    public static let categories = [BypassPolicy.encryptedDNSCategory, BypassPolicy.echFrontCategory]

    /// Where an installed filterctl finds them, relative to its own folder (`bin`).
    public static let installedFolder = "../share/hallpass/bypass"
    /// Where they are in the source tree.
    public static let sourceTreeFolder = "rules/bypass"

    /// The folder holding one folder per category.
    public let folder: String

    public init(folder: String) {
        self.folder = folder
    }

    /// The list file of `category`.
    public func listFile(of category: String) -> String {
        folder + "/" + category + "/domains"
    }

    /// The lists are not where the program looks for them.
    public struct NotFound: Error, Sendable, Hashable, CustomStringConvertible {
        /// The list file missing from the first place looked in (the installed one).
        public var missingFile: String
        /// Every folder looked in.
        public var places: [String]

        public var description: String {
            "hallpass's own protection lists (categories \(ProtectionLists.categories.joined(separator: ", "))) are missing: "
                + "no \(missingFile) (looked in \(places.joined(separator: " and "))); the hallpass package and 'make install' "
                + "put them there: install hallpass again, or leave them out with --no-builtin-protections"
        }
    }

    /// The lists of the program at `executable` (its real path, links resolved):
    /// `../share/hallpass/bypass` from the program's folder (an installed hallpass),
    /// or else, for a program built in the source tree, the tree's `rules/bypass`
    /// (the nearest folder above the program that holds `Package.swift` and `rules/bypass`).
    public static func forProgram(at executable: String) throws(NotFound) -> ProtectionLists {
        let programFolder = URL(fileURLWithPath: executable).deletingLastPathComponent()
        let installed = programFolder.appendingPathComponent(installedFolder).standardized.path
        var places = [installed]
        if let missing = firstMissingFile(in: installed) {
            var folder = programFolder
            while folder.path != "/" {
                let tree = folder.appendingPathComponent(sourceTreeFolder).path
                if FileManager.default.fileExists(atPath: folder.appendingPathComponent("Package.swift").path),
                    FileManager.default.fileExists(atPath: tree)
                {
                    places.append(tree)
                    if firstMissingFile(in: tree) == nil { return ProtectionLists(folder: tree) }
                    break
                }
                folder = folder.deletingLastPathComponent()
            }
            throw NotFound(missingFile: missing, places: places)
        }
        return ProtectionLists(folder: installed)
    }

    /// The lists of the running program (`/proc/self/exe`).
    public static func forThisProgram() throws(NotFound) -> ProtectionLists {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return try forProgram(at: executable)
    }

    /// The first list file that `folder` lacks (or cannot be read), nil when it has them all.
    private static func firstMissingFile(in folder: String) -> String? {
        let lists = ProtectionLists(folder: folder)
        return categories.map(lists.listFile(of:)).first { !FileManager.default.isReadableFile(atPath: $0) }
    }
}
