import Foundation

/// A reply to a token call (capture, refresh, app token) judged by SPEC §9's rule: good when
/// it is HTTP 2xx, its access-token path holds a non-empty value and its envelope is not a
/// failure (a code, if present, is a success code). Not the envelope alone: OAuth2 and
/// WeChat token replies carry no code at all.
public enum TokenReply: Sendable, Equatable {
    /// The tokens the reply gave; `refreshToken` and `expiresIn` when their paths held one.
    case good(accessToken: String, refreshToken: String?, expiresIn: Double?)
    /// The token endpoint refused the credentials (HTTP 4xx, e.g. `invalid_grant`).
    case rejected(reason: String)
    /// Any other bad reply (no token, a failure code on a 2xx, not JSON).
    case unusable(reason: String)

    /// Judges a reply with HTTP `status` and the parsed `body` (`nil` when not JSON).
    public static func judge(status: Int, body: JSONValue?, envelope: EnvelopeReader, accessToken: String,
                             refreshToken: String?, expiresIn: String?) -> TokenReply {
        guard (200..<300).contains(status) else {
            let error = body?[path: "error"]?.stringValue ?? envelope.code(in: body)?.description
            return .rejected(reason: "HTTP \(status)\(error.map { " (\($0))" } ?? "")")
        }
        guard let body else { return .unusable(reason: "reply is not JSON") }
        if let code = envelope.code(in: body), !envelope.envelope.successCodes(contains: code) {
            return .unusable(reason: "reply has code \(code)")
        }
        guard let value = body[path: accessToken], value != .null, case let access = value.parameterText, !access.isEmpty else {
            return .unusable(reason: "no access token at \(accessToken)")
        }
        let refresh = refreshToken.flatMap { body[path: $0] }.flatMap { $0 == .null ? nil : $0.parameterText }.flatMap { $0.isEmpty ? nil : $0 }
        let lifetime = expiresIn.flatMap { body[path: $0] }.flatMap { Double($0.parameterText) }.flatMap { $0 > 0 ? $0 : nil }
        return .good(accessToken: access, refreshToken: refresh, expiresIn: lifetime)
    }

    /// The expiry a lifetime in seconds gives a token received at `now`.
    public static func expiry(_ expiresIn: Double?, from now: Date) -> Date? {
        expiresIn.map { now.addingTimeInterval($0) }
    }
}

extension JSONValue {
    /// The value with the member at a dotted path removed (objects only; a missing path
    /// leaves the value unchanged).
    public func removing(path: String) -> JSONValue {
        let parts = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        return removing(parts[...])
    }

    private func removing(_ parts: ArraySlice<String>) -> JSONValue {
        guard let first = parts.first, case .object(var members) = self, let member = members[first] else { return self }
        if parts.count == 1 {
            members[first] = nil
        } else {
            members[first] = member.removing(parts.dropFirst())
        }
        return .object(members)
    }
}
