import Foundation
import Hummingbird
import NIOCore

/// The safeguarding digests in the console (docs/console.md, "Digests"):
/// the digests made, newest first (when, to whom, which period, whether the
/// email went), and a preview of the digest of the signed-in person's own
/// scope so far, as the HTML email and as its PDF, made by the same
/// `DigestService.document` that sends them. For the admin and the
/// safeguarding lead (`viewDigests`).
extension ConsoleRoutes {
    static let digestsShown = 200

    func addDigests(to console: RouterGroup<ServerRequestContext>) {
        console.get("digests") { request, context in try await page(request, context, .viewDigests) { try await digests($0, $1) } }
        console.get("digests/preview") { request, context in
            try await page(request, context, .viewDigests) { try await digestPreview(request, $0, $1, pdf: false) }
        }
        console.get("digests/preview.pdf") { request, context in
            try await page(request, context, .viewDigests) { try await digestPreview(request, $0, $1, pdf: true) }
        }
    }

    func digests(_ principal: Principal, _ viewer: ConsoleViewer) async throws -> Response {
        let t = renderer.table(viewer)
        let rows = try await storage.sentDigests(limit: Self.digestsShown).map { sent in
            let claim = sent.claim
            let first = time.day(claim.period.lowerBound)
            let last = time.day(max(claim.period.lowerBound, claim.period.upperBound - 1))
            let state = sent.state?.rawValue ?? "removed"
            return DigestsPage.Row(
                made: time.dateTime(claim.createdAt * 1000), kind: t[Self.stringKey("digestKind", claim.kind.rawValue)] ?? claim.kind.rawValue,
                period: first == last ? first : "\(first) – \(last)", login: claim.login, address: claim.address, state: state,
                stateLabel: t[Self.stringKey("digestState", state)] ?? state, sent: sent.sentAt.map { time.dateTime($0 * 1000) } ?? "",
                error: sent.lastError ?? "")
        }
        let model = DigestsPage(
            timeZoneNote: ConsoleText.fill(t["timeZoneNote"] ?? "", ["zone": time.zoneName]), scopeText: scopeNote(principal.scope, t),
            rows: rows, hasRows: !rows.isEmpty,
            previews: DigestKind.allCases.map {
                DigestsPage.Preview(
                    label: t[Self.stringKey("digestPreview", $0.rawValue)] ?? $0.rawValue, html: "/console/digests/preview?kind=\($0.rawValue)",
                    pdf: "/console/digests/preview.pdf?kind=\($0.rawValue)", kind: $0.rawValue)
            })
        return renderer.response("digests", title: t["titleDigests"] ?? "", page: model, viewer: viewer, current: .digests)
    }

    /// The digest so far of `kind=` (weekly unless it says daily) for the
    /// signed-in person's scope: the email's HTML as the recipient sees it
    /// (a page of its own, with its own styles and nothing else allowed), or its PDF.
    func digestPreview(_ request: Request, _ principal: Principal, _ viewer: ConsoleViewer, pdf: Bool) async throws -> Response {
        var kind = DigestKind.weekly
        if let asked = ConsoleForm(request.uri.query ?? "")?["kind"] {
            guard let chosen = DigestKind(rawValue: asked) else {
                return renderer.message(status: .badRequest, titleKey: "titleRefused", messageKey: "errorForm", viewer: viewer)
            }
            kind = chosen
        }
        guard let document = try await digestService.preview(kind, for: principal, now: clock()) else { return renderer.notFound(viewer) }
        if pdf {
            return Response(
                status: .ok,
                headers: [
                    .contentType: "application/pdf", .contentDisposition: "inline; filename=\"\(document.pdfName)\"", .cacheControl: "no-store",
                    .xContentTypeOptions: "nosniff",
                ],
                body: .init(byteBuffer: ByteBuffer(bytes: document.pdf)))
        }
        return Response(
            status: .ok,
            headers: [
                .contentType: "text/html; charset=utf-8", .cacheControl: "no-store", .xContentTypeOptions: "nosniff",
                .contentSecurityPolicy: "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
                .referrerPolicy: "same-origin",
            ],
            body: .init(byteBuffer: ByteBuffer(string: document.html)))
    }
}

/// The digests page's model.
struct DigestsPage {
    struct Row {
        let made: String
        let kind: String
        let period: String
        let login: String
        let address: String
        let state: String
        let stateLabel: String
        let sent: String
        let error: String
    }

    struct Preview {
        let label: String
        let html: String
        let pdf: String
        let kind: String
    }

    let timeZoneNote: String
    let scopeText: String?
    let rows: [Row]
    let hasRows: Bool
    let previews: [Preview]
}
