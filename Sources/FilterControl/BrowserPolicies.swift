// `filterctl browser-policies`: managed policy files for the browsers of a
// lab machine, so that they do not route around the filter by themselves:
// DNS over HTTPS off and locked, Encrypted Client Hello off, SafeSearch and
// YouTube's Restricted Mode forced when the policy asks for them, QUIC off
// when the policy blocks it, and the block page's local CA and the
// inspection proxy's interception CA trusted.
//
// Key names, checked against the browsers' own references:
// - Chromium and Google Chrome (chromium/src
//   components/policy/resources/templates/policy_definitions/): DnsOverHttpsMode
//   ("off" | "automatic" | "secure"), EncryptedClientHelloEnabled (boolean),
//   ForceGoogleSafeSearch (boolean), ForceYouTubeRestrict (0 off, 1 moderate,
//   2 strict), QuicAllowed (boolean), CACertificates (base64 DER
//   certificates; for Linux it arrived after Debian 12's Chromium, which
//   reads the CA from NSS instead: docs/block-page.md). Every policy in a
//   managed file is mandatory: users cannot change it.
// - Firefox ESR (mozilla/policy-templates docs/index.md): DNSOverHTTPS
//   {Enabled, Locked}, DisableEncryptedClientHello (Firefox 127, ESR 128),
//   Certificates {Install: [paths]}, in /etc/firefox/policies/policies.json.
//   Firefox has no SafeSearch policy: the DNS answers enforce it.
//
// Files it writes are recorded with their SHA-256 in
// /var/lib/hallpass/browser-policies.json. A file that is not in the record,
// or that changed since it was written, is never overwritten or removed:
// Chromium's managed folders take any number of files, so hallpass writes its
// own `hallpass.json` beside an admin's; Firefox reads a single
// policies.json, so an admin's own is left alone and reported.

import Crypto
import Foundation
import HallpassSystem
public import VerdictCore
import SharedStore

/// What the browser policies are made from.
public struct BrowserPolicySettings: Sendable, Hashable {
    public var bypass: BypassPolicy
    /// The block page's local CA certificate (PEM), when one exists.
    public var caCertificatePEM: String?
    /// The interception CA's certificate (PEM, `proxy.ca`), when the policy inspects names and it exists.
    public var interceptionCertificatePEM: String?

    public init(bypass: BypassPolicy = BypassPolicy(), caCertificatePEM: String? = nil, interceptionCertificatePEM: String? = nil) {
        self.bypass = bypass
        self.caCertificatePEM = caCertificatePEM
        self.interceptionCertificatePEM = interceptionCertificatePEM
    }
}

/// One file `browser-policies install` writes.
public struct BrowserPolicyFile: Sendable, Hashable {
    /// "Chromium", "Google Chrome", "Firefox ESR".
    public var browser: String
    /// The path on the machine (under the root the command works in).
    public var path: String
    public var contents: [UInt8]

    public var text: String { String(decoding: contents, as: UTF8.self) }
}

/// Why a command on the browser policies failed as a whole.
public struct BrowserPolicyError: Error, Hashable, Sendable, CustomStringConvertible {
    /// `browser-policies.record`, `browser-policies.write`, `browser-policies.ca`.
    public var code: String
    public var message: String
    public var description: String { "\(code): \(message)" }
}

/// What happened to each file.
public struct BrowserPolicyReport: Sendable, Hashable {
    public enum Outcome: Sendable, Hashable {
        case written, unchanged, removed
        /// Left alone, with the reason (an admin's file, or changed since hallpass wrote it).
        case refused(String)
        /// Nothing there to remove.
        case absent
    }

    public var files: [(path: String, outcome: Outcome)] = []

    public var refusals: Int { files.filter { if case .refused = $0.outcome { true } else { false } }.count }

    public static func == (lhs: BrowserPolicyReport, rhs: BrowserPolicyReport) -> Bool {
        lhs.files.map(\.path) == rhs.files.map(\.path) && lhs.files.map(\.outcome) == rhs.files.map(\.outcome)
    }

    public func hash(into hasher: inout Hasher) {
        for file in files { hasher.combine(file.path) }
    }
}

/// Writes, shows and removes the managed browser policy files under `root`
/// ("/" on a machine; a temporary folder in tests).
public struct BrowserPolicies: Sendable {
    public static let chromiumPath = "/etc/chromium/policies/managed/hallpass.json"
    public static let chromePath = "/etc/opt/chrome/policies/managed/hallpass.json"
    public static let firefoxPath = "/etc/firefox/policies/policies.json"
    /// The CA certificate Firefox installs from (the CA's own folder is readable by root only).
    public static let firefoxCertificatePath = "/etc/firefox/policies/hallpass-ca.pem"
    /// The interception CA's certificate, for Firefox the same way.
    public static let firefoxInterceptionCertificatePath = "/etc/firefox/policies/hallpass-inspect-ca.pem"
    /// The record of the files written and their SHA-256.
    public static let recordPath = "/var/lib/hallpass/browser-policies.json"

    public let root: String

    public init(root: String = "/") {
        self.root = root
    }

    // MARK: Contents

    /// The files `install` writes for `settings`, in order.
    public static func files(for settings: BrowserPolicySettings) throws(BrowserPolicyError) -> [BrowserPolicyFile] {
        let bypass = settings.bypass
        var chromium: [String: JSONValue] = [:]
        var firefox: [String: JSONValue] = [:]
        if bypass.encryptedDNS == .block {
            chromium["DnsOverHttpsMode"] = .string("off")
            firefox["DNSOverHTTPS"] = .object(["Enabled": .bool(false), "Locked": .bool(true)])
        }
        if bypass.ech == .block {
            chromium["EncryptedClientHelloEnabled"] = .bool(false)
            firefox["DisableEncryptedClientHello"] = .bool(true)
        }
        if bypass.quic == .block {
            chromium["QuicAllowed"] = .bool(false)
        }
        if bypass.safeSearch.contains(.google) {
            chromium["ForceGoogleSafeSearch"] = .bool(true)
        }
        if bypass.safeSearch.contains(.youtubeStrict) {
            chromium["ForceYouTubeRestrict"] = .integer(2)
        } else if bypass.safeSearch.contains(.youtubeModerate) {
            chromium["ForceYouTubeRestrict"] = .integer(1)
        }
        var files: [BrowserPolicyFile] = []
        // Each CA that exists, the block page's first: Chromium and Chrome take the
        // certificates themselves, Firefox the paths of the copies written beside its policies.
        var certificates: [JSONValue] = []
        var installed: [JSONValue] = []
        for (pem, path, what) in [
            (settings.caCertificatePEM, firefoxCertificatePath, "the block page CA"),
            (settings.interceptionCertificatePEM, firefoxInterceptionCertificatePath, "the interception CA"),
        ] {
            guard let pem else { continue }
            guard let der = certificateBase64(pem) else {
                throw BrowserPolicyError(code: "browser-policies.ca", message: "\(what) is not a PEM certificate")
            }
            certificates.append(.string(der))
            installed.append(.string(path))
        }
        if !certificates.isEmpty {
            chromium["CACertificates"] = .array(certificates)
            firefox["Certificates"] = .object(["Install": .array(installed)])
        }
        let chromiumJSON = JSONValue.object(chromium).encoded()
        files.append(BrowserPolicyFile(browser: "Chromium", path: chromiumPath, contents: chromiumJSON))
        files.append(BrowserPolicyFile(browser: "Google Chrome", path: chromePath, contents: chromiumJSON))
        files.append(BrowserPolicyFile(browser: "Firefox ESR", path: firefoxPath, contents: JSONValue.object(["policies": .object(firefox)]).encoded()))
        for (pem, path) in [(settings.caCertificatePEM, firefoxCertificatePath), (settings.interceptionCertificatePEM, firefoxInterceptionCertificatePath)] {
            guard let pem else { continue }
            let text = pem.hasSuffix("\n") ? pem : pem + "\n"
            files.append(BrowserPolicyFile(browser: "Firefox ESR", path: path, contents: Array(text.utf8)))
        }
        return files
    }

    /// The base64 DER body of the first certificate in `pem`.
    static func certificateBase64(_ pem: String) -> String? {
        let lines = pem.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        guard let begin = lines.firstIndex(of: "-----BEGIN CERTIFICATE-----"),
              let end = lines[begin...].firstIndex(of: "-----END CERTIFICATE-----"), end > begin + 1 else { return nil }
        let body = lines[(begin + 1)..<end].joined()
        guard let data = Data(base64Encoded: body), !data.isEmpty else { return nil }
        return body
    }

    // MARK: Install, remove

    /// Writes the files for `settings`: new ones, and those hallpass wrote
    /// before and nobody changed. Files hallpass wrote before that the
    /// settings no longer need (the CA certificate after the CA went) are
    /// removed the same careful way.
    public func install(_ settings: BrowserPolicySettings) throws(BrowserPolicyError) -> BrowserPolicyReport {
        var record = try readRecord()
        var report = BrowserPolicyReport()
        let files = try Self.files(for: settings)
        for file in files {
            let outcome = try write(file, record: &record)
            report.files.append((file.path, outcome))
        }
        for stale in record.keys.sorted() where !files.contains(where: { $0.path == stale }) {
            report.files.append((stale, try removeRecorded(stale, record: &record)))
        }
        try writeRecord(record)
        return report
    }

    /// Removes every file hallpass wrote that nobody changed since.
    public func remove() throws(BrowserPolicyError) -> BrowserPolicyReport {
        var record = try readRecord()
        var report = BrowserPolicyReport()
        for path in record.keys.sorted() {
            report.files.append((path, try removeRecorded(path, record: &record)))
        }
        try writeRecord(record)
        return report
    }

    private func write(_ file: BrowserPolicyFile, record: inout [String: String]) throws(BrowserPolicyError) -> BrowserPolicyReport.Outcome {
        let target = onMachine(file.path)
        let wanted = Self.sha256(file.contents)
        if let existing = FileManager.default.contents(atPath: target) {
            let current = Self.sha256([UInt8](existing))
            guard let recorded = record[file.path] else {
                return .refused("not written by hallpass: left as it is (merge its settings by hand, or move it away and install again)")
            }
            guard recorded == current else {
                return .refused("changed since hallpass wrote it: left as it is")
            }
            if current == wanted { return .unchanged }
        }
        do {
            try FileManager.default.createDirectory(atPath: (target as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
            try AtomicFile.write(file.contents, to: target, mode: 0o644)
        } catch {
            throw BrowserPolicyError(code: "browser-policies.write", message: "\(target): \(error)")
        }
        record[file.path] = wanted
        return .written
    }

    private func removeRecorded(_ path: String, record: inout [String: String]) throws(BrowserPolicyError) -> BrowserPolicyReport.Outcome {
        let target = onMachine(path)
        guard let existing = FileManager.default.contents(atPath: target) else {
            record[path] = nil
            return .absent
        }
        guard record[path] == Self.sha256([UInt8](existing)) else {
            // Changed by someone: it is theirs now.
            record[path] = nil
            return .refused("changed since hallpass wrote it: left as it is")
        }
        do {
            try FileManager.default.removeItem(atPath: target)
        } catch {
            throw BrowserPolicyError(code: "browser-policies.write", message: "cannot remove \(target): \(error)")
        }
        record[path] = nil
        return .removed
    }

    // MARK: The record

    private func onMachine(_ path: String) -> String {
        root == "/" ? path : (root.hasSuffix("/") ? String(root.dropLast()) : root) + path
    }

    /// Path -> SHA-256 (hex) of what hallpass wrote there.
    func readRecord() throws(BrowserPolicyError) -> [String: String] {
        let path = onMachine(Self.recordPath)
        guard let data = FileManager.default.contents(atPath: path) else { return [:] }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let files = object["files"] as? [String: String] else {
            throw BrowserPolicyError(code: "browser-policies.record", message: "\(path) is not a record of browser policy files; move it away")
        }
        return files
    }

    private func writeRecord(_ record: [String: String]) throws(BrowserPolicyError) {
        let path = onMachine(Self.recordPath)
        if record.isEmpty {
            try? FileManager.default.removeItem(atPath: path)
            return
        }
        let contents = JSONValue.object(["files": .object(record.mapValues { .string($0) })]).encoded()
        do {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
            try AtomicFile.write(contents, to: path, mode: 0o644)
        } catch {
            throw BrowserPolicyError(code: "browser-policies.write", message: "\(path): \(error)")
        }
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }
}

/// A JSON value written with sorted keys and two-space indentation, so the
/// same settings always give the same bytes (and the same record hash).
indirect enum JSONValue: Hashable, Sendable {
    case string(String)
    case bool(Bool)
    case integer(Int)
    case array([JSONValue])
    case object([String: JSONValue])

    func encoded() -> [UInt8] {
        var text = ""
        write(into: &text, indent: "")
        return Array((text + "\n").utf8)
    }

    private func write(into text: inout String, indent: String) {
        switch self {
        case .string(let value): text += Self.quoted(value)
        case .bool(let value): text += value ? "true" : "false"
        case .integer(let value): text += String(value)
        case .array(let values):
            guard !values.isEmpty else { text += "[]"; return }
            text += "[\n"
            for (index, value) in values.enumerated() {
                text += indent + "  "
                value.write(into: &text, indent: indent + "  ")
                text += index == values.count - 1 ? "\n" : ",\n"
            }
            text += indent + "]"
        case .object(let members):
            guard !members.isEmpty else { text += "{}"; return }
            text += "{\n"
            let keys = members.keys.sorted()
            for (index, key) in keys.enumerated() {
                text += indent + "  " + Self.quoted(key) + ": "
                members[key]!.write(into: &text, indent: indent + "  ")
                text += index == keys.count - 1 ? "\n" : ",\n"
            }
            text += indent + "}"
        }
    }

    private static func quoted(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}
