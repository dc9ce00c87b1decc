// The fuzz target for the live state a machine reads from the school's
// server (issue 30, docs/fleet.md "The live channel"): the signed envelope,
// and the payload behind a valid signature, through LiveState and LiveBounds.
import Crypto
import FilterControl
import Foundation
import VerdictCore

enum LiveFuzzing {
    /// A fixed key, so that inputs signed with it reach the payload and the items' bounds.
    static let key = try! Curve25519.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 7, count: 32))
    static let school: SchoolPolicy = {
        var school = SchoolPolicy(groups: [PolicyGroup(name: "year9", members: GroupMembers(unixGroups: ["year9"]))], locked: ["adult"])
        school.live = LivePolicy(keys: [Array(key.publicKey.rawRepresentation)], actions: Set(LiveAction.allCases), rooms: ["lab1"])
        return school
    }()

    /// An even first byte: the rest is a payload, signed and put in an envelope; odd: the rest is the envelope itself.
    static func run(_ input: [UInt8]) {
        guard let first = input.first else { return }
        let rest = Array(input.dropFirst())
        let envelope: [UInt8]
        if first & 1 == 0 {
            guard let signature = try? key.signature(for: rest) else { return }
            let text =
                #"{"payload":""# + Data(rest).base64EncodedString() + #"","signature":""# + signature.base64EncodedString()
                + #"","key":"ed25519:"# + Data(key.publicKey.rawRepresentation).base64EncodedString() + #""}"#
            envelope = Array(text.utf8)
        } else {
            envelope = rest
        }
        let held = LiveState.Order(issued: 0, sequence: 0)
        guard case .success(let state) = LiveState.verify(envelope, policy: school.live, machine: "m-fuzz", held: held, now: 1_764_360_000)
        else { return }
        // States are ordered by (issued, sequence): a sequence of 0 is after the one held when issued is later.
        require(state.machine == "m-fuzz", "a state for another machine verified")
        require(state.sequence >= 0 && state.issued >= 0, "a negative sequence or time verified")
        require(state.order > held && state.issued <= 1_764_360_000 + LiveState.issuedAheadLimit, "a state not after the one held verified")
        require(state.items.count <= LiveState.maximumItems, "more items than the bound")
        let bounds = LiveBounds(policy: school) { pattern in pattern.description.contains("adult") ? "adult" : nil }
        let outcome = bounds.check(state, now: 1_764_360_000)
        require(outcome.accepted.count + outcome.refused.count == state.items.count, "an item was neither accepted nor refused")
        for item in outcome.accepted {
            require(item.from >= 0 && item.from <= item.until, "an item with times out of order verified")
            require(item.until > 1_764_360_000 && item.until - item.from <= LivePolicy.defaultLongestSeconds, "an item outside the bounds")
            require(
                item.until <= 1_764_360_000 + LivePolicy.defaultLongestSeconds + LiveState.issuedAheadLimit, "an item in force longer than the bounds")
            if item.action == .allow || item.action == .focus {
                require(!item.targets.contains { $0.contains("adult") }, "an allow of a locked target was accepted")
            }
        }
    }
}
