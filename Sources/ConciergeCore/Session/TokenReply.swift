import Foundation

/// A reply to a token call (capture, refresh, app token), judged: good when it is HTTP 2xx,
/// its access-token path holds a non-empty value and its envelope is not a failure (a code,
/// if present, is a success code). Not the envelope alone: OAuth2 and WeChat token replies
/// carry no code at all.
///
/// A refusal ends the session when it is the provider's definite "no" to the grant (RFC 6749
/// §5.2 `invalid_grant`; a reply below 500 whose envelope carries a failure code, the business
/// API's own "refresh refused"; a logout code; an error or code the endpoint lists in
/// `logout_errors`). Every other refusal (`invalid_client`, `unauthorized_client`, `408`, `429`,
/// a reply without a token, a code listed in `retry_errors`) says nothing about the user's
/// session, which is kept.
public enum TokenReply: Sendable, Equatable {
    /// The tokens the reply gave; `refreshToken` and `expiresIn` when their paths held one.
    case good(accessToken: String, refreshToken: String?, expiresIn: Double?)
    /// The grant is dead: the session ends.
    case rejected(reason: String)
    /// No token this time; the session is kept. `retryAfter`: the provider's `Retry-After`
    /// (seconds); `clientCredentials`: the provider refused Concierge's own credentials
    /// (`invalid_client`, `unauthorized_client`).
    case refused(reason: String, retryAfter: Int?, clientCredentials: Bool)

    /// Judges a reply with HTTP `status` and the parsed `body` (`nil` when not JSON).
    /// - Parameters:
    ///   - logoutErrors: `error` values or business codes that end the session.
    ///   - retryErrors: `error` values or business codes that are transient (the session is kept).
    ///   - retryAfter: the reply's `Retry-After`, in seconds, if it had one.
    public static func judge(status: Int, body: JSONValue?, envelope: EnvelopeReader, accessToken: String,
                             refreshToken: String?, expiresIn: String?, logoutErrors: Set<String> = ["invalid_grant"],
                             retryErrors: Set<String> = [], retryAfter: Int? = nil) -> TokenReply {
        let error = body?[path: "error"]?.stringValue
        let code = envelope.code(in: body)
        if let refusal = refusal(status: status, error: error, code: code, envelope: envelope, logoutErrors: logoutErrors,
                                 retryErrors: retryErrors, retryAfter: retryAfter) {
            return refusal
        }
        guard let body else { return .refused(reason: "reply is not JSON", retryAfter: nil, clientCredentials: false) }
        guard let value = body[path: accessToken], value != .null, case let access = value.parameterText, !access.isEmpty else {
            return .refused(reason: "no access token at \(accessToken)", retryAfter: nil, clientCredentials: false)
        }
        let refresh = refreshToken.flatMap { body[path: $0] }.flatMap { $0 == .null ? nil : $0.parameterText }.flatMap { $0.isEmpty ? nil : $0 }
        let lifetime = expiresIn.flatMap { body[path: $0] }.flatMap { Double($0.parameterText) }.flatMap { $0 > 0 ? $0 : nil }
        return .good(accessToken: access, refreshToken: refresh, expiresIn: lifetime)
    }

    /// The verdict on a reply that is a refusal by its status, `error` or business code; `nil`
    /// for a 2xx without a failure code (judged by its token).
    private static func refusal(status: Int, error: String?, code: BusinessCode?, envelope: EnvelopeReader, logoutErrors: Set<String>,
                                retryErrors: Set<String>, retryAfter: Int?) -> TokenReply? {
        if status < 500, let error, logoutErrors.contains(error) { return .rejected(reason: "HTTP \(status) (\(error))") }
        if status < 500, let code, logoutErrors.contains(code.description) || envelope.envelope.logoutCodes(contains: code) {
            return .rejected(reason: "HTTP \(status), code \(code)")
        }
        if let listed = [error, code?.description].compactMap({ $0 }).first(where: retryErrors.contains) {
            return .refused(reason: "HTTP \(status) (\(listed))", retryAfter: retryAfter, clientCredentials: false)
        }
        let what = (error ?? code?.description).map { " (\($0))" } ?? ""
        if error == "invalid_client" || error == "unauthorized_client" {
            return .refused(reason: "HTTP \(status)\(what)", retryAfter: retryAfter, clientCredentials: true)
        }
        if status == 408 || status == 429 { return .refused(reason: "HTTP \(status)\(what)", retryAfter: retryAfter, clientCredentials: false) }
        // The provider's own "no" (the seed dialect's "refresh refused"): not a success code, below 500.
        if status < 500, let code, !envelope.envelope.successCodes(contains: code) { return .rejected(reason: "HTTP \(status), code \(code)") }
        guard (200..<300).contains(status) else {
            return .refused(reason: "HTTP \(status)\(what)", retryAfter: retryAfter, clientCredentials: status == 401 && error == nil)
        }
        return nil
    }

    /// `Retry-After` in seconds: delay-seconds, or an HTTP date from `now` (RFC 9110 §10.2.3).
    public static func retryAfterSeconds(_ value: String?, now: Date = Date()) -> Int? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value) { return max(0, seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: value).map { max(0, Int($0.timeIntervalSince(now).rounded(.up))) }
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
