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
        guard case .success(let state) = LiveState.verify(envelope, policy: school.live, machine: "m-fuzz", held: LiveState.Order(issued: 0, sequence: 0), now: 1_764_360_000)
        else { return }
        require(state.machine == "m-fuzz" && state.sequence > 0, "a state for another machine or an old sequence verified")
        require(state.items.count <= LiveState.maximumItems, "more items than the bound")
        let bounds = LiveBounds(policy: school) { pattern in pattern.description.contains("adult") ? "adult" : nil }
        let outcome = bounds.check(state, now: 1_764_360_000)
        require(outcome.accepted.count + outcome.refused.count == state.items.count, "an item was neither accepted nor refused")
        for item in outcome.accepted {
            require(item.until > 1_764_360_000 && item.until - item.from <= LivePolicy.defaultLongestSeconds, "an item outside the bounds")
            if item.action == .allow || item.action == .focus {
                require(!item.targets.contains { $0.contains("adult") }, "an allow of a locked target was accepted")
            }
        }
    }
}
