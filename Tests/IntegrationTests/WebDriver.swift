import FilterControl
import Foundation
import Testing

/// A real Chromium driven through Debian's chromedriver with the W3C
/// WebDriver protocol (JSON over HTTP), in a network namespace of the test:
/// chromedriver listens on that namespace's loopback, and each command is
/// one `curl` run inside the namespace, since the test process itself lives
/// in the host's namespace and cannot reach it. Only the handful of commands
/// the console tests need: open a page, find elements, type, click, read the
/// page, take a screenshot.
final class WebDriver {
    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    private let namespace: String
    private let port: Int
    private let folder: String
    private let session: String
    private let driver: ChildProcess

    /// The key under which WebDriver names an element (W3C WebDriver, "Elements").
    private static let elementKey = "element-6066-11e4-a52e-4f735466cecf"

    /// Starts chromedriver in `namespace` and opens a headless Chromium session
    /// with a profile of its own in `folder`, in the language `language`.
    /// The school server's certificate is the test's own self-signed one:
    /// the session accepts it (`acceptInsecureCerts`), as a school's browsers
    /// would once they trust the server's pinned certificate.
    init(namespace: String, folder: String, log: String, language: String = "en") throws {
        self.namespace = namespace
        self.folder = folder
        port = Int.random(in: 20_000...29_999)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        driver = try ChildProcess(
            ["ip", "netns", "exec", namespace, "chromedriver", "--port=\(port)", "--allowed-ips=127.0.0.1"], logPath: log)
        var ready = false
        for _ in 0..<100 {
            if (try? shell("ip netns exec \(namespace) curl -sf -m 2 http://127.0.0.1:\(port)/status"))?.status == 0 {
                ready = true
                break
            }
            usleep(100_000)
        }
        guard ready else {
            _ = driver.stop()
            throw Failure("chromedriver did not answer on port \(port) in \(namespace)")
        }
        let capabilities: [String: Any] = [
            "capabilities": [
                "alwaysMatch": [
                    "browserName": "chrome",
                    "acceptInsecureCerts": true,
                    "goog:chromeOptions": [
                        "binary": "/usr/bin/chromium",
                        "args": [
                            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                            "--user-data-dir=\(folder)/profile", "--lang=\(language)", "--accept-lang=\(language)",
                            "--window-size=1280,900",
                        ],
                        "prefs": ["intl.accept_languages": language],
                    ] as [String: Any],
                ] as [String: Any]
            ]
        ]
        do {
            let answer = try Self.call(namespace: namespace, port: port, folder: folder, "POST", "/session", capabilities)
            guard let value = answer as? [String: Any], let id = value["sessionId"] as? String else {
                throw Failure("chromedriver opened no session: \(answer)")
            }
            session = id
        } catch {
            _ = driver.stop()
            throw error
        }
    }

    /// Ends the session and stops chromedriver (which stops its Chromium).
    func quit() {
        _ = try? command("DELETE", "")
        _ = driver.stop()
    }

    func open(_ url: String) throws { _ = try command("POST", "/url", ["url": url]) }

    var currentURL: String {
        get throws { try command("GET", "/url") as? String ?? "" }
    }

    /// The page's HTML as the browser holds it now.
    var source: String {
        get throws { try command("GET", "/source") as? String ?? "" }
    }

    var title: String {
        get throws { try command("GET", "/title") as? String ?? "" }
    }

    /// The first element that matches the CSS `selector`; throws when there is none.
    func element(_ selector: String) throws -> String {
        let found = try command("POST", "/element", ["using": "css selector", "value": selector])
        guard let value = found as? [String: Any], let id = value[Self.elementKey] as? String else {
            throw Failure("no element matches \(selector)")
        }
        return id
    }

    /// Every element that matches `selector` (none is an empty list).
    func elements(_ selector: String) throws -> [String] {
        let found = try command("POST", "/elements", ["using": "css selector", "value": selector])
        return (found as? [[String: Any]] ?? []).compactMap { $0[Self.elementKey] as? String }
    }

    func text(of selector: String) throws -> String {
        try command("GET", "/element/\(try element(selector))/text") as? String ?? ""
    }

    /// Types `text` into the field `selector` after clearing it.
    func type(_ text: String, into selector: String) throws {
        let id = try element(selector)
        _ = try command("POST", "/element/\(id)/clear", [String: Any]())
        _ = try command("POST", "/element/\(id)/value", ["text": text])
    }

    func click(_ selector: String) throws {
        _ = try command("POST", "/element/\(try element(selector))/click", [String: Any]())
    }

    /// Runs `script` in the page (a function body; `arguments[0]`... are `arguments`) and returns its result.
    @discardableResult
    func run(_ script: String, _ arguments: [Any] = []) throws -> Any {
        try command("POST", "/execute/sync", ["script": script, "args": arguments])
    }

    /// The cookies the browser holds for the current page: name to the whole cookie object.
    func cookies() throws -> [String: [String: Any]] {
        let all = try command("GET", "/cookie") as? [[String: Any]] ?? []
        var byName: [String: [String: Any]] = [:]
        for cookie in all {
            if let name = cookie["name"] as? String { byName[name] = cookie }
        }
        return byName
    }

    /// A PNG of the whole window into test-artifacts/NAME.png.
    func screenshot(_ name: String) throws {
        guard let encoded = try command("GET", "/screenshot") as? String, let png = Data(base64Encoded: encoded) else {
            throw Failure("no screenshot")
        }
        let artifacts = TestNetwork.packageRoot + "/test-artifacts"
        try FileManager.default.createDirectory(atPath: artifacts, withIntermediateDirectories: true)
        try png.write(to: URL(fileURLWithPath: artifacts + "/\(name).png"))
    }

    /// Waits until `condition` holds, for up to `seconds`; throws with `what` otherwise.
    func waitUntil(_ what: String, seconds: Int = 15, _ condition: () throws -> Bool) throws {
        for _ in 0..<(seconds * 10) {
            if (try? condition()) == true { return }
            usleep(100_000)
        }
        throw Failure("timed out waiting for \(what)")
    }

    private func command(_ method: String, _ path: String, _ body: [String: Any]? = nil) throws -> Any {
        try Self.call(namespace: namespace, port: port, folder: folder, method, "/session/\(session)\(path)", body)
    }

    /// One WebDriver command: the JSON `body` goes through a file (no shell
    /// quoting of page text); the answer's `value`, or the error it names.
    private static func call(namespace: String, port: Int, folder: String, _ method: String, _ path: String, _ body: [String: Any]?) throws
        -> Any
    {
        let bodyFile = folder + "/webdriver-\(UUID().uuidString).json"
        defer { try? FileManager.default.removeItem(atPath: bodyFile) }
        var data = "-X \(method)"
        if let body {
            try JSONSerialization.data(withJSONObject: body).write(to: URL(fileURLWithPath: bodyFile))
            data += " -H 'Content-Type: application/json' --data-binary @\(bodyFile)"
        }
        let answer = try shell("ip netns exec \(namespace) curl -s -m 60 \(data) http://127.0.0.1:\(port)\(path)")
        guard answer.status == 0 else { throw Failure("webdriver \(method) \(path): curl exit \(answer.status)") }
        guard let json = try? JSONSerialization.jsonObject(with: Data(answer.output.utf8)) as? [String: Any] else {
            throw Failure("webdriver \(method) \(path): not JSON: \(answer.output.prefix(300))")
        }
        let value = json["value"] ?? NSNull()
        if let failure = value as? [String: Any], let error = failure["error"] as? String {
            throw Failure("webdriver \(method) \(path): \(error): \((failure["message"] as? String ?? "").prefix(300))")
        }
        return value
    }
}
