@testable import BlockPage
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import SwiftASN1
import Testing
import X509

/// A clock the test moves by hand.
final class ManualClock: CertificateClock, @unchecked Sendable {
    // @unchecked Sendable: `current` is guarded by `lock`.
    private let lock = NSLock()
    private var current: Date

    init(_ start: Date) { current = start }

    var now: Date { lock.withLock { current } }

    func advance(_ seconds: TimeInterval) { lock.withLock { current += seconds } }
    func set(_ date: Date) { lock.withLock { current = date } }
}

/// Events reported by the certificate cache, in order.
final class EventLog: @unchecked Sendable {
    // @unchecked Sendable: `events` is guarded by `lock`.
    private let lock = NSLock()
    private var recorded: [BlockPageCertificateEvent] = []

    var events: [BlockPageCertificateEvent] { lock.withLock { recorded } }
    func record(_ event: BlockPageCertificateEvent) { lock.withLock { recorded.append(event) } }
}

let day: TimeInterval = 86_400

/// The CA folder of one test, removed at the end.
struct CAFolder {
    let path = NSTemporaryDirectory() + "hallpass-renewal-" + UUID().uuidString

    @discardableResult
    func create(replace: Bool = false) throws -> LocalCertificateAuthority {
        try LocalCertificateAuthority.create(folder: path, organization: "Lakeside", replace: replace)
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

extension LocalCertificateAuthority {
    func signed(_ leaf: Certificate) -> Bool {
        certificate.publicKey.isValidSignature(leaf.signature, for: leaf)
    }

    var der: [UInt8] {
        var serializer = DER.Serializer()
        try! serializer.serialize(certificate)
        return serializer.serializedBytes
    }
}

@Suite struct CertificateRenewalTests {
    let start = Date(timeIntervalSince1970: 1_772_000_000)  // 2026-02-25

    @Test func aNamesCertificateIsKeptWhileYoungAndMadeAgainWhenOld() throws {
        let folder = CAFolder()
        defer { folder.remove() }
        let authority = try folder.create()
        let clock = ManualClock(start)
        let certificates = try BlockPageCertificates(authority: authority, clock: clock)

        let first = try certificates.certificate(for: "Games.Example")
        #expect(first.leaf.notValidBefore == start - 3600)
        #expect(first.leaf.notValidAfter == start + 30 * day)
        #expect(authority.signed(first.leaf))

        // Young: the same certificate, however often it is asked for.
        clock.advance(20 * day - 1)
        let kept = try certificates.certificate(for: "games.example")
        #expect(kept.leaf == first.leaf && kept.chain == first.chain)
        // The most worn certificate a browser is ever shown still has ten days left.
        #expect(kept.leaf.notValidAfter.timeIntervalSince(clock.now) > 10 * day)

        // Twenty days old: a new one, with a new serial and new dates.
        clock.advance(1)
        let renewed = try certificates.certificate(for: "games.example")
        #expect(renewed.leaf.serialNumber != first.leaf.serialNumber)
        #expect(renewed.leaf.notValidBefore == clock.now - 3600)
        #expect(renewed.leaf.notValidAfter == clock.now + 30 * day)
        #expect(authority.signed(renewed.leaf))
        #expect(renewed.chain[1] == first.chain[1])  // the same CA behind it
        #expect(try certificates.certificate(for: "games.example").leaf == renewed.leaf)

        // Long uptime: every twenty days a new one, never an expired one.
        var previous = renewed.leaf
        for _ in 0..<20 {
            clock.advance(7 * day)
            let current = try certificates.certificate(for: "games.example").leaf
            #expect(current.notValidBefore <= clock.now && clock.now + 10 * day <= current.notValidAfter)
            if current != previous { #expect(current.serialNumber != previous.serialNumber) }
            previous = current
        }

        // A clock set back before the certificate was made: its start could lie in the future, so a new one.
        let made = clock.now
        _ = try certificates.certificate(for: "back.example")
        clock.set(made - 2 * day)
        let afterSetBack = try certificates.certificate(for: "back.example")
        #expect(afterSetBack.leaf.notValidBefore == clock.now - 3600)
    }

    @Test func aReplacedCAIsNoticedWhileServingAndUsedForEveryName() throws {
        let folder = CAFolder()
        defer { folder.remove() }
        let old = try folder.create()
        let clock = ManualClock(start)
        let log = EventLog()
        let certificates = try BlockPageCertificates(authority: old, clock: clock, report: log.record)
        let before = try certificates.certificate(for: "games.example")
        _ = try certificates.certificate(for: "video.example")
        #expect(old.signed(before.leaf))

        // filterctl ca init --force, while filter-control runs.
        let new = try folder.create(replace: true)
        #expect(new.certificate != old.certificate)

        // The folder is looked at once a minute at most: until then, the old CA.
        clock.advance(30)
        #expect(try certificates.certificate(for: "games.example").leaf == before.leaf)
        #expect(log.events.isEmpty)

        clock.advance(30)
        let after = try certificates.certificate(for: "games.example")
        #expect(new.signed(after.leaf) && !old.signed(after.leaf))
        #expect(after.leaf.serialNumber != before.leaf.serialNumber)
        #expect(try after.chain[1].toDERBytes() == new.der)
        #expect(log.events == [.authorityReplaced(fingerprint: new.fingerprint)])
        #expect(certificates.authority.certificate == new.certificate)
        // Every other name too, young as its certificate is: nothing from the old CA is handed out again.
        #expect(new.signed(try certificates.certificate(for: "video.example").leaf))
        #expect(certificates.count == 2)
    }

    @Test func reloadHandsOverACAAtOnce() throws {
        let first = CAFolder()
        let second = CAFolder()
        defer {
            first.remove()
            second.remove()
        }
        let old = try first.create()
        let new = try second.create()
        let clock = ManualClock(start)
        let certificates = try BlockPageCertificates(authority: old, clock: clock)
        let before = try certificates.certificate(for: "games.example")

        #expect(certificates.use(new))
        let after = try certificates.certificate(for: "games.example")
        #expect(new.signed(after.leaf) && after.leaf.serialNumber != before.leaf.serialNumber)

        // The same CA read again (every reload does): nothing changes.
        #expect(!certificates.use(try LocalCertificateAuthority(folder: second.path)))
        #expect(try certificates.certificate(for: "games.example").leaf == after.leaf)
    }

    @Test func aCAFolderThatCannotBeUsedLeavesTheCAInUse() throws {
        let folder = CAFolder()
        let other = CAFolder()
        defer {
            folder.remove()
            other.remove()
        }
        let authority = try folder.create()
        let clock = ManualClock(start)
        let log = EventLog()
        let certificates = try BlockPageCertificates(authority: authority, clock: clock, report: log.record)
        let before = try certificates.certificate(for: "games.example")

        // Half a CA: a key that does not belong to the certificate.
        try other.create()
        try FileManager.default.removeItem(atPath: folder.path + "/ca-key.pem")
        try FileManager.default.copyItem(atPath: other.path + "/ca-key.pem", toPath: folder.path + "/ca-key.pem")
        clock.advance(61)
        #expect(try certificates.certificate(for: "games.example").leaf == before.leaf)
        #expect(log.events.map { if case .authorityUnusable(let error) = $0 { error.code } else { "?" } } == ["ca.mismatch"])

        // Reported once, not at every look.
        clock.advance(61)
        _ = try certificates.certificate(for: "games.example")
        #expect(log.events.count == 1)

        // A whole new CA lands: used from the next look on.
        let replacement = try folder.create(replace: true)
        clock.advance(61)
        #expect(replacement.signed(try certificates.certificate(for: "games.example").leaf))
        #expect(log.events.last == .authorityReplaced(fingerprint: replacement.fingerprint))
    }

    @Test func theCacheKeepsAtMostCapacityNamesAndDropsTheLeastRecentlyUsed() throws {
        let folder = CAFolder()
        defer { folder.remove() }
        let clock = ManualClock(start)
        let certificates = try BlockPageCertificates(
            authority: try folder.create(), policy: LeafCertificatePolicy(capacity: 3), clock: clock)
        let a = try certificates.certificate(for: "a.example").leaf
        let b = try certificates.certificate(for: "b.example").leaf
        _ = try certificates.certificate(for: "c.example")
        _ = try certificates.certificate(for: "a.example")  // a is now used more recently than b and c

        _ = try certificates.certificate(for: "d.example")
        #expect(certificates.count == 3)
        #expect(try certificates.certificate(for: "a.example").leaf == a)  // kept
        let bAgain = try certificates.certificate(for: "b.example").leaf  // dropped, so made again (and c goes)
        #expect(bAgain.serialNumber != b.serialNumber)
        #expect(certificates.count == 3)

        // A stream of new names (a local program asking for random ones) never grows it.
        for index in 0..<200 { _ = try certificates.certificate(for: "name\(index).example") }
        #expect(certificates.count == 3)
    }

    // MARK: Through the server

    @Test func theServerPicksEachHandshakesCertificateFreshAndStartsHTTPSOnceThereIsACA() throws {
        let folder = CAFolder()
        defer { folder.remove() }
        // Real time (the first handshakes verify the certificates), in whole seconds as certificates carry it.
        let clock = ManualClock(Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)))
        let renderer = try BlockPageRenderer(settings: BlockPageSettings(organization: "Lakeside"))
        let server = BlockPageServer(
            responder: BlockPageResponder(renderer: renderer, backend: RecordingBackend(), ownNames: ["127.0.0.1"]), clock: clock)
        defer { server.stop() }
        let listener = BlockPageServer.Listener(address: "127.0.0.1", port: 0, tls: true)

        // No CA yet: HTTPS waits, and starts when one is handed over (filterctl reload).
        let problems = server.start([listener], authority: nil)
        #expect(problems.map(\.code) == ["ca.missing"] && server.listening.isEmpty)
        let old = try folder.create()
        let started = server.useAuthority(old)
        #expect(started.started == [listener.description] && started.problems.isEmpty)
        let port = try #require(server.boundPorts[listener])

        let first = try TLSProbe.certificate(port: port, serverName: "games.example", trusting: old)
        #expect(try TLSProbe.certificate(port: port, serverName: "games.example", trusting: old) == first)

        // A new CA on reload: the next handshake verifies against it, and no longer against the old one.
        let new = try folder.create(replace: true)
        #expect(server.useAuthority(new).replaced)
        let fromNew = try TLSProbe.certificate(port: port, serverName: "games.example", trusting: new)
        #expect(new.signed(fromNew) && fromNew.serialNumber != first.serialNumber)
        #expect(throws: (any Error).self) { try TLSProbe.certificate(port: port, serverName: "games.example", trusting: old) }

        // Twenty days on, without a restart: a new certificate for the same name.
        clock.advance(20 * day)
        let renewed = try TLSProbe.certificate(port: port, serverName: "games.example", trusting: nil)
        #expect(renewed.serialNumber != fromNew.serialNumber && renewed.notValidBefore == clock.now - 3600)

        // A visit by address (no server name) gets the page's own address, renewed the same way.
        let byAddress = try TLSProbe.certificate(port: port, serverName: nil, trusting: nil)
        let names = try byAddress.extensions.subjectAlternativeNames.map(Array.init) ?? []
        #expect(names == [.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
        clock.advance(20 * day)
        #expect(try TLSProbe.certificate(port: port, serverName: nil, trusting: nil).serialNumber != byAddress.serialNumber)
    }
}

/// One TLS handshake with the block page on loopback; returns the certificate it sent.
enum TLSProbe {
    static func certificate(port: Int, serverName: String?, trusting authority: LocalCertificateAuthority?) throws -> Certificate {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let authority {
            configuration.trustRoots = .certificates([try NIOSSLCertificate(bytes: authority.der, format: .der)])
        } else {
            // Certificates dated by the test's clock, not the real one: look at them without judging them.
            configuration.certificateVerification = .none
        }
        let context = try NIOSSLContext(configuration: configuration)
        let group = MultiThreadedEventLoopGroup.singleton
        let handshake = group.next().makePromise(of: Void.self)
        let channel = try ClientBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverName))
                    try channel.pipeline.syncOperations.addHandler(HandshakeWaiter(handshake))
                }
            }
            .connect(host: "127.0.0.1", port: port).wait()
        defer { try? channel.close().wait() }
        try handshake.futureResult.wait()
        let peer = try #require(try channel.nioSSL_peerCertificate().wait())
        return try Certificate(derEncoded: try peer.toDERBytes())
    }

    /// Completes its promise when the handshake is done, fails it when the connection fails first.
    final class HandshakeWaiter: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let promise: EventLoopPromise<Void>

        init(_ promise: EventLoopPromise<Void>) { self.promise = promise }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if case .handshakeCompleted? = event as? TLSUserEvent { promise.succeed(()) }
            context.fireUserInboundEventTriggered(event)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            promise.fail(error)
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            promise.fail(ChannelError.eof)
        }
    }
}
