import BlockPage
import Foundation
import Logging
import SharedStore
import VerdictCore

/// The block page as filter-control runs it: listeners, the school's page,
/// the local CA, and the backend that says why a page is blocked (with the
/// visitor's own policy) and records access requests.
enum BlockPageSetup {
    static func settings(_ configuration: Configuration) -> BlockPageSettings {
        let access: RequestAccess? = configuration.blockPage.requestAccess.map {
            $0.url == "builtin" ? .builtIn(text: $0.text) : .link(text: $0.text, urlTemplate: $0.url)
        }
        return BlockPageSettings(
            organization: configuration.blockPage.organization, requestAccess: access, templateFolder: configuration.blockPage.templates,
            defaultLanguage: configuration.blockPage.language)
    }

    static func responder(configuration: Configuration, control: Control) throws(BlockPageError) -> BlockPageResponder {
        let renderer = try BlockPageRenderer(settings: settings(configuration))
        let page = configuration.blockPage
        let own: Set<String> = [page.address, page.address6, "localhost"]
        let backend = PageBackend(control: control, limits: configuration.blockPage.requestAccess?.perUser ?? AccessRequestStore.Limits())
        return BlockPageResponder(renderer: renderer, backend: backend, ownNames: own)
    }

    /// Listens where people are sent: the page's own address (`blockPage.port`,
    /// by default 80, the same listener as `httpPort`), and with DNS
    /// rewriting ports 80 and 443 of both block page addresses (443 with the
    /// local CA; without one, HTTPS starts on the first reload that finds
    /// it). A `port` at or above `unprivilegedPortStart` (one a local user
    /// could take while filter-control is down) is not listened on: the
    /// page's own address is served on `httpPort` instead (`pagePort`);
    /// `httpPort` and `httpsPort` are served wherever they are, since
    /// rewritten DNS answers send browsers there (Control logged each such
    /// port at start). A listener that cannot bind is logged; filtering goes on without it.
    static func start(
        configuration: Configuration, unprivilegedPortStart: Int, control: Control, logger: Logger
    ) throws(Control.StartError) -> BlockPageServer {
        let responder: BlockPageResponder
        do {
            responder = try self.responder(configuration: configuration, control: control)
        } catch {
            throw Control.StartError(message: "blockPage: \(error.message) [\(error.code)]", status: 78)
        }
        let page = configuration.blockPage
        let pagePort = page.pagePort(unprivilegedPortStart: unprivilegedPortStart)
        var listeners = [BlockPageServer.Listener(address: page.address, port: Int(pagePort), tls: false)]
        var authority: LocalCertificateAuthority? = nil
        if configuration.policy.dnsRewrite != nil {
            do {
                authority = try LocalCertificateAuthority(folder: page.ca)
            } catch {
                logger.info("block page: no HTTPS until a reload finds the local CA (\(error.message))")
            }
            for address in [page.address, page.address6] {
                if address != page.address || page.httpPort != pagePort {
                    listeners.append(.init(address: address, port: Int(page.httpPort), tls: false))
                }
                listeners.append(.init(address: address, port: Int(page.httpsPort), tls: true))
            }
        }
        let server = BlockPageServer(responder: responder) { event in
            switch event {
            case .authorityReplaced(let fingerprint):
                logger.notice("block page: a new local CA in \(page.ca) (SHA-256 \(fingerprint)); HTTPS certificates come from it now")
            case .authorityUnusable(let error):
                logger.warning("block page: \(error.message); HTTPS keeps the CA it has")
            }
        }
        // Without a CA the HTTPS listeners wait; the line above said why.
        for problem in server.start(listeners, authority: authority) where problem.code != "ca.missing" {
            logger.warning("block page: \(problem.message)")
        }
        logger.info("block page on \(server.listening.isEmpty ? "nothing" : server.listening.joined(separator: ", "))")
        return server
    }

    /// On reload: the local CA in `blockPage.ca` for HTTPS (a new one
    /// replaces the one in use; a first one starts the HTTPS listeners).
    static func reloadAuthority(configuration: Configuration, server: BlockPageServer?, logger: Logger) {
        guard configuration.policy.dnsRewrite != nil, let server else { return }
        let authority: LocalCertificateAuthority
        do {
            authority = try LocalCertificateAuthority(folder: configuration.blockPage.ca)
        } catch {
            if server.servesHTTPS { logger.warning("block page: \(error.message); HTTPS keeps the CA it has") }
            return
        }
        let change = server.useAuthority(authority)
        if change.replaced {
            logger.notice("block page: HTTPS certificates come from the local CA in \(configuration.blockPage.ca) now (SHA-256 \(authority.fingerprint))")
        }
        if !change.started.isEmpty { logger.info("block page on \(change.started.joined(separator: ", "))") }
        for problem in change.problems { logger.warning("block page: \(problem.message)") }
    }
}

/// The block page's view of filter-control: reads the policy set in force
/// from the snapshot (on the page's event loops, no actor hop) and records
/// access requests in the store, within the per-person limits.
private struct PageBackend: BlockPageBackend {
    let control: Control
    let limits: AccessRequestStore.Limits

    /// Made once per filter-control run (`Control.formTokens`): a reload keeps open pages' tokens good.
    var formTokens: RequestFormTokens { control.formTokens }

    func explain(host: String, url: String, user: String?) -> BlockedRequest {
        let view = control.pageView.withLock { $0 }
        var blocked = BlockedRequest(host: host, url: url, user: user)
        if let request = control.requests.latest(host: host, user: user) {
            let state: AccessRequestStatus.State =
                switch request.state {
                case .pending: .pending
                case .approved: .approved
                case .denied: .denied
                }
            blocked.accessRequest = AccessRequestStatus(id: request.id, state: state, message: request.message)
        }
        // The visitor's own policy: the block page found the socket's owner.
        let uid = user.flatMap { UserDirectory().uid(named: $0) ?? UInt32($0) }
        let engine = view.engines.engine(for: uid) ?? view.engines.fallback
        let target = url.isEmpty ? host : url
        if let parsed = try? CheckTarget(utf8: Array(target.utf8)[...]) {
            let reason = engine.decide(parsed.facts).reason
            blocked.category = reason.category
            blocked.rule = reason.rule
            blocked.reason = reason.description
            if reason.source == .exam {
                let until = engine.policy.exam?.until.map { view.clock.describe(Date(timeIntervalSince1970: TimeInterval($0))) }
                let by = view.live.first { $0.action == .exam && $0.until == engine.policy.exam?.until }?.by
                blocked.reason =
                    "an exam" + (by.map { " set by \($0)" } ?? "") + " is in force" + (until.map { " until \($0)" } ?? "")
                    + "; only the exam's list can be reached"
            }
            if let live = BlockPageSetup.liveExplanation(reason, policy: engine.policy, live: view.live, clock: view.clock) { blocked.reason = live }
        }
        // Nothing opens a name in a locked category (the school's locked:), so no request is offered for it.
        if BlockPageSetup.lockedCategory(host: host, category: blocked.category, locked: view.locked, rules: engine.rules) != nil {
            blocked.offersRequest = false
        }
        return blocked
    }

    func submit(_ form: AccessRequestForm, user: String?) -> Result<String, BlockPageError> {
        // The page offers no form for a locked name; a form posted all the same is refused.
        let view = control.pageView.withLock { $0 }
        if let category = BlockPageSetup.lockedCategory(host: form.host, category: form.category, locked: view.locked, rules: view.engines.rules) {
            control.logger.warning("access request refused: \(form.host) is in \(category), a locked category")
            return .failure(BlockPageError(code: "requests.locked", message: "\(form.host) is in \(category), a locked category, which nothing may open"))
        }
        do {
            // The school's policy group the user was placed in (as the records name it), for the console's scope.
            let uid = user.flatMap { UserDirectory().uid(named: $0) ?? UInt32($0) }
            let group = uid.flatMap { uid in control.groupNames.names.withLock { $0[uid] } }
            let request = try control.requests.submit(
                host: form.host, url: form.url, category: form.category, reason: form.reason, user: user, group: group, limits: limits)
            control.logger.notice(
                "access request", metadata: ["hallpass.request": "\(request.id)", "hallpass.host": "\(request.host)", "hallpass.user": "\(user ?? "-")"])
            return .success(request.id)
        } catch {
            control.logger.warning("access request refused: \(error.message)")
            return .failure(BlockPageError(code: error.code, message: error.message))
        }
    }
}

extension BlockPageSetup {
    /// The locked category (`locked:` in the school's policy) that `host`
    /// is in, if any: the category that blocked it, or the one a rule of
    /// the store in force puts it in (a name blocked by a focus or a pause
    /// is judged by its own category too). A category a posted form
    /// carries is the browser's word: it can refuse, never open.
    static func lockedCategory(host: String, category: String?, locked: Set<String>, rules: RuleStore) -> String? {
        guard !locked.isEmpty else { return nil }
        if let category, locked.contains(category) { return category }
        guard let pattern = try? RulePattern(host) else { return nil }
        return Control.lockedCategory(store: rules, locked: locked)(pattern)
    }

    /// Who set the live item behind a block, and until when: a focus, a pause, a block.
    static func liveExplanation(_ reason: Reason, policy: Policy, live: [LiveItem], clock: PolicyClock) -> String? {
        func until(_ seconds: Int64) -> String { clock.describe(Date(timeIntervalSince1970: TimeInterval(seconds))) }
        switch reason.source {
        case .focus:
            guard let focus = policy.focus else { return nil }
            let item = live.first { ($0.action == .focus || $0.action == .pause) && $0.until == focus.until }
            let by = item.map { " by \($0.by)" } ?? ""
            if focus.allow.isEmpty { return "the internet is paused\(by) until \(until(focus.until))" }
            return "a focus is set\(by) until \(until(focus.until)): only its sites can be reached"
        case .overrideBlock:
            guard let rule = reason.rule, let item = live.first(where: { $0.action == .block && $0.targets.contains(rule) }) else { return nil }
            return "blocked by \(item.by) until \(until(item.until)) (rule \(rule))"
        default:
            return nil
        }
    }
}
