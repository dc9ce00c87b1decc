import HallpassSystem
public import Logging
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import SystemPackage

/// swift-log to the systemd journal through its native protocol (datagrams
/// of `FIELD=value` lines to /run/systemd/journal/socket), so every message
/// carries its metadata as journal fields: `hallpass.rules.version` becomes
/// `HALLPASS_RULES_VERSION=...`, which `journalctl -u hallpass
/// HALLPASS_HOST=example.com` can select on. Used when filter-control runs
/// under systemd; elsewhere messages go to standard error.
public struct JournalLogHandler: LogHandler {
    public static let socketPath = "/run/systemd/journal/socket"

    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    let label: String
    let identifier: String
    private let socket: JournalSocket

    public init(label: String, identifier: String, socket: JournalSocket) {
        self.label = label
        self.identifier = identifier
        self.socket = socket
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Whether filter-control runs with the journal listening (systemd sets JOURNAL_STREAM for its services).
    public static var isAvailable: Bool {
        ProcessInfo.processInfo.environment["JOURNAL_STREAM"] != nil && FileManager.default.fileExists(atPath: socketPath)
    }

    public func log(event: LogEvent) {
        var fields: [(String, String)] = [
            ("MESSAGE", event.message.description), ("PRIORITY", String(Self.priority(event.level))), ("SYSLOG_IDENTIFIER", identifier),
        ]
        var all = metadata
        if let explicit = event.metadata { all.merge(explicit) { $1 } }
        for (key, value) in all.sorted(by: { $0.key < $1.key }) {
            guard let name = Self.fieldName(key) else { continue }
            fields.append((name, "\(value)"))
        }
        socket.send(Self.encode(fields))
    }

    /// syslog priorities: the journal's and rsyslog's common language.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// A journal field name: upper-case letters, digits and underscores, not
    /// starting with an underscore (those are the journal's own), at most 64.
    static func fieldName(_ key: String) -> String? {
        let name = String(key.uppercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" }.prefix(64))
        guard let first = name.first, first != "_", !first.isNumber else { return nil }
        return name
    }

    /// The native protocol: `NAME=value\n`, or for a value with a line feed
    /// `NAME\n`, its length as 64-bit little endian, the value, `\n`.
    static func encode(_ fields: [(String, String)]) -> [UInt8] {
        var bytes: [UInt8] = []
        for (name, value) in fields {
            bytes += Array(name.utf8)
            let data = Array(value.utf8)
            if data.contains(UInt8(ascii: "\n")) {
                bytes.append(UInt8(ascii: "\n"))
                let length = UInt64(data.count)
                for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: length >> UInt64(shift))) }
                bytes += data
            } else {
                bytes.append(UInt8(ascii: "="))
                bytes += data
            }
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }
}

/// One datagram socket to the journal, shared by every logger.
public final class JournalSocket: Sendable {
    private let descriptor: FileDescriptor

    public init?(path: String = JournalLogHandler.socketPath) {
        guard let descriptor = try? UnixSocket.connect(to: path, .datagram) else { return nil }
        self.descriptor = descriptor
    }

    deinit { descriptor.closeQuietly() }

    /// One datagram; a journal too busy to take it loses the message rather than block the caller.
    func send(_ datagram: [UInt8]) {
        _ = try? descriptor.send(datagram, flags: [.dontWait, .noSignal])
    }
}

public enum HallpassLogging {
    /// Once, in main: the journal when running under systemd, else standard error.
    public static func bootstrap(identifier: String) {
        if JournalLogHandler.isAvailable, let socket = JournalSocket() {
            LoggingSystem.bootstrap { label in JournalLogHandler(label: label, identifier: identifier, socket: socket) }
        } else {
            LoggingSystem.bootstrap { label in
                var handler = PlainLogHandler(prefix: identifier)
                handler.logLevel = .info
                return handler
            }
        }
    }
}

/// `PREFIX: message key=value ...` on standard error: what a terminal and a log file get.
public struct PlainLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    let prefix: String

    public init(prefix: String) {
        self.prefix = prefix
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let explicit = event.metadata { all.merge(explicit) { $1 } }
        var text = "\(prefix): " + (event.level >= .warning ? "\(event.level): " : "") + event.message.description
        if !all.isEmpty { text += " " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") }
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
}
