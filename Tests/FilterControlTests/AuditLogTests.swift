import FilterControl
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Testing
import VerdictCore

func auditFolder() throws -> String {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("hallpass-audit-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    return folder
}

func lines(_ path: String) -> [String] {
    ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
}

/// Polls `condition` every 20 ms for at most `seconds` (a guard against a hang, not a
/// timing assertion: callers give a minute, since the suite may share a busy machine).
func eventually(within seconds: Double, _ condition: () async -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return await condition()
}

let blockedDecision = AuditRecord(report: sampleReport(uid: 0), time: Date(), rulesVersion: 7)

@Suite struct AuditFileTests {
    @Test func theFileAndItsFolderGetTheirModes() throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/log/hallpass/audit.jsonl"
        let file = AuditFile(path: path, maxBytes: 1 << 20, keepFiles: 3, retention: 86_400 * 30)
        // The modes are set, not left to the umask (022 would give 0644 and 0755).
        try file.append(AuditFormat.jsonLine(sampleRecord()), firstTime: Date())
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect(attributes[.posixPermissions] as? Int == 0o640)
        #expect(try FileManager.default.attributesOfItem(atPath: folder + "/log/hallpass")[.posixPermissions] as? Int == 0o750)
        #expect(lines(path).count == 1)
    }

    @Test func sizeRotationKeepsAFewFilesNewestFirst() throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/audit.jsonl"
        let line = AuditFormat.jsonLine(sampleRecord())
        // Room for three lines per file.
        let file = AuditFile(path: path, maxBytes: line.count * 3, keepFiles: 2, retention: 86_400 * 365)
        for _ in 0..<10 { try file.append(line, firstTime: Date()) }
        #expect(lines(path).count == 1)
        #expect(lines(path + ".1").count == 3)
        #expect(lines(path + ".2").count == 3)
        #expect(!FileManager.default.fileExists(atPath: path + ".3"), "only keepFiles rotated files stay")
        #expect(AuditLogReader(path: path).files() == [path + ".2", path + ".1", path])
    }

    @Test func reopenFollowsLogrotate() throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/audit.jsonl"
        let file = AuditFile(path: path, maxBytes: 1 << 20, keepFiles: 3, retention: 86_400 * 365)
        try file.append(AuditFormat.jsonLine(sampleRecord()), firstTime: Date())
        // logrotate renames the file, then sends SIGUSR1 (filter-control calls reopen).
        #expect(rename(path, path + ".1") == 0)
        try file.append(AuditFormat.jsonLine(sampleRecord()), firstTime: Date())
        #expect(lines(path + ".1").count == 2, "until reopen, records go to the file that is open")
        file.reopen()
        try file.append(AuditFormat.jsonLine(sampleRecord()), firstTime: Date())
        #expect(lines(path).count == 1 && lines(path + ".1").count == 2)
    }

    @Test func retentionRemovesOldRotatedFilesAndRotatesAnOldFile() throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/audit.jsonl"
        let day = 86_400.0
        let now = Date()
        // A file started 40 days ago, with a 30-day retention over 10 files: rotated at once (older than 3 days).
        let old = sampleRecord(time: now.addingTimeInterval(-40 * day))
        try String(decoding: AuditFormat.jsonLine(old), as: UTF8.self).write(toFile: path, atomically: true, encoding: .utf8)
        try "{}\n".write(toFile: path + ".3", atomically: true, encoding: .utf8)
        var times = [timeval(tv_sec: Int(now.timeIntervalSince1970 - 31 * day), tv_usec: 0), timeval(tv_sec: Int(now.timeIntervalSince1970 - 31 * day), tv_usec: 0)]
        #expect(utimes(path + ".3", &times) == 0)
        let file = AuditFile(path: path, maxBytes: 1 << 20, keepFiles: 10, retention: 30 * day)
        #expect(file.rotationAge == 3 * day)
        try file.append(AuditFormat.jsonLine(sampleRecord(time: now)), firstTime: now, now: now)
        #expect(!FileManager.default.fileExists(atPath: path + ".4") && !FileManager.default.fileExists(atPath: path + ".3"), "last written 31 days ago: removed")
        #expect(lines(path + ".1").count == 1, "the old file was rotated")
        #expect(lines(path).count == 1)
    }
}

@Suite struct AuditLogTests {
    let logger = Logger(label: "hallpass.audit.test")

    func settings(_ folder: String) -> AuditSettings {
        var settings = AuditSettings()
        settings.file = folder + "/audit.jsonl"
        settings.journald = false
        settings.machine = "lab2-pc07"
        return settings
    }

    @Test func aBlockedRecordReachesTheFileWithItsFields() async throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let log = try AuditLog(
            settings: settings(folder), rulesDirectory: folder, logger: logger, lookup: { _ in ("alice", "students") })
        let running = Task { await log.run() }
        log.record(blockedDecision)
        let path = folder + "/audit.jsonl"
        #expect(await eventually(within: 60) { lines(path).count == 1 })
        let line = try #require(lines(path).first)
        let record = try JSONDecoder().decode(AuditLine.self, from: Data(line.utf8))
        #expect(record[.machine] == "lab2-pc07" && record[.user] == "alice" && record[.uid] == "0" && record[.group] == "students")
        #expect(record[.kind] == "tls" && record[.host] == "casino.example" && record[.destination] == "192.0.2.7" && record[.port] == "443")
        #expect(record.action == .block && record[.category] == "gambling" && record[.rule] == "casino.example" && record[.reason] == "category")
        #expect(record[.rulesVersion] == "7" && abs(record.time.timeIntervalSince(blockedDecision.time)) < 0.001)
        let json = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(Set(json?.keys.map { $0 } ?? []) == ["time", "machine", "uid", "user", "group", "kind", "host", "destination", "port", "action", "category", "rule", "reason", "rulesVersion"])
        log.finish()
        await running.value
        let counters = await log.counters()
        #expect(counters.queued == 1 && counters.fileWritten == 1 && counters.droppedQueue == 0)
    }

    @Test func allowedFlowsAreRecordedOnlyWhenTheSchoolAsks() async throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var allowed = blockedDecision
        allowed.report.verdict = .allow
        allowed.report.reason = Reason(source: .unknownHost)
        for (choice, expected) in [(AuditSettings.Allowed.none, 1), (.all, 2)] {
            var settings = settings(folder)
            settings.allowed = choice
            settings.file = folder + "/\(choice.rawValue).jsonl"
            let log = try AuditLog(settings: settings, rulesDirectory: folder, logger: logger, lookup: { _ in (nil, nil) })
            log.record(allowed)
            log.record(blockedDecision)
            log.finish()
            await log.run()
            #expect(lines(settings.file!).count == expected, "allowed: \(choice)")
        }
    }

    @Test func aFullQueueDropsAndCounts() async throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let log = try AuditLog(settings: settings(folder), rulesDirectory: folder, logger: logger, lookup: { _ in (nil, nil) }, queueCapacity: 3)
        // Not running yet: nothing takes from the queue, and record never waits.
        for _ in 0..<10 { log.record(blockedDecision) }
        var counters = await log.counters()
        #expect(counters.queued == 3 && counters.droppedQueue == 7)
        log.finish()
        await log.run()
        counters = await log.counters()
        #expect(counters.fileWritten == 3 && lines(folder + "/audit.jsonl").count == 3)
        log.record(blockedDecision)
        #expect(await log.counters().droppedQueue == 8, "after finish every record is dropped, and counted")
    }

    @Test func pseudonymAndNoneHideTheNameInTheFile() async throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        for users in [AuditSettings.Users.pseudonym, .none] {
            var settings = settings(folder)
            settings.users = users
            settings.file = folder + "/\(users.rawValue).jsonl"
            let log = try AuditLog(settings: settings, rulesDirectory: folder, logger: logger, lookup: { _ in ("alice", "students") })
            log.record(blockedDecision)
            log.finish()
            await log.run()
            let text = lines(settings.file!).joined()
            #expect(!text.contains("alice") && !text.contains("\"uid\""), "\(users): \(text)")
            #expect(text.contains("\"group\":\"students\""))
            if users == .pseudonym {
                let key = try Pseudonyms.loadKey(path: folder + "/pseudonym.key", create: false)
                #expect(text.contains("\"user\":\"\(Pseudonyms(key: key).pseudonym(for: "alice"))\""))
            }
        }
    }

    @Test func journalRecordsAreDatagramsWithHallpassFields() async throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // A stand-in for journald's socket.
        let socketPath = folder + "/journal.socket"
        let receiver = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(receiver) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8) + [0]) }
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(receiver, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        #expect(bound == 0)
        var settings = settings(folder)
        settings.file = nil
        settings.journald = true
        let log = try AuditLog(settings: settings, rulesDirectory: folder, logger: logger, journalSocket: socketPath, lookup: { _ in ("alice", nil) })
        log.record(blockedDecision)
        log.finish()
        await log.run()
        var buffer = [UInt8](repeating: 0, count: 65536)
        let count = recv(receiver, &buffer, buffer.count, Int32(MSG_DONTWAIT))
        #expect(count > 0)
        let text = String(decoding: buffer[0..<max(0, count)], as: UTF8.self)
        #expect(text.contains("\nHALLPASS_HOST=casino.example\n") && text.contains("\nHALLPASS_USER=alice\n") && text.contains("\nHALLPASS_ACTION=block\n"))
        #expect(text.hasPrefix("MESSAGE=block tls casino.example:443"))
        #expect(await log.counters().journalSent == 1)
    }
}

/// A TCP listener on loopback that collects what arrives.
final class CollectorStub: @unchecked Sendable {
    let lock = NSLock()
    var received: [UInt8] = []
    let channel: any Channel

    init(port: Int = 0) async throws {
        let bytes = NIOLockedBox()
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture { try child.pipeline.syncOperations.addHandler(Sink(box: bytes)) }
            }
            .bind(host: "127.0.0.1", port: port).get()
        box = bytes
    }

    var box: NIOLockedBox
    var port: Int { channel.localAddress!.port! }
    func text() -> String { box.lock.withLock { String(decoding: box.bytes, as: UTF8.self) } }
    func close() async { try? await channel.close() }

    final class NIOLockedBox: @unchecked Sendable {
        let lock = NSLock()
        var bytes: [UInt8] = []
    }

    final class Sink: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        let box: NIOLockedBox
        init(box: NIOLockedBox) { self.box = box }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = unwrapInboundIn(data)
            let bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
            box.lock.withLock { box.bytes += bytes }
        }
    }
}

@Suite struct SyslogForwarderTests {
    let logger = Logger(label: "hallpass.audit.test")

    /// Splits RFC 6587 octet-counted frames.
    static func frames(_ text: String) -> [String] {
        var bytes = Array(text.utf8)[...]
        var result: [String] = []
        while let space = bytes.firstIndex(of: UInt8(ascii: " ")), let length = Int(String(decoding: bytes[..<space], as: UTF8.self)),
            bytes.count >= space - bytes.startIndex + 1 + length
        {
            let start = space + 1
            result.append(String(decoding: bytes[start..<start + length], as: UTF8.self))
            bytes = bytes[(start + length)...]
        }
        return result
    }

    @Test func tcpRecordsAreOctetCounted() async throws {
        let collector = try await CollectorStub()
        let forwarder = SyslogForwarder(
            target: .init(transport: .tcp, host: "127.0.0.1", port: collector.port), caFile: nil, capacity: 100, logger: logger)
        let running = Task { await forwarder.run() }
        let message = AuditFormat.syslogMessage(sampleRecord(), facility: .local0, processID: 1)
        await forwarder.enqueue(message)
        await forwarder.enqueue(message)
        #expect(await eventually(within: 60) { Self.frames(collector.text()).count == 2 })
        #expect(Self.frames(collector.text()) == [String(decoding: message, as: UTF8.self), String(decoding: message, as: UTF8.self)])
        // Counted once the write completed, which may be a moment after the bytes arrived.
        #expect(await eventually(within: 60) { await forwarder.currentCounters().sent == 2 })
        await forwarder.finish()
        await running.value
        await collector.close()
    }

    @Test func aCollectorThatIsDownGetsTheBufferedRecordsLaterAndOverflowIsCounted() async throws {
        // A free port with nobody listening yet.
        let probe = try await CollectorStub()
        let port = probe.port
        await probe.close()
        let forwarder = SyslogForwarder(
            target: .init(transport: .tcp, host: "127.0.0.1", port: port), caFile: nil, capacity: 3,
            backoff: .init(initial: .milliseconds(50), maximum: .milliseconds(200)), logger: logger)
        let running = Task { await forwarder.run() }
        for number in 1...5 {
            var record = sampleRecord()
            record[.host] = "n\(number).example"
            await forwarder.enqueue(AuditFormat.syslogMessage(record, facility: .local0, processID: 1))
        }
        #expect(await eventually(within: 60) { await forwarder.currentCounters().lastError != nil })
        var counters = await forwarder.currentCounters()
        #expect(counters.dropped == 2 && counters.buffered == 3 && counters.sent == 0 && !counters.connected)
        let collector = try await CollectorStub(port: port)
        #expect(await eventually(within: 60) { Self.frames(collector.text()).count == 3 })
        let hosts = Self.frames(collector.text()).map { $0.contains("host=\"n3.example\"") || $0.contains("host=\"n4.example\"") || $0.contains("host=\"n5.example\"") }
        #expect(hosts == [true, true, true], "the oldest two went when the buffer was full")
        #expect(await eventually(within: 60) { await forwarder.currentCounters().sent == 3 })
        counters = await forwarder.currentCounters()
        #expect(counters.sent == 3 && counters.buffered == 0 && counters.dropped == 2)
        await forwarder.finish()
        await running.value
        await collector.close()
    }
}

/// A TLS listener on loopback with a certificate for localhost made by openssl, for the tls:// collector.
@Suite struct SyslogTLSTests {
    let logger = Logger(label: "hallpass.audit.test")

    static func certificate(in folder: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", folder + "/key.pem", "-out", folder + "/cert.pem",
        ]
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
    }

    @Test func tlsRecordsArriveWithTheCAFileAndAreRefusedWithoutIt() async throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try Self.certificate(in: folder)
        let context = try NIOSSLContext(
            configuration: .makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(folder + "/cert.pem").map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: folder + "/key.pem", format: .pem))))
        let box = CollectorStub.NIOLockedBox()
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    try child.pipeline.syncOperations.addHandler(CollectorStub.Sink(box: box))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = server.localAddress!.port!
        let message = AuditFormat.syslogMessage(sampleRecord(), facility: .local0, processID: 1)

        let trusting = SyslogForwarder(
            target: .init(transport: .tls, host: "127.0.0.1", port: port), caFile: folder + "/cert.pem", capacity: 10, logger: logger)
        let running = Task { await trusting.run() }
        await trusting.enqueue(message)
        let text = { box.lock.withLock { String(decoding: box.bytes, as: UTF8.self) } }
        #expect(await eventually(within: 60) { SyslogForwarderTests.frames(text()).count == 1 })
        #expect(SyslogForwarderTests.frames(text()) == [String(decoding: message, as: UTF8.self)])
        await trusting.finish()
        await running.value

        // Without the CA file the collector's certificate is not trusted: nothing is sent, and the error says why.
        let doubting = SyslogForwarder(
            target: .init(transport: .tls, host: "127.0.0.1", port: port), caFile: nil, capacity: 10,
            backoff: .init(initial: .milliseconds(50), maximum: .milliseconds(100)), logger: logger)
        let second = Task { await doubting.run() }
        await doubting.enqueue(message)
        #expect(await eventually(within: 60) { await doubting.currentCounters().lastError != nil })
        let counters = await doubting.currentCounters()
        #expect(counters.sent == 0 && counters.buffered == 1, "\(counters)")
        second.cancel()
        await second.value
        #expect(SyslogForwarderTests.frames(text()).count == 1)
        try? await server.close()
    }
}

extension AuditFileTests {
    @Test func maintenanceRotatesAnOldFileWhenNothingIsWritten() throws {
        let folder = try auditFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/audit.jsonl"
        let now = Date()
        let old = sampleRecord(time: now.addingTimeInterval(-5 * 86_400))
        try String(decoding: AuditFormat.jsonLine(old), as: UTF8.self).write(toFile: path, atomically: true, encoding: .utf8)
        let file = AuditFile(path: path, maxBytes: 1 << 20, keepFiles: 10, retention: 30 * 86_400)
        try file.maintain(now: now.addingTimeInterval(-3 * 86_400))
        #expect(lines(path).count == 1, "two days old: not yet (rotation age 3 days)")
        try file.maintain(now: now)
        #expect(lines(path).isEmpty && lines(path + ".1").count == 1)
    }
}
