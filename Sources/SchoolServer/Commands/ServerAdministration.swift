import Foundation
public import Logging
public import SharedStore

/// What the commands of hallpass-server do, apart from argument parsing,
/// so that tests call the same code: `init`, `token create`,
/// `api-token create`, `machine list`, `machine revoke`, `fingerprint`.
public enum ServerAdministration {
    /// What `init` did.
    public struct InitReport: Sendable {
        public var madeCertificate: Bool
        public var fingerprint: String
        public var appliedMigrations: [Int]
        public var database: String
        /// The bundle signing key's public key when init made the key.
        public var madeSigningKey: BundlePublicKey?
        /// The live key's public key (`ed25519:BASE64`), and whether init made it.
        public var liveKey: String
        public var madeLiveKey: Bool
    }

    /// Makes what the server needs to start: the SQLite file's folder (0750)
    /// and the schema, and, when server.yaml names no TLS pair and none is at
    /// the default paths, a self-signed P-256 pair for `names`; and, unless
    /// the key is offline, the bundle signing key when its file is missing. Idempotent.
    public static func initialize(configuration: ServerConfiguration, names: [String], logger: Logger) async throws -> InitReport {
        var made = false
        let tls = configuration.tls
        let certificateExists = FileManager.default.fileExists(atPath: tls.certificate)
        let keyExists = FileManager.default.fileExists(atPath: tls.key)
        if !certificateExists && !keyExists {
            guard !tls.configured else {
                throw ServerError(
                    code: "tls.missing",
                    message: "tls.certificate \(tls.certificate) and tls.key \(tls.key) do not exist; put the school's pair there, or remove tls: from server.yaml to have init make one")
            }
            try ServerCertificate.create(certificatePath: tls.certificate, keyPath: tls.key, names: names)
            made = true
        }
        let certificate = try ServerCertificate(certificatePath: tls.certificate, keyPath: tls.key)
        if case .sqlite(let path) = configuration.database {
            let folder = (path as NSString).deletingLastPathComponent
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o750])
        }
        let applied = try await withServerStorage(configuration.database, logger: logger, migrate: false) { storage in
            try await storage.migrate()
        }
        let signingKey = try makeSigningKey(configuration: configuration)
        let live = try LiveKey.loadOrMake(configuration: configuration)
        return InitReport(
            madeCertificate: made, fingerprint: certificate.fingerprint, appliedMigrations: applied,
            database: configuration.database.description, madeSigningKey: signingKey, liveKey: live.key.publicText, madeLiveKey: live.made)
    }

    /// `live-key`: the live key's public key, `ed25519:BASE64`. Only read:
    /// made by `init` or the server as the state folder's owner, never by
    /// whoever runs this (root would leave a key the server cannot read).
    public static func liveKey(configuration: ServerConfiguration) throws -> String {
        let path = LiveKey.path(configuration: configuration)
        guard FileManager.default.fileExists(atPath: path) else {
            throw ServerError(code: "live.key", message: "there is no live key at \(path) yet; `hallpass-server init` makes it")
        }
        return try LiveKey.load(path: path).publicText
    }

    /// The server's fingerprint, from its certificate.
    public static func fingerprint(configuration: ServerConfiguration) throws -> String {
        try ServerCertificate(certificatePath: configuration.tls.certificate, keyPath: configuration.tls.key).fingerprint
    }

    /// Makes an enrolment token for `room` and returns the whole token
    /// (`hp1.<fingerprint>.<secret>`); only the secret's hash is stored.
    /// `createdBy` is kept with it and is the audit event's actor.
    public static func createEnrolmentToken(
        storage: any ServerStorage, fingerprint: String, room: String, uses: Int, expiresIn: Int, createdBy: String, now: Int64
    ) async throws -> String {
        guard !room.isEmpty, room.utf8.count <= 64, room.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7f }) else {
            throw ServerError(code: "token.room", message: "a room is 1 to 64 characters without spaces, e.g. lab2")
        }
        guard (1...10_000).contains(uses) else { throw ServerError(code: "token.uses", message: "--uses must be from 1 to 10000") }
        guard (60...(365 * 86_400)).contains(expiresIn) else {
            throw ServerError(code: "token.expires", message: "--expires must be from 1m to 365d")
        }
        let secret = Secrets.newSecret()
        try await storage.createEnrolmentToken(
            StoredEnrolmentToken(
                hash: Secrets.hash(secret), room: room, usesLeft: uses, expiresAt: now + Int64(expiresIn), createdBy: createdBy,
                createdAt: now))
        try await storage.audit(
            NewAuditEvent(time: now, actor: createdBy, action: "enrolment-token.create", target: "room \(room)", detail: "\(uses) uses, \(expiresIn) s"))
        return Secrets.enrolmentToken(fingerprint: fingerprint, secret: secret)
    }

    /// Makes an API token of `role` and `scope`; returns its id and the
    /// token, shown once. A teacher's token needs a scope; an admin's and a
    /// metrics token have none (they answer for the whole school).
    /// `createdBy` is kept with it and is the audit event's actor.
    public static func createAPIToken(storage: any ServerStorage, role: Role, scope: Scope = .school, createdBy: String, now: Int64)
        async throws -> (id: String, token: String)
    {
        if let refusal = apiTokenRefusal(role: role, scope: scope) { throw ServerError(code: "api-token.scope", message: refusal) }
        let (id, token) = Secrets.newAPIToken()
        try await storage.createAPIToken(
            StoredAPIToken(id: id, role: role, scope: scope, createdBy: createdBy, createdAt: now), hash: Secrets.hash(token))
        try await storage.audit(
            NewAuditEvent(time: now, actor: createdBy, action: "token.create", target: "token:\(id)", detail: describe(role: role, scope: scope)))
        return (id, token)
    }

    /// Why an API token of `role` and `scope` may not be; nil when it may.
    public static func apiTokenRefusal(role: Role, scope: Scope) -> String? {
        if role == .metrics { return scope.isWholeSchool ? nil : "a metrics token reads the whole school's counters; give no --room or --group" }
        return StoredPerson.refusal(role: role, scope: scope)
    }

    /// `machine revoke`: shuts the machine out; false when there is no such machine.
    public static func revokeMachine(storage: any ServerStorage, id: String, author: String, now: Int64) async throws -> Bool {
        guard try await storage.revokeMachine(id: id, now: now) else { return false }
        try await storage.audit(NewAuditEvent(time: now, actor: author, action: "machine.revoke", target: id))
        return true
    }

    /// `machine list` as a table: id, room, hostname, state, last check-in.
    public static func machineTable(storage: any ServerStorage, staleAfter: Int, now: Int64) async throws -> String {
        let published = try await storage.publishedVersion()
        var lines = ["MACHINE                 ROOM        HOSTNAME              STATE       LAST CHECK-IN"]
        for machine in try await storage.machines() {
            let state = MachineState.of(machine, now: now, staleAfter: staleAfter, publishedVersion: published)
            let seen = machine.checkInAt.map { RecordTime.format(milliseconds: $0 * 1000) } ?? "never"
            lines.append(
                [machine.id.padded(24), machine.room.padded(12), machine.hostname.padded(22), state.rawValue.padded(12), seen].joined())
        }
        return lines.joined(separator: "\n")
    }
}

extension String {
    fileprivate func padded(_ width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
