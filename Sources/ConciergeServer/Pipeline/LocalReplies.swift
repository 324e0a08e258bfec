import ConciergeCore
import NIOCore

/// The replies Concierge makes itself from the configured envelope bodies, and `unwrap`.
enum LocalReplies {
    /// `session.not_logged_in`, with its business code for the report.
    static func notLoggedIn(_ config: RuntimeConfig) -> (ProxyReply, BusinessCode?) {
        let notLoggedIn = config.settings.session.notLoggedIn
        return (.json(notLoggedIn.status, notLoggedIn.body), config.envelope.code(in: notLoggedIn.body))
    }

    /// A request for a session its peer may not use (`clients`): nothing is forwarded.
    static func sessionNotAllowed(_ name: String) -> ProxyReply {
        .error(403, "session not allowed: \(name)")
    }

    /// `envelope.unavailable` (upstream down, token unobtainable), with the given status.
    static func unavailable(_ config: RuntimeConfig, status: Int? = nil) -> ProxyReply {
        .json(status ?? config.settings.envelope.unavailable.status, config.settings.envelope.unavailable.body)
    }

    /// `envelope.unavailable` for a request whose token could not be had this time, with
    /// `Retry-After` when the provider (or the loop guard) said when to try again.
    static func tokenUnavailable(_ config: RuntimeConfig, retryAfter: Int?) -> ProxyReply {
        var reply = unavailable(config)
        if let retryAfter { reply.headers.replaceOrAdd(name: "Retry-After", value: String(retryAfter)) }
        return reply
    }

    /// `envelope.invalid` with the problem appended to its message.
    static func invalid(_ config: RuntimeConfig, problem: String) -> ProxyReply {
        let envelope = config.settings.envelope
        var body = envelope.invalid.body
        if case .object(var members) = body {
            let base = members[envelope.messagePath]?.stringValue ?? "response failed validation"
            members[envelope.messagePath] = .string("\(base): \(problem)")
            body = .object(members)
        }
        return .json(envelope.invalid.status, body)
    }

    /// Replaces the body with the value at `path` (`unwrap`).
    /// - Returns: `false` when the path is missing: the reply became `envelope.invalid`.
    static func unwrap(_ reply: inout ProxyReply, path: String, config: RuntimeConfig) -> Bool {
        guard let body = reply.bufferedBody else { return true }
        guard let json = JSONValue.parse(body.readableBytesView), let inner = json[path: path] else {
            let replacement = invalid(config, problem: "\(path) is missing")
            reply.status = replacement.status
            reply.body = replacement.body
            return false
        }
        reply.body = .buffer(ByteBuffer(bytes: inner.serializedBytes))
        reply.headers.replaceOrAdd(name: "Content-Type", value: "application/json")
        reply.headers.replaceOrAdd(name: "X-Concierge-Unwrapped", value: path)
        return true
    }
}
