// The proxy's side of its control channel with filter-control: the same
// messages as filter-data's (HallpassIPC), of which it takes the rules and
// policy hand-overs, the placements of users, the health checks and the
// interception CA, and asks which group a user is in.
import FilterData
public import HallpassIPC
import SharedStore
import VerdictCore

extension ProxyState {
    /// Applies one message from filter-control; the answer to send, if any.
    /// `log` gets what the proxy's log says about it (the CA taken or refused).
    public func apply(_ message: ControlCommand, log: (String) -> Void = { _ in }) -> DataEvent? {
        switch message {
        case .useRules(let store, let policy):
            return load(store: store, policy: policy)
        case .usePolicy(let policy):
            return load(store: nil, policy: policy)
        case .userPlacement(let uid, let audience):
            place(uid: uid, in: audience)
            return nil
        case .ping(let number):
            // The health check's answer. The counters are filter-data's kind (its one
            // decoder); the proxy fills in its rules version, and says its own
            // counters in its log (`ProxyCounters.summary`).
            var counters = FilterDataCounters()
            counters.rulesVersion = rulesVersion
            return .pong(number, counters: counters)
        case .answer, .noAnswer:
            // needRules answers are filter-data's: the proxy asks about no name.
            return nil
        case .interception(let handover):
            do {
                let interception = try Interception(handover: handover, trustRoots: trustRoots) { [weak self] name in
                    self?.someoneInspects(name) ?? false
                }
                use(interception)
                log(
                    "interception CA \(interception.leaves.authority.fingerprint) in use (names: \(interception.leaves.authority.permittedNames.joined(separator: ", "))); "
                        + "servers are checked against \(trustRoots.count - interception.untrustedRootsLeftOut) certificates of the trust store"
                        + (interception.untrustedRootsLeftOut > 0 ? ", \(interception.untrustedRootsLeftOut) of hallpass's own left out" : ""))
            } catch {
                // The CA in use (if any) stays; without one, inspected names stay refused.
                log("the interception CA filter-control handed over cannot be used: \(error)")
            }
            return nil
        }
    }

    /// New engines, as filter-data takes them: refused, the old ones stay.
    private func load(store: String?, policy: String) -> DataEvent {
        do {
            let engines = try current.replacing(store: store, policy: policy)
            // The users placed so far keep their groups (a new set carries the ones filter-control knew).
            replace(engines)
            return .rulesLoaded(version: engines.rules.version)
        } catch {
            return .rulesRefused(code: error.code, message: error.description)
        }
    }
}
