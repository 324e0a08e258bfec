import Crypto
import Foundation

/// The session: a user's tokens and user id (login), or the app token Concierge fetched
/// itself, with the expiry when the token reply gave one; persisted by the session store.
///
/// - Important: never log or print a token; use ``TokenMask`` for display.
public struct SessionTokens: Sendable, Equatable, Codable {
    /// `user`: captured from a login reply; `app`: fetched by Concierge (`session.app_token`).
    public enum Kind: String, Sendable, Codable, CaseIterable { case user, app }

    public var accessToken: String
    public var refreshToken: String?
    public var userID: String?
    public var setAt: Date
    public var kind: Kind = .user
    /// When the access token stops working, if the token reply said (`expires_in`).
    public var expiresAt: Date? = nil
    /// The cache identity of a session whose login reply gave no user id, fixed at login
    /// and kept across refreshes (so the user's entries stay theirs after a new token).
    public var subject: String? = nil

    public init(accessToken: String, refreshToken: String?, userID: String?, setAt: Date = Date(),
                kind: Kind = .user, expiresAt: Date? = nil, subject: String? = nil) {
        self.subject = subject
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.userID = userID
        self.setAt = setAt
        self.kind = kind
        self.expiresAt = expiresAt
    }

    /// Whether the token should be renewed before it is sent at `now`: less than
    /// `ahead` is left, or less than half of its lifetime when that is shorter (so a token
    /// that lives less than `ahead` is not renewed on every request).
    /// Whether the token's known expiry has passed, or is so close that a request sent now
    /// may reach the upstream after it: the expiry was computed when the reply arrived, a
    /// little after the provider started its clock, so the last quarter of a second (up to
    /// one second, a quarter of a short lifetime) counts as expired.
    public func hasExpired(at now: Date) -> Bool {
        guard let expiresAt else { return false }
        let margin = min(1, max(expiresAt.timeIntervalSince(setAt), 0) / 4)
        return expiresAt.timeIntervalSince(now) <= margin
    }

    public func needsRenewal(at now: Date, ahead: Duration) -> Bool {
        guard let expiresAt else { return false }
        let lifetime = expiresAt.timeIntervalSince(setAt)
        let aheadSeconds = Double(ahead.components.seconds) + Double(ahead.components.attoseconds) / 1e18
        let margin = min(aheadSeconds, max(lifetime / 2, 0))
        return expiresAt.timeIntervalSince(now) < margin
    }
}

/// Masks secrets for logs, admin replies and errors.
public enum TokenMask {
    /// `abcd…(32)`: a short prefix and the length, never enough to replay the token.
    public static func mask(_ token: String) -> String {
        guard token.count > 8 else { return "***" }
        return "\(token.prefix(4))…(\(token.count))"
    }

    /// Replaces the values of `names` in a `path?query` text with `***`.
    public static func maskQuery(_ target: String, names: Set<String>) -> String {
        guard !names.isEmpty, let q = target.firstIndex(of: "?") else { return target }
        let path = target[..<q]
        let pieces = target[target.index(after: q)...].split(separator: "&", omittingEmptySubsequences: false).map { piece -> String in
            guard let eq = piece.firstIndex(of: "=") else { return String(piece) }
            let name = QueryString.decode(piece[..<eq])
            return names.contains(name) ? "\(piece[..<eq])=***" : String(piece)
        }
        return "\(path)?\(pieces.joined(separator: "&"))"
    }

    /// Replaces every occurrence of the given secrets in a text.
    public static func scrub(_ text: String, secrets: [String]) -> String {
        var out = text
        for secret in secrets where secret.count >= 4 {
            out = out.replacingOccurrences(of: secret, with: mask(secret))
        }
        return out
    }
}


extension SessionTokens {
    /// The user a user-scoped cache entry belongs to: the user id, or, when the login reply
    /// gave none, a digest of the access token (never the token itself).
    public var cacheUser: String {
        if let userID, !userID.isEmpty { return userID }
        if let subject, !subject.isEmpty { return subject }
        let digest = SHA256.hash(data: Array(accessToken.utf8))
        return "session-" + digest.prefix(8).map { String(format: "%02x", $0) }.joined()
    }
}
