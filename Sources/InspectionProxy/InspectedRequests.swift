// What the proxy does with one request of an inspected connection, as
// values: the decision (VerdictCore's InspectionPlan, for the connection's
// person), the head that goes to the server, the head that goes back to the
// browser, the record for filter-control, the page for a blocked request.
// Pure, so the tests walk it without sockets.
public import BlockPage
public import HallpassIPC
public import NIOHTTP1
public import VerdictCore

/// What an inspected connection knows from its start.
public struct InspectedConnectionFacts: Sendable, Hashable {
    /// The name of the ClientHello, the one the connection's certificate is for.
    public var serverName: HostName
    /// The client's address and port to the original destination's (TCP), when both are known.
    public var flow: FlowKey?
    /// The person who opened the connection (nil: a system flow).
    public var uid: UInt32?

    public init(serverName: HostName, flow: FlowKey?, uid: UInt32?) {
        self.serverName = serverName
        self.flow = flow
        self.uid = uid
    }
}

/// The proxy's answer to one request head.
public struct InspectedOutcome: Sendable {
    /// The decision with its reason, the analysis, the search terms and the headers to set.
    public var decision: InspectedDecision
    /// Forward it to the server (else the block page answers).
    public var forwards: Bool
    /// The record for filter-control (the audit log).
    public var report: FlowReport
}

public enum InspectedRequests {
    /// The record kind of a request the proxy read (`AuditRecord.Kind.https`).
    public static let reportKind = "https"

    /// The request heads' bounds: the request line and each header at most
    /// 16 KiB, all headers together at most 64 KiB, at most 128 of them. A
    /// request past them is answered 400 (NIO's error handler) and the connection closed.
    public static let requestLimits: NIOHTTPDecoderLimitConfiguration = {
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = 16 * 1024
        limits.maxHeaderListSize = 64 * 1024
        limits.maxHeaderFieldCount = 128
        return limits
    }()

    /// The servers' response heads' bounds: wider (a page may set many cookies), still bounded.
    public static let responseLimits: NIOHTTPDecoderLimitConfiguration = {
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = 64 * 1024
        limits.maxHeaderListSize = 256 * 1024
        limits.maxHeaderFieldCount = 512
        return limits
    }()

    /// Decides a request head under `plan` and `engine` (the person's).
    ///
    /// The request is judged on its Host and target (InspectionPlan). A Host
    /// that is not the connection's own name is blocked: a browser sends one
    /// name on an HTTP/1.1 connection, and a request for another would be
    /// judged by a name the server behind the certificate may not serve
    /// (fronting). A CONNECT is blocked: nothing tunnels inside an inspected
    /// connection; so is a TRACE (see `upstreamHead` on framing). A decision
    /// that would wait for filter-control's lookup (`unknown: ask`) forwards:
    /// the connection's name was judged by filter-data before it reached the
    /// proxy, and no URL rule blocked it.
    public static func decide<Rules: RuleSource>(
        _ head: HTTPRequestHead, connection: InspectedConnectionFacts, plan: InspectionPlan, engine: VerdictEngine<Rules>
    ) -> InspectedOutcome {
        let hosts = head.headers["host"]
        // Exactly one Host: two could be read differently here and by the server.
        let host = hosts.count == 1 ? hosts[0] : ""
        let request = InspectedRequest(
            method: head.method.rawValue.utf8, host: host.utf8, target: head.uri.utf8, destination: connection.flow?.destination, uid: connection.uid)
        var decided = plan.decide(request, engine: engine)
        if decided.decision.verdict != .drop {
            if head.method == .CONNECT || head.method == .TRACE {
                // TRACE too: NIO's encoder sends a TRACE without framing headers, so a body the
                // browser gave one would reach the server as requests the proxy never decided.
                decided.decision = Decision(
                    .drop, Reason(source: .inspectBlock, category: "request", rule: "\(head.method.rawValue) inside an inspected connection"))
            } else if let named = decided.analysis.host, named != connection.serverName {
                decided.decision = Decision(
                    .drop,
                    Reason(source: .inspectBlock, category: "request", rule: "the Host (\(named)) is not the connection's name (\(connection.serverName))"))
            }
        }
        let forwards = decided.decision.verdict != .drop
        if !forwards { decided.headers = [] }
        // What waits for a lookup forwards, and is recorded as what it is: allowed.
        let verdict: Verdict = forwards ? .allow : .drop
        let flow = connection.flow ?? FlowKey(protocolNumber: 6, source: IPAddress("0.0.0.0")!, sourcePort: 0, destination: IPAddress("0.0.0.0")!, destinationPort: 443)
        let report = FlowReport(
            flow: flow, uid: connection.uid, kind: reportKind, host: decided.analysis.host?.description ?? connection.serverName.description,
            path: decided.analysis.path, verdict: verdict, reason: decided.decision.reason,
            searchTerm: decided.searchTerms.isEmpty ? nil : decided.searchTerms.joined(separator: " | "))
        return InspectedOutcome(decision: decided, forwards: forwards, report: report)
    }

    /// Headers that belong to one connection (RFC 9110 section 7.6.1), never passed on:
    /// `Connection` and the names it lists, and the old hop-by-hop names.
    /// `Upgrade` goes too: the proxy relays HTTP/1.1 requests, not the protocols a
    /// connection could switch to (WebSocket on an inspected host does not work).
    static let hopByHop: Set<String> = ["connection", "keep-alive", "proxy-connection", "te", "upgrade", "proxy-authorization", "proxy-authenticate"]

    static func withoutHopByHop(_ headers: HTTPHeaders) -> HTTPHeaders {
        var named = hopByHop
        for value in headers["connection"] {
            for token in value.split(separator: ",") {
                let name = token.trimmingCharacters(in: .whitespaces).lowercased()
                // A client cannot make the framing or the Host hop-by-hop.
                if !name.isEmpty, name != "host", name != "content-length", name != "transfer-encoding" { named.insert(name) }
            }
        }
        var result = HTTPHeaders()
        for (name, value) in headers where !named.contains(name.lowercased()) {
            result.add(name: name, value: value)
        }
        return result
    }

    /// The head sent to the server: HTTP/1.1, the browser's headers less the
    /// hop-by-hop ones, with the plan's header fields set (any the browser
    /// sent of the same names replaced).
    ///
    /// The body's framing is written again as the proxy read it: a request
    /// with any `Transfer-Encoding` was read chunked (NIO's parser accepts one
    /// only when chunked is its last coding), so it goes on as `Transfer-Encoding:
    /// chunked` alone, without `Content-Length`. Passed on as the browser wrote it,
    /// `gzip, chunked` made NIO's encoder send the decoded body bare under a header
    /// that tells the server it is chunked: a body holding `0`, an empty line
    /// and a request smuggled that request past the proxy's decision.
    public static func upstreamHead(_ head: HTTPRequestHead, setting fields: [HeaderField]) -> HTTPRequestHead {
        var headers = withoutHopByHop(head.headers)
        if headers.contains(name: "transfer-encoding") {
            headers.remove(name: "transfer-encoding")
            headers.remove(name: "content-length")
            headers.add(name: "Transfer-Encoding", value: "chunked")
        }
        for field in fields {
            headers.remove(name: field.name)
            headers.add(name: field.name, value: field.value)
        }
        return HTTPRequestHead(version: .http1_1, method: head.method, uri: head.uri, headers: headers)
    }

    /// The head sent back to the browser: the server's status and headers less
    /// the hop-by-hop ones and `Alt-Svc` (which would send the browser to
    /// HTTP/3, whose UDP the kernel drops for these addresses), in the
    /// browser's HTTP version, `Connection: close` when the browser's
    /// connection ends after it.
    public static func browserHead(_ head: HTTPResponseHead, version: HTTPVersion, keepAlive: Bool) -> HTTPResponseHead {
        var headers = withoutHopByHop(head.headers)
        headers.remove(name: "alt-svc")
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        return HTTPResponseHead(version: version, status: head.status, headers: headers)
    }

    /// Whether the server keeps its connection open after this response.
    static func serverKeepsAlive(_ head: HTTPResponseHead) -> Bool {
        head.isKeepAlive
    }

    /// What the browser is told about a blocked request (or one whose server
    /// could not be checked): the block page, in the school's name.
    public static func blockedRequest(_ outcome: InspectedOutcome, serverName: HostName) -> BlockedRequest {
        let reason = outcome.decision.decision.reason
        let host = outcome.decision.analysis.host?.description ?? serverName.description
        let url = outcome.decision.analysis.url ?? "https://\(host)/"
        let shown = reason.category == certificateCategory ? certificateText : reason.description
        return BlockedRequest(host: host, url: url, category: reason.category, rule: reason.rule, reason: shown, inspected: true)
    }

    /// The category of a request whose server's certificate did not verify (or whose TLS handshake failed).
    public static let certificateCategory = "certificate"
    /// What the block page says of it.
    public static let certificateText = "the site's certificate could not be checked"

    /// The outcome of a forwarded request whose server could not be checked: blocked, with `detail` as the rule.
    public static func certificateFailure(_ outcome: InspectedOutcome, detail: String) -> InspectedOutcome {
        var failed = outcome
        failed.decision.decision = Decision(.drop, Reason(source: .inspectBlock, category: certificateCategory, rule: detail))
        failed.decision.headers = []
        failed.forwards = false
        failed.report.verdict = .drop
        failed.report.reason = failed.decision.decision.reason
        return failed
    }

    /// A response for `page` (the block page's), framed for `version`.
    public static func responseHead(for page: BlockPageResponse, version: HTTPVersion, keepAlive: Bool) -> HTTPResponseHead {
        var headers = HTTPHeaders(page.headers.map { ($0.name, $0.value) })
        headers.add(name: "Content-Length", value: String(page.body.count))
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        return HTTPResponseHead(version: version, status: HTTPResponseStatus(statusCode: page.status), headers: headers)
    }
}
