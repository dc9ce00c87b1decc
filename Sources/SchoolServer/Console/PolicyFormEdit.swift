import Foundation
import Yams

/// The keys the console's policy form edits, for one level of the school's
/// policy (the top-level `policy:` or one group's `policy.groups.NAME`), as
/// the file spells them. A key the level does not set is nil: a group then
/// inherits the top level's, and the top level has the machines' default.
struct PolicyLevelKeys: Sendable, Hashable {
    enum Block: Sendable, Hashable {
        /// `block: all`.
        case all
        /// `block: [names]`, in the file's order.
        case only([String])
    }

    var block: Block?
    /// `unknown: allow | block | ask`, as written (the validator judges the word).
    var unknown: String?
    /// `safeSearch:` engines; `none` is the empty list.
    var safeSearch: [String]?

    /// The same keys in force: the top level's unset keys are the same as
    /// blocking nothing and no SafeSearch.
    func sameEffect(as other: PolicyLevelKeys, topLevel: Bool) -> Bool {
        func blockSet(_ block: Block?) -> Set<String>? {
            switch block {
            case .all: ["\u{0}all"]
            case .only(let names): Set(names.map { $0.lowercased() })
            case nil: topLevel ? [] : nil
            }
        }
        func engines(_ list: [String]?) -> Set<String>? { list.map(Set.init) ?? (topLevel ? [] : nil) }
        return blockSet(block) == blockSet(other.block) && unknown == other.unknown && engines(safeSearch) == engines(other.safeSearch)
    }
}

/// What the form shows and posts: the top level's keys and each group's, in
/// the order of the file's `groups:`.
struct PolicyFormValues: Sendable, Hashable {
    var topLevel: PolicyLevelKeys
    var groups: [(name: String, keys: PolicyLevelKeys)]

    static func == (a: PolicyFormValues, b: PolicyFormValues) -> Bool {
        a.topLevel == b.topLevel && a.groups.map(\.name) == b.groups.map(\.name) && a.groups.map(\.keys) == b.groups.map(\.keys)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(topLevel)
        for group in groups {
            hasher.combine(group.name)
            hasher.combine(group.keys)
        }
    }
}

/// Reads the form's keys out of a policy file and writes them back into it,
/// changing only those keys: the document is parsed as a YAML node tree, the
/// level's mapping edited in place (a changed key keeps its place, a new one
/// goes last) and the tree serialized again. Serializing loses the file's
/// comments (libyaml's tree has none); every other key and its order stay.
enum PolicyFormEdit {
    /// The form's keys in `yaml` (nil or blank: an empty policy file), and the
    /// category names the policy's `block` lists name anywhere.
    static func read(yaml: String?) throws(PublishingError) -> (values: PolicyFormValues, named: Set<String>) {
        let root = try mapping(yaml)
        let policy = root?["policy"]?.mapping
        let groupLevels = policy?["groups"]?.mapping
        var groups: [(name: String, keys: PolicyLevelKeys)] = []
        for key in root?["groups"]?.mapping?.keys ?? Node.Mapping([]).keys {
            guard let name = key.string else { continue }
            groups.append((name, keys(groupLevels?[name]?.mapping)))
        }
        var named: Set<String> = []
        if let policy { collectBlocked(.mapping(policy), into: &named) }
        return (PolicyFormValues(topLevel: keys(policy), groups: groups), named)
    }

    /// `yaml` with the form's keys set to `values` (groups the file no longer
    /// has are refused); the text unchanged when they change nothing.
    static func apply(_ values: PolicyFormValues, to yaml: String?) throws(PublishingError) -> String {
        var root = try mapping(yaml) ?? Node.Mapping([])
        let known = Set((root["groups"]?.mapping?.keys ?? Node.Mapping([]).keys).compactMap(\.string))
        for group in values.groups where !known.contains(group.name) {
            throw PublishingError(
                .invalid, "policy-invalid",
                "groups.\(group.name.prefix(80)): the policy has no such group any more (it changed meanwhile); open the policy page again")
        }
        var policy = root["policy"]?.mapping ?? Node.Mapping([])
        var changed = set(values.topLevel, in: &policy, topLevel: true)
        var groupLevels = policy["groups"]?.mapping ?? Node.Mapping([])
        var groupsChanged = false
        for group in values.groups {
            var level = groupLevels[group.name]?.mapping ?? Node.Mapping([])
            if set(group.keys, in: &level, topLevel: false) {
                groupLevels[group.name] = .mapping(level)
                groupsChanged = true
            }
        }
        if groupsChanged {
            policy["groups"] = .mapping(groupLevels)
            changed = true
        }
        guard changed else { return yaml ?? "" }
        root["policy"] = .mapping(policy)
        do {
            return try Yams.serialize(node: .mapping(root), indent: 2, width: -1, allowUnicode: true)
        } catch {
            throw PublishingError(.failed, "policy-invalid", "the policy file could not be written again: \(error)")
        }
    }

    // MARK: Reading

    private static func mapping(_ yaml: String?) throws(PublishingError) -> Node.Mapping? {
        guard let yaml, !yaml.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { return nil }
        let node: Node?
        do {
            node = try Yams.compose(yaml: yaml)
        } catch {
            throw PublishingError(.invalid, "policy-invalid", "the policy file is not YAML the form can read; edit it as YAML: \(error)")
        }
        guard let node else { return nil }
        guard let mapping = withStyles(node, of: yaml).mapping else {
            throw PublishingError(.invalid, "policy-invalid", "the policy file is not a mapping of keys; edit it as YAML")
        }
        return mapping
    }

    /// `node` with each list and mapping written as the file writes it,
    /// `[a, b]` or one item a line. Yams 6 takes a collection's style from
    /// its end event, which has none, so a parsed tree would be written back
    /// all in block style; the start mark says where the collection begins
    /// in the text, and a flow collection begins with its bracket there.
    static func withStyles(_ node: Node, of yaml: String) -> Node {
        let lines = yaml.split(separator: "\n", omittingEmptySubsequences: false).map { Array($0.unicodeScalars) }
        func opens(_ mark: Mark?, with bracket: Unicode.Scalar) -> Bool {
            guard let mark, mark.line >= 1, mark.line <= lines.count, mark.column >= 1, mark.column <= lines[mark.line - 1].count else {
                return false
            }
            return lines[mark.line - 1][mark.column - 1] == bracket
        }
        func restyle(_ node: Node) -> Node {
            switch node {
            case .sequence(var sequence):
                sequence.style = opens(sequence.mark, with: "[") ? .flow : .block
                sequence = Node.Sequence(sequence.map(restyle), sequence.tag, sequence.style, sequence.mark, sequence.anchor)
                return .sequence(sequence)
            case .mapping(let mapping):
                let style: Node.Mapping.Style = opens(mapping.mark, with: "{") ? .flow : .block
                return .mapping(Node.Mapping(mapping.map { (restyle($0.key), restyle($0.value)) }, mapping.tag, style, mapping.mark, mapping.anchor))
            case .scalar, .alias: return node
            }
        }
        return restyle(node)
    }

    private static func keys(_ level: Node.Mapping?) -> PolicyLevelKeys {
        guard let level else { return PolicyLevelKeys() }
        var keys = PolicyLevelKeys()
        if let block = level["block"] {
            if let text = block.string, text == "all" {
                keys.block = .all
            } else {
                keys.block = .only(block.sequence?.compactMap(\.string) ?? [])
            }
        }
        keys.unknown = level["unknown"]?.string
        if let engines = level["safeSearch"] {
            if let text = engines.string {
                keys.safeSearch = text == "none" || text.isEmpty ? [] : [text]
            } else {
                keys.safeSearch = engines.sequence?.compactMap(\.string) ?? []
            }
        }
        return keys
    }

    private static func collectBlocked(_ node: Node, into names: inout Set<String>) {
        switch node {
        case .mapping(let mapping):
            for (key, value) in mapping {
                if key.string == "block", let list = value.sequence {
                    for item in list { if let name = item.string?.lowercased(), name != "all" { names.insert(name) } }
                } else {
                    collectBlocked(value, into: &names)
                }
            }
        case .sequence(let sequence):
            for item in sequence { collectBlocked(item, into: &names) }
        case .scalar, .alias: break
        }
    }

    // MARK: Writing

    /// Sets the keys of `level` that differ from what it says; true when it changed.
    private static func set(_ wanted: PolicyLevelKeys, in level: inout Node.Mapping, topLevel: Bool) -> Bool {
        let current = keys(level)
        guard !wanted.sameEffect(as: current, topLevel: topLevel) else { return false }
        if !sameBlock(wanted.block, current.block, topLevel: topLevel) {
            switch wanted.block {
            case .all: level["block"] = Node("all")
            case .only(let names):
                // The names kept stay where they were; new ones follow.
                var old: [String] = []
                if case .only(let names) = current.block { old = names }
                let ordered = old.filter { names.contains($0) } + names.filter { !old.contains($0) }
                level["block"] = .sequence(Node.Sequence(ordered.map { Node($0) }, .implicit, sequenceStyle(level["block"])))
            case nil: level["block"] = nil
            }
        }
        if wanted.unknown != current.unknown {
            level["unknown"] = wanted.unknown.map { Node($0) }
        }
        if (wanted.safeSearch.map(Set.init) ?? (topLevel ? [] : nil)) != (current.safeSearch.map(Set.init) ?? (topLevel ? [] : nil)) {
            switch wanted.safeSearch {
            case .some(let engines) where engines.isEmpty: level["safeSearch"] = Node("none")
            case .some(let engines):
                level["safeSearch"] = .sequence(Node.Sequence(engines.map { Node($0) }, .implicit, sequenceStyle(level["safeSearch"])))
            case nil: level["safeSearch"] = nil
            }
        }
        return true
    }

    private static func sameBlock(_ a: PolicyLevelKeys.Block?, _ b: PolicyLevelKeys.Block?, topLevel: Bool) -> Bool {
        PolicyLevelKeys(block: a).sameEffect(as: PolicyLevelKeys(block: b), topLevel: topLevel)
    }

    /// A list keeps the style it had; a new one is written on one line, `[a, b]`, as the docs write them.
    private static func sequenceStyle(_ old: Node?) -> Node.Sequence.Style {
        old?.sequence?.style ?? .flow
    }
}
