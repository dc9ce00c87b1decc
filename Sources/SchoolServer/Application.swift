public import Foundation
public import Hummingbird
import BundleBuilder
import HummingbirdCore
import HummingbirdTLS
public import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle
import SharedStore
import Synchronization

/// What the application is built from besides its configuration: the open
/// storage, the TLS pair (nil only with `listen.plainHTTP`), the metrics,
/// and the clock (Unix seconds; tests pass their own).
public struct ServerParts: Sendable {
    public var storage: any ServerStorage
    public var certificate: ServerCertificate?
    public var metrics: ServerMetrics
    public var logger: Logger
    public var clock: @Sendable () -> Int64
    /// Builds, signs and serves bundles; nil: the one `configuration` describes (`Publisher.load`).
    public var publisher: Publisher?
    /// Called with the bound port once the server listens (tests listen on port 0).
    public var onListening: @Sendable (Int) async -> Void
    /// Adds routes of the caller's own after the API's and the sign-in's (the
    /// console's pages, the tests' probes), with the console's sessions to put
    /// behind `ConsoleSessionMiddleware` and the publisher the API's routes use,
    /// before the table of served methods is made.
    public var addRoutes: @Sendable (Router<ServerRequestContext>, Sessions, Publisher) throws -> Void
    /// Whether the console's pages are served (false: a test mounts its own
    /// `ConsoleRoutes` behind a middleware of its own).
    public var console: Bool
    /// The live key and the hub of held live requests; nil: the key in the
    /// state folder (made when missing) and a hub of its own.
    public var live: LiveChannel?
    /// Poked when records raised safeguarding alerts or digests were queued; the alerts' delivery listens on it.
    public var alerts: AlertSignal
    /// The alerts' outbox and its worker (docs/server.md, "Alert delivery"); nil:
    /// the one `alerts:` and `console.url` describe (`AlertDeliveryService.make`).
    public var delivery: AlertDeliveryService?
    /// The safeguarding digests on their schedule (docs/server.md, "Safeguarding
    /// digests"); nil: the one `alerts.digests` describes (`DigestService.make`),
    /// in the server's time zone, waking the delivery through `alerts`.
    public var digests: DigestService?

    public init(
        storage: any ServerStorage, certificate: ServerCertificate?, metrics: ServerMetrics, logger: Logger,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) },
        publisher: Publisher? = nil,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in },
        addRoutes: @escaping @Sendable (Router<ServerRequestContext>, Sessions, Publisher) throws -> Void = { _, _, _ in },
        console: Bool = true, live: LiveChannel? = nil, alerts: AlertSignal = AlertSignal(), delivery: AlertDeliveryService? = nil,
        digests: DigestService? = nil
    ) {
        self.digests = digests
        self.live = live
        self.alerts = alerts
        self.delivery = delivery
        self.addRoutes = addRoutes
        self.console = console
        self.publisher = publisher
        self.storage = storage
        self.certificate = certificate
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
        self.onListening = onListening
    }
}

/// The routes, in one place: what a request may reach and through which check.
public func buildRouter(configuration: ServerConfiguration, parts: ServerParts, openID: OpenIDClient? = nil) throws
    -> Router<ServerRequestContext>
{
    let publisher = try parts.publisher ?? Publisher.load(configuration: configuration, storage: parts.storage, logger: parts.logger)
    if let key = publisher.signingKey {
        parts.logger.info("bundles are signed by key \(key.publicKey.keyID) (\(configuration.signingKeyPath ?? "-"))")
    } else if configuration.publishing.offline {
        parts.logger.info("bundles are signed offline; machines trust \(publisher.trustedKeys.map(\.keyID).joined(separator: ", "))")
    } else {
        parts.logger.warning(
            "no bundle signing key at \(configuration.signingKeyPath ?? "-"): publishing is off until `hallpass-server init` makes one")
    }
    let live = try parts.live ?? LiveChannel(key: LiveKey.loadOrMake(configuration: configuration).key)
    let control = RoomControl(
        storage: parts.storage, live: live,
        published: PublishedLivePolicy(storage: parts.storage, storePath: publisher.folder.path(BundleManifest.storeFileName)),
        metrics: parts.metrics, clock: parts.clock)
    let filteringTests = FilteringTestDesk(
        storage: parts.storage, schoolNames: configuration.filteringTest,
        protections: configuration.publishing.builtinProtections ? ProtectionLists.categories : [], live: live.hub, alerts: parts.alerts,
        clock: parts.clock)
    let router = Router(context: ServerRequestContext.self)
    let served = MethodNotAllowedMiddleware.ServedMethods()
    router.add(middleware: MethodNotAllowedMiddleware(served: served))
    router.add(middleware: MetricsMiddleware())
    router.add(middleware: LogRequestsMiddleware(.debug))
    MachineRoutes(
        storage: parts.storage, metrics: parts.metrics, clock: parts.clock, publisher: publisher,
        enrolments: RateLimiter(perMinute: configuration.machines.enrolRate), requests: RateLimiter(perMinute: configuration.machines.requestRate, maxKeys: 100_000),
        live: live, safeguarding: PublishedSafeguarding(storage: parts.storage, logger: parts.logger), alerts: parts.alerts,
        filteringTests: filteringTests
    ).add(to: router)
    RoomRoutes(storage: parts.storage, control: control, clock: parts.clock).add(to: router)
    AdminRoutes(storage: parts.storage, staleAfter: configuration.machines.staleAfter, clock: parts.clock).add(to: router)
    RecordRoutes(storage: parts.storage).add(to: router)
    PolicyRoutes(
        storage: parts.storage, editor: PolicyEditor(storage: parts.storage, configuration: configuration), publisher: publisher,
        clock: parts.clock
    ).add(to: router)
    BundleRoutes(storage: parts.storage, cache: publisher.cache).add(to: router)
    AccessRequestRoutes(desk: AccessRequestDesk(storage: parts.storage, live: LiveAccessRequests(control: control), clock: parts.clock)).add(to: router)
    AlertRoutes(desk: AlertDesk(storage: parts.storage, clock: parts.clock)).add(to: router)
    FilteringTestRoutes(desk: filteringTests).add(to: router)
    PersonExportRoutes(storage: parts.storage, pseudonymRoles: configuration.consolePages.pseudonyms, clock: parts.clock).add(to: router)
    // The console's sign-in and sessions; its pages add themselves behind the same middleware.
    let sessions = Sessions(storage: parts.storage, settings: configuration.console, clock: parts.clock)
    SignInRoutes(storage: parts.storage, sessions: sessions, configuration: configuration, clock: parts.clock).add(to: router)
    if let openID {
        OpenIDRoutes(
            client: openID, storage: parts.storage, sessions: sessions, perMinute: configuration.console.signInRate, clock: parts.clock
        ).add(to: router)
    }
    if parts.console {
        try ConsoleRoutes(
            storage: parts.storage, editor: PolicyEditor(storage: parts.storage, configuration: configuration), publisher: publisher,
            configuration: configuration, clock: parts.clock, openIDConfigured: configuration.openID != nil,
            hooks: .auditing(parts.storage, clock: parts.clock), sources: .stored(parts.storage), rooms: control,
            requests: LiveAccessRequests(control: control)
        ).add(to: router, authenticate: ConsoleSessionMiddleware(sessions: sessions, plainHTTP: configuration.listen.plainHTTP))
    }
    try parts.addRoutes(router, sessions, publisher)
    // Every lab machine reaches this listener, so the counters are for API tokens
    // (a `metrics` token for Prometheus); whether the server answers at all is /health's.
    let metrics = parts.metrics
    router.group("/metrics")
        .add(middleware: APITokenMiddleware(storage: parts.storage, permission: .viewMetrics, needsWholeSchool: true))
        .get { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: metrics.render())))
        }
    router.get("/health") { _, _ in
        Response(status: .ok, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: "ok\n")))
    }
    served.fill(from: router.routes)
    return router
}

/// A path the router serves, asked with a method it does not serve (any
/// method, `QUERY` and `PROPFIND` too), is answered 405 with the methods it
/// does serve in `Allow` (RFC 9110), not the router's 404, which would say
/// the path does not exist. The table is filled from the router's own routes
/// once they are all added, so no list of paths is kept twice.
struct MethodNotAllowedMiddleware: RouterMiddleware {
    typealias Context = ServerRequestContext

    final class ServedMethods: Sendable {
        private let byPath = Mutex<[String: Set<String>]>([:])

        func fill(from routes: [Router<ServerRequestContext>.RouteDescription]) {
            byPath.withLock { table in
                for route in routes { table[route.path.description, default: []].insert(route.method.rawValue) }
            }
        }

        /// The methods `path` is served with; nil for a path the router does not know.
        /// A route's `{parameter}` segment stands for any one segment of the path.
        func methods(for path: String) -> Set<String>? {
            byPath.withLock { table in
                if let exact = table[path] { return exact }
                let segments = path.split(separator: "/", omittingEmptySubsequences: false)
                var found: Set<String>? = nil
                for (route, methods) in table where route.contains("{") {
                    let pattern = route.split(separator: "/", omittingEmptySubsequences: false)
                    guard pattern.count == segments.count else { continue }
                    let matches = zip(pattern, segments).allSatisfy { part, segment in
                        (part.hasPrefix("{") && part.hasSuffix("}") && !segment.isEmpty) || part == segment
                    }
                    if matches { found = (found ?? []).union(methods) }
                }
                return found
            }
        }
    }

    let served: ServedMethods

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            let response = try await next(request, context)
            guard response.status == .notFound else { return response }
            try refuse(request)
            return response
        } catch let error as HTTPError where error.status == .notFound {
            try refuse(request)
            throw error
        }
    }

    private func refuse(_ request: Request) throws {
        guard let methods = served.methods(for: request.uri.path), !methods.contains(request.method.rawValue) else { return }
        let allow = methods.sorted().joined(separator: ", ")
        throw APIError(
            .methodNotAllowed, "method-not-allowed", "\(request.method.rawValue.prefix(20)) is not served here; use \(allow)",
            headers: [.allow: allow])
    }
}

/// hallpass-server as one application: the HTTP(S) listener and, under the
/// same service group, the storage engine and retention. `main` runs it;
/// tests build exactly the same.
public func buildApplication(configuration: ServerConfiguration, parts: ServerParts) throws -> some ApplicationProtocol {
    let server: HTTPServerBuilder
    if configuration.listen.plainHTTP {
        server = .http1()
    } else {
        guard let certificate = parts.certificate else {
            throw ServerError(code: "tls.missing", message: "HTTPS needs tls.certificate and tls.key; `hallpass-server init` makes a pair")
        }
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(certificate.certificatePEM.utf8)).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(bytes: Array(certificate.keyPEM.utf8), format: .pem)
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        tls.minimumTLSVersion = .tlsv12
        server = try .tls(.http1(), tlsConfiguration: tls)
    }
    let onListening = parts.onListening
    let ready = StorageReadiness()
    // The school's OpenID provider, when the console signs in through it: its
    // HTTPS client lives as long as the server and is shut down with it.
    let openID = try configuration.openID.map { try OpenIDClient.make(configuration: $0, store: StoredSignInStates(storage: parts.storage)) }
    var parts = parts
    let live: LiveChannel
    if let given = parts.live {
        live = given
    } else {
        let (key, made) = try LiveKey.loadOrMake(configuration: configuration)
        if made { parts.logger.notice("made the live key \(LiveKey.path(configuration: configuration)): \(key.publicText)") }
        live = LiveChannel(key: key)
        parts.live = live
    }
    var services: [any Service] = [
        StorageService(storage: parts.storage, ready: ready),
        RetentionService(
            storage: parts.storage, ready: ready, periods: configuration.retention, metrics: parts.metrics,
            logger: parts.logger, clock: parts.clock),
        LiveService(storage: parts.storage, ready: ready, channel: live, logger: parts.logger),
    ]
    // The alerts' worker starts once the schema is in place and, stopping
    // before the storage, finishes the attempt under way first.
    // Joined with the alerts of the ingest: `outbox:` the alerts table's
    // undispatched alerts, and the ingest's signal calling `wake()`.
    let delivery = try parts.delivery
        ?? AlertDeliveryService.make(
            configuration: configuration, storage: parts.storage, outbox: StoredAlertOutbox(storage: parts.storage), metrics: parts.metrics,
            logger: parts.logger, clock: parts.clock)
    services.append(AfterStorage(ready: ready, service: delivery))
    services.append(AlertWakeService(relay: AlertSignalRelay(signal: parts.alerts, delivery: delivery)))
    // The digests queue their emails in the same outbox and wake its worker
    // the way the ingest does; started after it, they stop before it.
    let signal = parts.alerts
    let digests = parts.digests
        ?? DigestService.make(
            configuration: configuration, storage: parts.storage, logger: parts.logger, clock: parts.clock, wake: { signal.poke() })
    services.append(AfterStorage(ready: ready, service: digests))
    if let openID { services.append(OpenIDClientService(client: openID)) }
    var app = Application(
        router: try buildRouter(configuration: configuration, parts: parts, openID: openID),
        server: server,
        configuration: .init(
            address: .hostname(configuration.listen.address, port: configuration.listen.port), serverName: "hallpass-server"),
        services: services.map { LoggedService(service: $0, logger: parts.logger) },
        onServerRunning: { channel in
            await onListening(channel.localAddress?.port ?? configuration.listen.port)
        },
        logger: parts.logger)
    // The listener opens once the storage service has the schema in place:
    // no request meets an old schema.
    app.beforeServerStarts {
        try await ready.wait()
    }
    return app
}

/// Runs `service` once the storage's schema is in place (a service that
/// is also used before the server runs, so does not wait by itself).
struct AfterStorage<Wrapped: Service>: Service {
    let ready: StorageReadiness
    let service: Wrapped

    func run() async throws {
        try await ready.wait()
        try await service.run()
    }
}

/// A service of the group, with its end logged (at debug): which of them
/// has not ended is what a stop that hangs needs to say, and the service
/// group says nothing of the services that end after it cancelled them.
struct LoggedService: Service, CustomStringConvertible {
    let service: any Service
    let logger: Logger

    var description: String { "\(type(of: service))" }

    func run() async throws {
        do {
            try await service.run()
            logger.debug("service ended", metadata: ["hallpass.service": "\(type(of: service))"])
        } catch {
            logger.debug("service ended: \(error)", metadata: ["hallpass.service": "\(type(of: service))"])
            throw error
        }
    }
}
