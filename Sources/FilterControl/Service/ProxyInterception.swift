import BlockPage
import Foundation
import HallpassIPC
import Logging
import Synchronization
import VerdictCore

/// The interception CA as filter-control keeps it for hallpass-proxy: made
/// (or made again) for the names the school's policy inspects, and handed to
/// the proxy over its control channel at each of its starts (the supervisor's
/// greeting) and whenever it changes. The key stays in root's 0600 file and
/// in the two processes' memory: the proxy's user can read no file of it.
final class ProxyInterception: Sendable {
    private let message = Mutex<ControlCommand?>(nil)

    init() {}

    /// What a new proxy is told before anything else: the CA, when there is one.
    var greeting: [ControlCommand] { message.withLock { $0.map { [$0] } ?? [] } }

    var current: ControlCommand? { message.withLock { $0 } }

    /// Makes the CA ready for `school`'s inspected names (nothing when it
    /// inspects none) and keeps its hand-over; returns the hand-over when it
    /// changed, for the running proxy. Problems are logged: without a CA the
    /// proxy refuses the inspected names, which fails closed.
    func prepare(configuration: Configuration, school: SchoolPolicy, logger: Logger) -> ControlCommand? {
        let names = InspectionPlan.constraintNames(school.audiences.map { school.inspection(for: $0) })
        guard !names.isEmpty else { return nil }
        let folder = configuration.proxy.ca
        let authority: InterceptionAuthority
        do {
            let (prepared, outcome) = try InterceptionAuthority.prepare(folder: folder, names: names, organization: configuration.blockPage.organization)
            authority = prepared
            switch outcome {
            case .kept:
                break
            case .made:
                logger.notice(
                    "made the interception CA in \(folder) for \(names.joined(separator: ", ")) (SHA-256 \(authority.fingerprint)); run 'filterctl browser-policies install' so the browsers trust it",
                    metadata: ["hallpass.code": "intercept-ca.made"])
            case .replaced(let why):
                logger.error(
                    "made a new interception CA in \(folder) (\(why)) for \(names.joined(separator: ", ")) (SHA-256 \(authority.fingerprint)); browsers show a certificate error for inspected sites until 'filterctl browser-policies install' gives them the new one",
                    metadata: ["hallpass.code": "intercept-ca.replaced"])
            }
        } catch {
            logger.error("no interception CA, inspected sites are refused: \(error.message)", metadata: ["hallpass.code": "\(error.code)"])
            return nil
        }
        // hallpass's own CAs never make a server trusted: this one, and the block page's.
        var untrusted = [authority.keyHash]
        if let pem = try? String(contentsOfFile: configuration.blockPage.ca + "/" + LocalCertificateAuthority.certificateFile, encoding: .utf8),
            let blockPageKey = InterceptionAuthority.keyHash(ofPEM: pem)
        {
            untrusted.append(blockPageKey)
        }
        let (key, certificate) = authority.handover
        let handover = InterceptionHandover(key: key, certificate: certificate, untrustedKeys: untrusted)
        guard handover.fits else {
            logger.error(
                "the interception CA for \(names.count) names is too large for the proxy's control channel; inspected sites are refused (inspect fewer names)",
                metadata: ["hallpass.code": "intercept-ca.too-large"])
            return nil
        }
        let command = ControlCommand.interception(handover)
        return message.withLock { held in
            guard held != command else { return nil }
            held = command
            return command
        }
    }
}
