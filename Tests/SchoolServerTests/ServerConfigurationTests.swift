import HallpassConfig
import SchoolServer
import SharedStore
import Testing

@Suite struct ServerConfigurationTests {
    @Test func anEmptyFileGivesTheDefaults() throws {
        let configuration = try ServerConfiguration(yaml: "")
        #expect(configuration == ServerConfiguration())
        #expect(configuration.listen.port == 8443)
        #expect(configuration.database == .sqlite(path: "/var/lib/hallpass-server/server.db"))
        #expect(configuration.machines.staleAfter == 300)
        #expect(configuration.tls.configured == false)
    }

    @Test func theMadeTLSPairLivesBesideTheSQLiteFile() throws {
        let configuration = try ServerConfiguration(yaml: "database: /srv/school/server.db\n")
        #expect(configuration.tls.certificate == "/srv/school/tls/certificate.pem")
        #expect(configuration.tls.key == "/srv/school/tls/key.pem")
        #expect(configuration.signingKeyPath == "/srv/school/bundle-signing.key")
        #expect(try ServerConfiguration(yaml: "").tls.certificate == "/var/lib/hallpass-server/tls/certificate.pem")
    }

    @Test func everyKeyIsRead() throws {
        let configuration = try ServerConfiguration(
            yaml: """
                listen:
                  address: 127.0.0.1
                  port: 9443
                tls:
                  certificate: /etc/hallpass/server.crt
                  key: /etc/hallpass/server.key
                database: postgres://hallpass:s%40cret@db.school.example:5433/hallpass?sslmode=require
                machines:
                  staleAfter: 10m
                records:
                  retentionDays: 30
                """)
        #expect(configuration.listen.address == "127.0.0.1")
        #expect(configuration.listen.port == 9443)
        #expect(configuration.tls.certificate == "/etc/hallpass/server.crt")
        #expect(configuration.tls.configured)
        guard case .postgres(let postgres) = configuration.database else {
            Issue.record("expected PostgreSQL")
            return
        }
        #expect(postgres.host == "db.school.example")
        #expect(postgres.port == 5433)
        #expect(postgres.user == "hallpass")
        #expect(postgres.password == "s@cret")
        #expect(postgres.database == "hallpass")
        #expect(postgres.tls == .require)
        #expect(!postgres.description.contains("cret"))
        #expect(configuration.machines.staleAfter == 600)
        #expect(configuration.retention.records == 30)
        // Access requests went with the records before they had a key of their own, and still do without it.
        #expect(configuration.retention.accessRequests == 30)
        #expect(configuration.retention.alerts == 7 * 365 && configuration.retention.audit == 7 * 365)
    }

    /// Each kind's retention, with the older `records.retentionDays` beside it when they agree.
    @Test func retentionPerKind() throws {
        let defaults = ServerConfiguration().retention
        #expect(defaults.records == 365 && defaults.accessRequests == 365 && defaults.digests == 365)
        #expect(defaults.alerts >= defaults.records && defaults.audit >= defaults.alerts)
        let configuration = try ServerConfiguration(
            yaml: """
                records:
                  retentionDays: 90
                retention:
                  records: 90
                  accessRequests: 30
                  alerts: 9125
                  digests: 180
                  audit: 9200
                """)
        #expect(configuration.retention.records == 90 && configuration.retention.accessRequests == 30)
        #expect(configuration.retention.alerts == 9125 && configuration.retention.digests == 180 && configuration.retention.audit == 9200)
    }

    @Test func aUnixSocketDatabase() throws {
        let configuration = try ServerConfiguration(yaml: "database: postgres://hallpass@/hallpass?host=/run/postgresql")
        guard case .postgres(let postgres) = configuration.database else {
            Issue.record("expected PostgreSQL")
            return
        }
        #expect(postgres.socketDirectory == "/run/postgresql")
        #expect(postgres.host == nil)
        #expect(postgres.tls == .disable)
    }

    /// Each wrong file is refused with the key and the line.
    @Test(arguments: [
        ("listen:\n  prot: 8443\n", "listen.prot", 2),
        ("listen:\n  port: 70000\n", "listen.port", 2),
        ("records:\n  retentionDays: 0\n", "records.retentionDays", 2),
        ("retention:\n  alerts: 30\n", "retention.alerts", 2),
        ("retention:\n  digests: 7\n", "retention.digests", 2),
        ("retention:\n  audit: 400\n", "retention.audit", 2),
        ("retention:\n  alerts: 3650\n", "retention.alerts", 2),
        ("retention:\n  recordz: 30\n", "retention.recordz", 2),
        ("records:\n  retentionDays: 30\nretention:\n  records: 60\n", "retention.records", 4),
        ("machines:\n  staleAfter: 5x\n", "machines.staleAfter", 2),
        ("database: mysql://x\n", "database", 1),
        ("database: server.db\n", "database", 1),
        ("tls:\n  certificate: /a.pem\n", "tls", 2),
        ("tls:\n  certificate: a.pem\n  key: /b.pem\n", "tls.certificate", 2),
        ("records: 5\n", "records", 1),
        ("listen:\n  port: 1\n  port: 2\n", "", 2),
        ("publishing:\n  signingKey: offline\n", "publishing.signingKey", 2),
        ("publishing:\n  signingKey: key.pem\n", "publishing.signingKey", 2),
        ("publishing:\n  trustedKeys: [ \"ed25519:AAAA\" ]\n", "publishing.trustedKeys[0]", 2),
        ("publishing:\n  trustedKeys: ed25519:AAAA\n", "publishing.trustedKeys", 2),
        ("publishing:\n  keepVersions: 17\n", "publishing.keepVersions", 2),
        ("publishing:\n  maxListBytes: 2GiB\n", "publishing.maxListBytes", 2),
        ("publishing:\n  expires: 30\n", "publishing.expires", 2),
        ("publishing:\n  copyTo: www\n", "publishing.copyTo", 2),
        ("publishing:\n  sign: offline\n", "publishing.sign", 2),
        ("console:\n  idleTimeout: 10s\n", "console.idleTimeout", 2),
        ("console:\n  lockout:\n    failures: 0\n", "console.lockout.failures", 3),
        ("console:\n  signInRate: many\n", "console.signInRate", 2),
        ("console:\n  pseudonym: true\n", "console.pseudonym", 2),
        ("signIn:\n  local: maybe\n", "signIn.local", 2),
    ])
    func wrongKeysAreNamed(yaml: String, key: String, line: Int) {
        #expect {
            try ServerConfiguration(yaml: yaml)
        } throws: { error in
            guard let error = error as? ConfigurationError else { return false }
            return error.key == key && error.line.map { $0 >= line - 1 && $0 <= line } == true
        }
    }

    @Test func consoleKeys() throws {
        let defaults = ServerConfiguration()
        #expect(defaults.console.idleTimeout == 1800 && defaults.console.sessionLifetime == 43_200)
        #expect(defaults.console.lockoutFailures == 5 && defaults.console.lockoutDuration == 900 && defaults.console.signInRate == 20)
        #expect(defaults.signIn.local)
        let configuration = try ServerConfiguration(
            yaml: "console:\n  idleTimeout: 10m\n  sessionLifetime: 8h\n  lockout:\n    failures: 3\n    duration: 1h\n  signInRate: 5\nsignIn:\n  local: false\n")
        #expect(configuration.console.idleTimeout == 600 && configuration.console.sessionLifetime == 28_800)
        #expect(configuration.console.lockoutFailures == 3 && configuration.console.lockoutDuration == 3600)
        #expect(configuration.console.signInRate == 5)
        #expect(!configuration.signIn.local)
    }

    @Test func publishingKeys() throws {
        let key = BundleSigningKey().publicKey.description
        let configuration = try ServerConfiguration(
            yaml: """
                database: /srv/hallpass/server.db
                publishing:
                  signingKey: offline
                  trustedKeys: [ "\(key)" ]
                  expires: 7d
                  keepVersions: 0
                  copyTo: /srv/www/hallpass-bundle
                  builtinProtections: false
                  maxListBytes: 64MiB
                """)
        #expect(configuration.publishing.offline)
        #expect(configuration.signingKeyPath == nil)
        #expect(configuration.publishing.trustedKeys.map(\.description) == [key])
        #expect(configuration.publishing.expires == 7 * 86_400)
        #expect(configuration.publishing.keepVersions == 0)
        #expect(configuration.publishing.copyTo == "/srv/www/hallpass-bundle")
        #expect(configuration.publishing.builtinProtections == false)
        #expect(configuration.publishing.maxListBytes == 64 << 20)
        // The state folder follows the SQLite file.
        #expect(configuration.stateDirectory == "/srv/hallpass")

        let defaults = ServerConfiguration()
        #expect(defaults.signingKeyPath == "/var/lib/hallpass-server/bundle-signing.key")
        #expect(defaults.publishing.maxListBytes == 256 << 20)
        #expect(defaults.publishing.expires == 30 * 86_400)
        #expect(defaults.publishing.keepVersions == 3)
        #expect(defaults.publishing.builtinProtections)
        let own = try ServerConfiguration(yaml: "publishing:\n  signingKey: /etc/hallpass/bundle.key\n  maxListBytes: 1048576\n")
        #expect(own.signingKeyPath == "/etc/hallpass/bundle.key")
        #expect(own.publishing.maxListBytes == 1 << 20)
    }

    @Test func theErrorSaysWhichKeyAndLine() {
        let error = ConfigurationError(key: "listen.port", line: 3, message: "expected a whole number from 1 to 65535", document: ConfigurationError.serverDocument)
        #expect(error.description == "server configuration key listen.port (line 3): expected a whole number from 1 to 65535")
    }

    @Test func durations() {
        #expect(DurationText.seconds("90s") == 90)
        #expect(DurationText.seconds("30m") == 1800)
        #expect(DurationText.seconds("7d") == 604_800)
        #expect(DurationText.seconds("45") == 45)
        #expect(DurationText.seconds("-5m") == nil)
        #expect(DurationText.seconds("5w") == nil)
    }
}

@Suite struct RecordTimeTests {
    @Test func readsAndWritesRFC3339() {
        #expect(RecordTime.milliseconds("1970-01-01T00:00:00Z") == 0)
        #expect(RecordTime.milliseconds("2025-03-01T09:15:02.250Z") == 1_740_820_502_250)
        #expect(RecordTime.milliseconds("2025-03-01T10:15:02.25+01:00") == 1_740_820_502_250)
        #expect(RecordTime.milliseconds("2025-03-01T09:15:02.250123Z") == 1_740_820_502_250)
        #expect(RecordTime.format(milliseconds: 1_740_820_502_250) == "2025-03-01T09:15:02.250Z")
        #expect(RecordTime.format(milliseconds: 951_782_400_000) == "2000-02-29T00:00:00.000Z")
        #expect(RecordTime.milliseconds(RecordTime.format(milliseconds: 1_764_320_400_007)) == 1_764_320_400_007)
    }

    @Test(arguments: ["", "2025-03-01", "2025-03-01T09:15:02", "2025-13-01T09:15:02Z", "2025-03-01T09:15:02.Z", "2025-03-01T09:15:02Zjunk"])
    func refusesWhatIsNotATime(text: String) {
        #expect(RecordTime.milliseconds(text) == nil)
    }

    @Test func daysAreUTC() {
        let day = RecordTime.millisecondsPerDay
        #expect(RecordTime.startOfDay(day + 5) == day)
        #expect(RecordTime.startOfDay(day - 1) == 0)
        #expect(Retention.cutoff(now: 86_400 * 10 + 5, days: 3) == 7 * day)
    }
}
