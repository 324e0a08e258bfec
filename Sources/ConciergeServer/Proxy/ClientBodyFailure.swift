import Synchronization

/// Why a client's request body did not arrive whole (docs/hardening.md, framing).
enum ClientBodyFailure: Error, Sendable, Equatable {
    /// Cut short (EOF mid-body) or malformed (bad chunk): 400.
    case malformed(String)
    /// No body bytes for `limits.body_timeout`: 408.
    case stalled

    var reply: ProxyReply {
        switch self {
        case .malformed(let why): return .error(400, "malformed request body: \(why)")
        case .stalled: return .error(408, "request body timed out")
        }
    }
}

/// Remembers that a streamed request body broke, so the request's work answers the client
/// with 400/408 instead of the upstream error the aborted upstream request produced.
final class ClientBodyOutcome: Sendable {
    private let failure = Mutex<ClientBodyFailure?>(nil)

    func fail(_ reason: ClientBodyFailure) {
        failure.withLock { if $0 == nil { $0 = reason } }
    }

    var failed: ClientBodyFailure? { failure.withLock { $0 } }
}
