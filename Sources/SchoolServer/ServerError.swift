/// What went wrong in hallpass-server, with a stable code and a message a
/// person can act on.
public struct ServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Stable, dotted: `tls.read`, `token.room`, ...
    public var code: String
    public var message: String

    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
