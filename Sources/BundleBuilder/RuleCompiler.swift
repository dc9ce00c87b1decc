import Foundation
public import SharedStore
import VerdictCore

/// Turns rule sources on disk into a rule store: `[CATEGORY=]PATH`, where
/// PATH is a UT1-style folder (each subfolder a category holding `domains`
/// and/or `urls`), a single category folder (holding `domains`/`urls`
/// itself), or a list file whose category defaults to its file name without
/// the extension (`gambling.txt` is category `gambling`).
public struct RuleCompiler {
    public struct SourceSpec: Sendable, Hashable {
        public var category: String?
        public var path: String

        /// Parses `[CATEGORY=]PATH`.
        public init(_ text: String) {
            if let equals = text.firstIndex(of: "="), !text[..<equals].contains("/") {
                category = String(text[..<equals])
                path = String(text[text.index(after: equals)...])
            } else {
                category = nil
                path = text
            }
        }
    }

    public struct CompileError: Error, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    public struct Result {
        public var bytes: [UInt8]
        public var summary: RuleStoreBuilder.Summary
        public var report: RuleListParser.Report
        /// Accepted rules per category of the sources, in the store's order.
        public var rulesPerCategory: [(category: String, rules: Int)]
        /// Accepted rules per category of hallpass's own protection lists, and
        /// where they were read; nil when they were left out.
        public var protections: (lists: ProtectionLists, rulesPerCategory: [(category: String, rules: Int)])?
    }

    /// The store's metadata key saying which of hallpass's own protection lists it
    /// carries: their categories, or `none`.
    public static let protectionsMetadataKey = "protections"

    /// Files read inside a UT1 category folder.
    static let categoryFiles = ["domains", "urls"]

    public init() {}

    /// The store of `sources`, with `protections` (hallpass's own lists) added to
    /// their categories unless nil. The store's metadata says which (`protections`).
    public func compile(
        _ sources: [SourceSpec], version: UInt64, metadata: [String: String] = [:], protections: ProtectionLists? = nil
    ) throws -> Result {
        guard !sources.isEmpty else { throw CompileError(message: "no sources given: name at least one list file or folder") }
        var builder = RuleStoreBuilder()
        var report = RuleListParser.Report()
        var perCategory: [String: Int] = [:]
        let parser = RuleListParser()
        let files = FileManager.default

        func addFile(_ path: String, category name: String) throws {
            let category: CategoryID
            do {
                category = try builder.category(named: name)
            } catch {
                throw CompileError(message: "\(path): \(error)")
            }
            guard let data = files.contents(atPath: path) else {
                throw CompileError(message: "cannot read \(path): check that it exists and is readable")
            }
            let isURLList = (path as NSString).lastPathComponent == "urls"
            let fileReport = parser.parse([UInt8](data), sourceName: path, category: category, urlList: isURLList, into: &builder)
            perCategory[builder.categoryNames[Int(category)], default: 0] += fileReport.acceptedRules
            report.merge(fileReport)
        }

        for source in sources {
            guard files.fileExists(atPath: source.path) else {
                throw CompileError(message: "\(source.path): no such file or folder")
            }
            if !RuleCompiler.isFolder(source.path, files) {
                let fileName = (source.path as NSString).lastPathComponent
                let stem = fileName.contains(".") ? String(fileName[..<fileName.lastIndex(of: ".")!]) : fileName
                try addFile(source.path, category: source.category ?? stem)
                continue
            }
            // A folder that holds domains/urls itself is one category.
            let own = RuleCompiler.categoryFiles.filter { files.fileExists(atPath: source.path + "/" + $0) }
            if !own.isEmpty {
                let name = source.category ?? (source.path as NSString).lastPathComponent
                for file in own { try addFile(source.path + "/" + file, category: name) }
                continue
            }
            guard source.category == nil else {
                throw CompileError(
                    message: "\(source.path): a CATEGORY= prefix needs a list file or a folder holding 'domains' or 'urls'")
            }
            let entries = try files.contentsOfDirectory(atPath: source.path).sorted()
            var found = 0
            for entry in entries {
                let folder = source.path + "/" + entry
                guard RuleCompiler.isFolder(folder, files) else { continue }
                for file in RuleCompiler.categoryFiles where files.fileExists(atPath: folder + "/" + file) {
                    try addFile(folder + "/" + file, category: entry)
                    found += 1
                }
            }
            guard found > 0 else {
                throw CompileError(message: "\(source.path): no category folders with 'domains' or 'urls' files found")
            }
        }
        let ordered = builder.categoryNames.map { ($0, perCategory[$0] ?? 0) }
        // hallpass's own lists last, so that the sources' categories keep their places;
        // a category the sources have already gets these rules as well.
        var ownRules: [(category: String, rules: Int)] = []
        if let protections {
            perCategory = [:]
            for category in ProtectionLists.categories {
                try addFile(protections.listFile(of: category), category: category)
                ownRules.append((category, perCategory[category] ?? 0))
            }
        }
        builder.setMetadata(RuleCompiler.protectionsMetadataKey, protections == nil ? "none" : ProtectionLists.categories.joined(separator: " "))
        for (key, value) in metadata { builder.setMetadata(key, value) }
        let (bytes, summary) = try builder.build(version: version)
        return Result(
            bytes: bytes, summary: summary, report: report, rulesPerCategory: ordered,
            protections: protections.map { ($0, ownRules) })
    }
}

extension RuleCompiler {
    /// Whether `path` is a folder (symbolic links followed): it lists.
    static func isFolder(_ path: String, _ files: FileManager) -> Bool {
        (try? files.contentsOfDirectory(atPath: path)) != nil
    }
}
