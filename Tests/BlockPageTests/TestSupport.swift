import BlockPage
import Foundation

/// A blocked request with every field set to plain values.
let casinoRequest = BlockedRequest(
    host: "casino.example",
    url: "http://casino.example/play?game=1",
    category: "gambling",
    rule: "gambling: casino.example",
    reason: "category",
    user: "student1"
)

extension BlockPageResponse {
    var text: String { String(decoding: body, as: UTF8.self) }
}

extension String {
    /// The text of the element with this id, e.g. `<dd id="blocked-host">…</dd>` → `…`.
    func elementText(id: String) -> String? {
        guard let open = range(of: "id=\"\(id)\"") else { return nil }
        guard let start = self[open.upperBound...].firstIndex(of: ">") else { return nil }
        let rest = self[index(after: start)...]
        guard let end = rest.firstIndex(of: "<") else { return nil }
        return String(rest[..<end])
    }

    func occurrences(of needle: String) -> Int {
        components(separatedBy: needle).count - 1
    }
}

/// A fresh folder under the temporary directory, removed by `remove()`.
struct TemporaryFolder {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "blockpage-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func write(_ relativePath: String, _ text: String) throws {
        let file = path + "/" + relativePath
        try FileManager.default.createDirectory(
            atPath: (file as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true
        )
        try Data(text.utf8).write(to: URL(fileURLWithPath: file))
    }

    func writeBytes(_ relativePath: String, _ bytes: [UInt8]) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path + "/" + relativePath))
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
