import ArgumentParser
import FilterControl
import Foundation

/// The audit file of --file, else log.file of --config (or of the default configuration).
struct AuditFileOptions: ParsableArguments {
    @Option(name: .long, help: "The audit file (default: log.file of --config, or /var/log/hallpass/audit.jsonl).")
    var file: String?

    @Option(name: .long, help: "A hallpass.yaml naming the audit file and the pseudonym key.")
    var config: String?

    func settings() throws -> (file: String, settings: AuditSettings, rulesDirectory: String) {
        var configuration = Configuration()
        let path = config ?? Configuration.defaultPath
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            do {
                configuration = try Configuration(yaml: text)
            } catch {
                throw fail("\(path): \(error)", status: ExitStatus.configError)
            }
        } else if config != nil {
            throw fail("cannot read \(path)", status: ExitStatus.noInput)
        }
        guard let file = file ?? configuration.log.file else {
            throw fail("\(path) writes no audit file (log.file: none); give --file", status: ExitStatus.noInput)
        }
        return (file, configuration.log, configuration.rules.directory)
    }
}

/// `90s`, `30m`, `6h`, `7d`, `2w` before now.
func sinceDate(_ text: String?) throws -> Date? {
    guard let text else { return nil }
    let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800]
    guard let unit = text.last, let factor = units[unit], let value = Double(text.dropLast()), value >= 0 else {
        throw ValidationError("--since takes a duration like 90s, 30m, 6h, 7d or 2w, not '\(text)'")
    }
    return Date().addingTimeInterval(-value * factor)
}

struct LogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Show the audit records: blocked flows, and allowed ones when log.allowed is all.",
        discussion: """
            Reads log.file and its rotated files (FILE.1 is the newest of them), oldest first. One line per record:
            TIME ACTION KIND NAME USER REASON; with --json the records' own JSON lines. --user matches the login
            name, or its pseudonym when log.users is pseudonym and the pseudonym key can be read (root).
            --follow goes on showing new records, across rotations, until interrupted.
            """)

    @OptionGroup var source: AuditFileOptions

    @Flag(name: .long, help: "Keep showing records as they are written.")
    var follow = false

    @Flag(name: .long, help: "Only blocked flows.")
    var blocked = false

    @Option(name: .long, help: "Only this user's records (login name).")
    var user: String?

    @Option(name: .long, help: "Only records of this last while: 90s, 30m, 6h, 7d, 2w.")
    var since: String?

    @Flag(name: .long, help: "Print the records' JSON lines.")
    var json = false

    func run() throws {
        let (file, settings, rulesDirectory) = try source.settings()
        var filter = AuditLogReader.Filter(blockedOnly: blocked, user: user, since: try sinceDate(since))
        if let user, settings.users == .pseudonym,
            let key = try? Pseudonyms.loadKey(path: settings.pseudonymKeyPath(rulesDirectory: rulesDirectory), create: false)
        {
            filter.userPseudonym = Pseudonyms(key: key).pseudonym(for: user)
        }
        var reader = AuditLogReader(path: file)
        guard follow || !reader.files().isEmpty else {
            throw fail("no audit records at \(file) (nothing blocked yet, or log.file is elsewhere)", status: ExitStatus.noInput)
        }
        let output = FileHandle.standardOutput
        let show: (AuditLine, Substring) -> Void = { record, line in
            output.write(Data(((json ? String(line) : AuditLogText.line(record)) + "\n").utf8))
        }
        do {
            if follow {
                try reader.follow(filter, show)
            } else {
                try reader.read(filter, show)
            }
        } catch {
            throw fail("reading \(file): \(error.localizedDescription)", status: ExitStatus.ioError)
        }
        if reader.unreadableLines > 0 {
            FileHandle.standardError.write(Data("filterctl: skipped \(reader.unreadableLines) lines that are not audit records\n".utf8))
        }
    }
}

struct TopCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "top",
        abstract: "Show the most blocked names, categories and users.",
        discussion: "Counts the blocked records of the audit file and its rotated files (all of them without --since).")

    @OptionGroup var source: AuditFileOptions

    @Option(name: .long, help: "Only records of this last while: 90s, 30m, 6h, 7d, 2w.")
    var since: String?

    @Option(name: .long, help: "Rows in each column.")
    var limit: Int = 10

    func validate() throws {
        guard (1...1000).contains(limit) else { throw ValidationError("--limit is from 1 to 1000") }
    }

    func run() throws {
        let (file, _, _) = try source.settings()
        var reader = AuditLogReader(path: file)
        guard !reader.files().isEmpty else {
            throw fail("no audit records at \(file) (nothing blocked yet, or log.file is elsewhere)", status: ExitStatus.noInput)
        }
        var tally = AuditLogText.Tally()
        do {
            try reader.read(AuditLogReader.Filter(blockedOnly: true, since: try sinceDate(since))) { record, _ in tally.add(record) }
        } catch {
            throw fail("reading \(file): \(error.localizedDescription)", status: ExitStatus.ioError)
        }
        print(AuditLogText.table(tally, limit: limit), terminator: "")
    }
}
