import Crypto
import FilterControl
import Foundation
import HallpassSystem
import SharedStore
import Testing

/// The token, the server URL, the `school:` section, the request signature,
/// and `Enrolment` against the HTTPS stand-in (its key pinned).
@Suite struct SchoolEnrolmentTests {
    static let fingerprint = "5f2d8e0c9b7a6f41e3d2c1b0a9f8e7d6c5b4a3928170f6e5d4c3b2a190817263"
    /// 32 bytes of base64url, no padding.
    static let secret = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA"
    static let bundleKey = "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="

    // MARK: The token

    @Test func aTokenReadsItsFingerprintAndSecret() throws {
        let token = try EnrolmentToken(parsing: "  hp1.\(Self.fingerprint.uppercased()).\(Self.secret)\n")
        #expect(token.fingerprint.description == Self.fingerprint)
        #expect(token.secret == Self.secret)
    }

    @Test(arguments: [
        ("hp2.\(fingerprint).\(secret)", "not version hp1"),
        ("\(fingerprint).\(secret)", "does not start with 'hp1.'"),
        ("hp1.\(fingerprint)", "has 2 parts"),
        ("hp1.\(fingerprint.dropLast()).\(secret)", "not a fingerprint of 64 hex digits"),
        ("hp1.\(fingerprint.dropLast())x.\(secret)", "not a fingerprint of 64 hex digits"),
        ("hp1.\(fingerprint).\(secret.dropLast(2))", "not 32 bytes of base64url"),
        ("hp1.\(fingerprint).\(secret.dropLast())+", "not 32 bytes of base64url"),
        ("hp1.\(fingerprint).\(secret)=", "not 32 bytes of base64url"),
    ])
    func aMalformedTokenIsRefusedWithItsReason(token: String, reason: String) {
        #expect {
            try EnrolmentToken(parsing: token)
        } throws: { error in
            guard let error = error as? SchoolError, case .malformedToken = error else { return false }
            return error.code == "school.token-malformed" && error.description.contains(reason)
        }
    }

    // MARK: The server URL

    @Test func serverURLs() throws {
        let plain = try SchoolServerURL(parsing: "https://School.example")
        #expect(plain.host == "school.example" && plain.port == 443 && plain.path("/api/v1/enrol") == "/api/v1/enrol")
        #expect(plain.description == "https://school.example/")
        let prefixed = try SchoolServerURL(parsing: "https://[2001:db8::5]:8443/hallpass/")
        #expect(prefixed.host == "2001:db8::5" && prefixed.port == 8443)
        #expect(prefixed.path("/api/v1/enrol") == "/hallpass/api/v1/enrol")
        #expect(prefixed.description == "https://[2001:db8::5]:8443/hallpass/")
        #expect(throws: SchoolServerURL.ParseError.self) { try SchoolServerURL(parsing: "http://school.example/") }
        #expect(throws: SchoolServerURL.ParseError.self) { try SchoolServerURL(parsing: "https://school.example/?a=1") }
        #expect(throws: SchoolServerURL.ParseError.self) { try SchoolServerURL(parsing: "https://school.example:99999/") }
        #expect(throws: SchoolServerURL.ParseError.self) { try SchoolServerURL(parsing: "school.example") }
    }

    // MARK: The school: section

    @Test func theSchoolSectionReads() throws {
        let configuration = try Configuration(
            yaml: "school:\n  server: https://school.example:8443/\n  fingerprint: \(Self.fingerprint)\n  queueMaxSize: 16M\n  queueMaxAge: 2d\n")
        let school = try #require(configuration.school)
        #expect(school.server == SchoolServerURL(host: "school.example", port: 8443))
        #expect(school.fingerprint.description == Self.fingerprint)
        #expect(school.queueMaxBytes == 16 << 20 && school.queueMaxAge == 2 * 86_400)
        #expect(try Configuration(yaml: "").school == nil)
        #expect(try Configuration(yaml: "school:\n").school == nil)
    }

    @Test(arguments: [
        ("school:\n  server: https://school.example/\n", "school", 2, "needs 'fingerprint'"),
        ("school:\n  fingerprint: \(fingerprint)\n", "school", 2, "needs 'server'"),
        ("school:\n  server: http://school.example/\n  fingerprint: \(fingerprint)\n", "school.server", 2, "plain http://"),
        ("school:\n  server: https://school.example/\n  fingerprint: abc\n", "school.fingerprint", 3, "64 hex digits"),
        ("school:\n  server: https://school.example/\n  fingerprint: \(fingerprint)\n  queueMaxAge: 10s\n", "school.queueMaxAge", 4, "at least 3600"),
        ("school:\n  server: https://school.example/\n  fingerprint: \(fingerprint)\n  sever: x\n", "school.sever", 4, "unknown key"),
        ("school:\n  server: https://school.example/\n  fingerprint: \(fingerprint)\n  bundleKeys: [\"ed25519:abc\"]\n", "school.bundleKeys[0]", 4, "ed25519"),
        ("school:\n  server: https://school_x.example/\n  fingerprint: \(fingerprint)\n  bundleKeys: [\"\(bundleKey)\"]\n", "school", 2, "set rules.source"),
    ])
    func schoolErrorsNameTheKeyAndLine(yaml: String, key: String, line: Int, message: String) {
        #expect {
            try Configuration(yaml: yaml)
        } throws: { error in
            guard let error = error as? ConfigurationError else { return false }
            // Yams counts lines from 1; a mapping's error points at its first key.
            return error.key == key && error.line == line && error.message.contains(message)
        }
    }

    /// With the server's bundle keys and no rules.source, the rules come from the
    /// server: its /bundle/ folder, its pinned key, its keys; an explicit source wins.
    @Test func theSchoolsBundleKeysBringItsRules() throws {
        let school = "school:\n  server: https://school.example:8443/hallpass/\n  fingerprint: \(Self.fingerprint)\n  bundleKeys: [\"\(Self.bundleKey)\"]\n"
        let fromServer = try Configuration(yaml: school)
        #expect(fromServer.school?.bundleKeys == [try BundlePublicKey(Self.bundleKey)])
        #expect(fromServer.rules.source == "https://school.example:8443/hallpass/bundle/")
        #expect(fromServer.rules.serverKey?.description == Self.fingerprint)
        #expect(fromServer.rules.trustedKeys == [try BundlePublicKey(Self.bundleKey)])

        let other = BundleSigningKey().publicKey
        let ownKeys = try Configuration(yaml: "rules:\n  trustedKeys: [\"\(other)\"]\n" + school)
        #expect(ownKeys.rules.source == "https://school.example:8443/hallpass/bundle/" && ownKeys.rules.trustedKeys == [other])

        let cdn = try Configuration(yaml: "rules:\n  source: https://cdn.example/hallpass/\n" + school)
        #expect(cdn.rules.source == "https://cdn.example/hallpass/" && cdn.rules.serverKey == nil && cdn.rules.trustedKeys.isEmpty)

        let reportsOnly = try Configuration(yaml: "school:\n  server: https://school.example/\n  fingerprint: \(Self.fingerprint)\n")
        #expect(reportsOnly.rules.source == nil && reportsOnly.rules.serverKey == nil)
    }

    @Test func theSectionIsAddedOrReplacedAndTheRestKept() throws {
        let server = try SchoolServerURL(parsing: "https://school.example:8443/")
        let fingerprint = try #require(ServerFingerprint(hex: Self.fingerprint))
        let original = "# our lab\nqueue:\n  failMode: closed  # exams\n\nlog:\n  users: pseudonym"
        let added = SchoolSettings.settingSection(in: original, server: server, fingerprint: fingerprint)
        #expect(added.hasPrefix(original + "\n\nschool:\n"))
        let configuration = try Configuration(yaml: added)
        #expect(configuration.queue.failMode == .closed && configuration.log.users == .pseudonym)
        #expect(configuration.school?.server == server && configuration.school?.fingerprint == fingerprint)

        let other = try SchoolServerURL(parsing: "https://other.example/")
        let withOld = "queue:\n  number: 3\nschool:\n  server: https://old.example/\n  fingerprint: \(String(repeating: "0", count: 64))\n  queueMaxAge: 2d\n\n# the metrics\nmetrics:\n  port: 9999\n"
        let replaced = SchoolSettings.settingSection(in: withOld, server: other, fingerprint: fingerprint)
        #expect(!replaced.contains("old.example") && !replaced.contains("queueMaxAge"))
        #expect(replaced.contains("\n# the metrics\nmetrics:\n  port: 9999\n"))
        let reread = try Configuration(yaml: replaced)
        #expect(reread.school?.server == other && reread.queue.number == 3 && reread.metrics?.port == 9999)
        #expect(SchoolSettings.settingSection(in: "", server: other, fingerprint: fingerprint).hasPrefix("school:\n"))

        let key = try BundlePublicKey(Self.bundleKey)
        let withKeys = SchoolSettings.settingSection(in: replaced, server: other, fingerprint: fingerprint, bundleKeys: [key])
        let keyed = try Configuration(yaml: withKeys)
        #expect(keyed.school?.bundleKeys == [key] && keyed.metrics?.port == 9999)
        #expect(!SchoolSettings.settingSection(in: withKeys, server: other, fingerprint: fingerprint).contains("bundleKeys"))
    }

    @Test func theExamplesSchoolLinesAreValidOnceUncommented() throws {
        let lines = Configuration.example.split(separator: "\n", omittingEmptySubsequences: false)
        let start = try #require(lines.firstIndex(of: "# school:"))
        let section = lines[start...].prefix { $0.hasPrefix("#") }.map { $0.dropFirst(2) }.joined(separator: "\n")
        let configuration = try Configuration(yaml: section)
        #expect(configuration.school?.server.host == "school.example")
        #expect(configuration.school?.queueMaxBytes == 256 << 20 && configuration.school?.queueMaxAge == 30 * 86_400)
        #expect(configuration.school?.bundleKeys.count == 1 && configuration.rules.source == "https://school.example:8443/bundle/")
    }

    // MARK: Signatures

    /// Vectors made with openssl (`openssl pkeyutl -sign -rawin`) from the
    /// Ed25519 seed 01 02 ... 20, independently of this code.
    @Test func signaturesMatchTheVectors() throws {
        let key = try Curve25519.Signing.PrivateKey(rawRepresentation: Array(1...32) as [UInt8])
        #expect(key.publicKey.rawRepresentation.base64EncodedString() == "ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ=")
        let signer = RequestSigner(machine: "m-abcdefghij234567abcd", key: key)
        let body = Array(#"{"records":[],"dropped":0}"#.utf8)
        let message = RequestSigner.message(method: "POST", path: "/api/v1/machine/records", date: 1_764_331_200, body: body)
        #expect(
            String(decoding: message, as: UTF8.self)
                == "hallpass-request-v1\nPOST\n/api/v1/machine/records\n1764331200\nafa0c511bca1da897f38b104a6b3152439ea4b4c0e5e8542864bf824b40cb558")
        let headers = try signer.headers(method: "POST", path: "/api/v1/machine/records", date: 1_764_331_200, body: body)
        #expect(headers.map(\.0) == ["Hallpass-Machine", "Hallpass-Date", "Hallpass-Signature"])
        #expect(headers[0].1 == "m-abcdefghij234567abcd" && headers[1].1 == "1764331200")
        #expect(headers[2].1 == "ed25519 SRmP6jb2P9HMdzdCZRCEEnQzHR2gjaE5cLmlvSlKI+oWM+Y/o6uL9/t7ph9yQHEWSYK9zaAs8eaZH8QSKjiRAg==")
        // An empty body hashes as the empty string; the query is part of the path.
        let second = try signer.headers(method: "POST", path: "/school/api/v1/machine/checkin?x=1", date: 1_700_000_000, body: [])
        #expect(second[2].1 == "ed25519 8KGkF0TP1uG78PpMlq7V7xqWRgRa1qN1MnZfqXPkAe12/Q7c74/HpLmdNLPCTKY5tPm0EL8s58h4o2PTAp90Dw==")
    }

    // MARK: The identity files

    @Test func theIdentityIsWrittenPrivateAndReadsBack() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let identity = MachineIdentity(
            machine: "m-abcdefghij234567abcd", server: try SchoolServerURL(parsing: "https://school.example/"),
            fingerprint: try #require(ServerFingerprint(hex: Self.fingerprint)), key: Curve25519.Signing.PrivateKey())
        try identity.write(directory: folder)
        for name in [MachineIdentity.fileName, MachineIdentity.keyFileName] {
            #expect(try FileSystem.status(folder + "/" + name).permissions.rawValue & 0o777 == 0o600, "\(name) is 0600")
        }
        #expect(try String(contentsOfFile: folder + "/identity", encoding: .utf8)
            == "machine m-abcdefghij234567abcd\nserver https://school.example/\nfingerprint \(Self.fingerprint)\n")
        let read = try MachineIdentity.read(directory: folder)
        #expect(read.machine == identity.machine && read.key.rawRepresentation == identity.key.rawRepresentation)
        // openssl reads the key file as an Ed25519 key.
        let shown = try runShell("openssl pkey -in \(folder)/identity.key -noout -text", in: folder)
        #expect(shown.status == 0 && shown.output.contains("ED25519"))
        try FileSystem.setMode(folder + "/identity.key", 0o644)
        #expect(throws: SchoolError.self) { try MachineIdentity.read(directory: folder) }
    }

    // MARK: Enrolment against the stand-in

    @Test func enrolmentSendsTheSecretAndKeyAndKeepsTheAnswer() async throws {
        let server = try await SchoolServerStandIn { _ in (201, #"{"machine":"m-abcdefghij234567abcd","room":"lab2"}"#) }
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let token = try EnrolmentToken(parsing: "hp1.\(server.fingerprint).\(Self.secret)")
        let url = try SchoolServerURL(parsing: server.url)
        let connection = try SchoolConnection(server: url, fingerprint: token.fingerprint, signer: nil)
        let outcome = try await Enrolment.enrol(server: url, token: token, hostname: "lab2-pc07", transport: connection)
        await server.stop()
        #expect(outcome.identity.machine == "m-abcdefghij234567abcd" && outcome.room == "lab2")
        let request = try #require(server.requests.first)
        #expect(request.method == "POST" && request.uri == "/api/v1/enrol")
        #expect(request.headers["content-type"] == "application/json")
        let json = try #require(request.json)
        #expect(json["token"] as? String == Self.secret && json["hostname"] as? String == "lab2-pc07")
        #expect(json["version"] as? String == HallpassVersion.current)
        #expect(json["publicKey"] as? String == outcome.identity.key.publicKey.rawRepresentation.base64EncodedString())
        #expect(request.headers["hallpass-signature"] == nil, "the enrolment is authenticated by its token alone")

        try outcome.identity.write(directory: folder)
        let config = folder + "/hallpass.yaml"
        try "queue:\n  failMode: closed\n".write(toFile: config, atomically: true, encoding: .utf8)
        try FileSystem.setMode(config, 0o640)
        try Enrolment.writeConfiguration(path: config, server: url, fingerprint: token.fingerprint)
        let configuration = try Configuration(yaml: String(contentsOfFile: config, encoding: .utf8))
        #expect(configuration.school?.server == url && configuration.school?.fingerprint == token.fingerprint)
        #expect(configuration.queue.failMode == .closed)
        #expect(try FileSystem.status(config).permissions.rawValue & 0o777 == 0o640, "the file keeps its mode")
    }

    /// A server that publishes names its bundle keys; enrol keeps them and writes them to school.bundleKeys.
    @Test func aPublishingServersBundleKeysAreKept() async throws {
        let answer = #"{"machine":"m-abcdefghij234567abcd","room":"lab2","bundles":{"path":"/bundle/","trustedKeys":["\#(Self.bundleKey)"]}}"#
        let server = try await SchoolServerStandIn { _ in (201, answer) }
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let token = try EnrolmentToken(parsing: "hp1.\(server.fingerprint).\(Self.secret)")
        let url = try SchoolServerURL(parsing: server.url)
        let connection = try SchoolConnection(server: url, fingerprint: token.fingerprint, signer: nil)
        let outcome = try await Enrolment.enrol(server: url, token: token, hostname: "lab2-pc07", transport: connection)
        #expect(outcome.bundleKeys == [try BundlePublicKey(Self.bundleKey)])
        let config = folder + "/hallpass.yaml"
        try Enrolment.writeConfiguration(path: config, server: url, fingerprint: token.fingerprint, bundleKeys: outcome.bundleKeys)
        let configuration = try Configuration(yaml: String(contentsOfFile: config, encoding: .utf8))
        #expect(configuration.school?.bundleKeys == outcome.bundleKeys)
        #expect(configuration.rules.source == "https://127.0.0.1:\(server.port)/bundle/")
        #expect(configuration.rules.serverKey == token.fingerprint)

        // A key that is not one is the server's mistake, said as such; no "bundles": none.
        server.setAnswer { _ in (201, #"{"machine":"m-abcdefghij234567abcd","bundles":{"trustedKeys":["rsa:xyz"]}}"#) }
        await #expect {
            _ = try await Enrolment.enrol(server: url, token: token, hostname: "lab2-pc07", transport: connection)
        } throws: { error in
            (error as? SchoolError)?.code == "school.protocol" && "\(error)".contains("rsa:xyz")
        }
        server.setAnswer { _ in (201, #"{"machine":"m-abcdefghij234567abcd","bundles":null}"#) }
        #expect(try await Enrolment.enrol(server: url, token: token, hostname: "lab2-pc07", transport: connection).bundleKeys.isEmpty)
        await server.stop()
    }

    @Test func aWrongFingerprintIsRefusedBeforeAnythingIsSent() async throws {
        let server = try await SchoolServerStandIn { _ in (201, #"{"machine":"m-abcdefghij234567abcd"}"#) }
        let token = try EnrolmentToken(parsing: "hp1.\(Self.fingerprint).\(Self.secret)")
        let url = try SchoolServerURL(parsing: server.url)
        let connection = try SchoolConnection(server: url, fingerprint: token.fingerprint, signer: nil)
        await #expect {
            _ = try await Enrolment.enrol(server: url, token: token, hostname: "lab2-pc07", transport: connection)
        } throws: { error in
            guard let error = error as? SchoolError, case .fingerprintMismatch(_, let expected, let seen) = error else { return false }
            return expected == Self.fingerprint && seen == server.fingerprint && error.code == "school.fingerprint-mismatch"
                && error.description.contains("nothing was sent")
        }
        await server.stop()
        #expect(server.requests.isEmpty, "the server saw no request")
    }

    @Test(arguments: [
        (401, "token-unknown", "does not know this token"),
        (410, "token-used-up", "used as many times as it allows"),
        (410, "token-expired", "has expired"),
        (400, "bad-request", "malformed"),
    ])
    func eachRefusalHasItsCodeAndWords(status: Int, code: String, words: String) async throws {
        let server = try await SchoolServerStandIn { _ in (status, #"{"error":"\#(code)","message":"said by the server"}"#) }
        let token = try EnrolmentToken(parsing: "hp1.\(server.fingerprint).\(Self.secret)")
        let url = try SchoolServerURL(parsing: server.url)
        let connection = try SchoolConnection(server: url, fingerprint: token.fingerprint, signer: nil)
        await #expect {
            _ = try await Enrolment.enrol(server: url, token: token, hostname: "lab2-pc07", transport: connection)
        } throws: { error in
            guard let error = error as? SchoolError else { return false }
            return error.code == "school." + code && error.description.contains(words) && error.description.contains("said by the server")
        }
        await server.stop()
    }

    @Test func laterRequestsAreSignedAsTheyGoOnTheWire() async throws {
        let server = try await SchoolServerStandIn { _ in (200, #"{"storedThrough":0}"#) }
        let key = Curve25519.Signing.PrivateKey()
        let url = try SchoolServerURL(parsing: server.url + "school/")
        let connection = try SchoolConnection(
            server: url, fingerprint: try #require(ServerFingerprint(hex: server.fingerprint)),
            signer: RequestSigner(machine: "m-abcdefghij234567abcd", key: key), clock: { Date(timeIntervalSince1970: 1_764_331_200.7) })
        let body = Array(#"{"records":[],"dropped":0}"#.utf8)
        let answer = try await connection.post("/api/v1/machine/records", body: body)
        await server.stop()
        #expect(answer.status == 200)
        let request = try #require(server.requests.first)
        #expect(request.uri == "/school/api/v1/machine/records" && request.body == body)
        #expect(request.headers["hallpass-machine"] == "m-abcdefghij234567abcd" && request.headers["hallpass-date"] == "1764331200")
        // The server's check: the signature over what it received, with the key the machine enrolled.
        let signature = try #require(request.headers["hallpass-signature"])
        #expect(signature.hasPrefix("ed25519 "))
        let bytes = try #require(Data(base64Encoded: String(signature.dropFirst("ed25519 ".count))))
        let message = RequestSigner.message(method: request.method, path: request.uri, date: 1_764_331_200, body: request.body)
        #expect(key.publicKey.isValidSignature(bytes, for: message))
        #expect(!key.publicKey.isValidSignature(bytes, for: RequestSigner.message(method: "POST", path: request.uri, date: 1_764_331_201, body: body)))
    }

    @Test func anUnreachableServerSaysSo() async throws {
        let url = try SchoolServerURL(parsing: "https://127.0.0.1:1/")
        let token = try EnrolmentToken(parsing: "hp1.\(Self.fingerprint).\(Self.secret)")
        let connection = try SchoolConnection(server: url, fingerprint: token.fingerprint, signer: nil)
        await #expect {
            _ = try await Enrolment.enrol(server: url, token: token, hostname: "x", transport: connection)
        } throws: { error in
            (error as? SchoolError)?.code == "school.unreachable"
        }
    }

    // MARK: The version

    @Test func theVersionIsTheChangelogs() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let changelog = try String(contentsOf: root.appendingPathComponent("debian/changelog"), encoding: .utf8)
        let first = try #require(changelog.split(separator: "\n").first)
        #expect(first.hasPrefix("hallpass (\(HallpassVersion.current))"))
    }
}

func temporaryFolder() throws -> String {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-test-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    return folder
}
