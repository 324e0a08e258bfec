/// Access and refresh tokens handed out by the sample API, with their lifecycle
/// (time-to-live, forced expiry, revocation, refresh-token rotation).
///
/// A plain value type; `SampleAPIState` guards it with a mutex.
struct TokenRegistry {
    /// Tokens returned by a login or a refresh.
    struct TokenPair: Sendable {
        let accessToken: String
        let refreshToken: String
        let userID: String
    }

    /// Verdict on an access token presented by a client.
    enum AccessTokenStatus: Sendable, Equatable {
        case valid(userID: String)
        case unknown
        case expired
        case revoked
    }

    private struct IssuedToken {
        let userID: String
        let issuedAt: ContinuousClock.Instant
        var forcedExpired = false
        var revoked = false
    }

    private var accessTokens: [String: IssuedToken] = [:]
    private var refreshTokens: [String: IssuedToken] = [:]
    private var issuedLog: [String] = []

    /// Issues a fresh access/refresh pair for `userID`.
    mutating func issue(for userID: String, at now: ContinuousClock.Instant) -> TokenPair {
        let pair = TokenPair(
            accessToken: "at-" + Self.randomHex(byteCount: 16),
            refreshToken: "rt-" + Self.randomHex(byteCount: 16),
            userID: userID
        )
        issuedLog += [pair.accessToken, pair.refreshToken]
        accessTokens[pair.accessToken] = IssuedToken(userID: userID, issuedAt: now)
        refreshTokens[pair.refreshToken] = IssuedToken(userID: userID, issuedAt: now)
        return pair
    }

    /// Issues an app token (no user); with `supersede`, every earlier access token stops
    /// working at once (WeChat: a new fetch invalidates the previous token).
    mutating func issueAppToken(at now: ContinuousClock.Instant, supersede: Bool) -> String {
        if supersede { accessTokens.removeAll() }
        let token = "app-" + Self.randomHex(byteCount: 16)
        issuedLog.append(token)
        accessTokens[token] = IssuedToken(userID: "app", issuedAt: now)
        return token
    }

    /// Issues an app token of the app id `app`, superseding only that app id's earlier ones.
    mutating func issueAppToken(at now: ContinuousClock.Instant, app: String) -> String {
        let owner = "app:" + app
        for (token, issued) in accessTokens where issued.userID == owner { accessTokens[token] = nil }
        let token = "app-" + Self.randomHex(byteCount: 16)
        issuedLog.append(token)
        accessTokens[token] = IssuedToken(userID: owner, issuedAt: now)
        return token
    }

    /// Every token handed out so far (access and refresh), for tests that scan logs.
    var everyTokenIssued: [String] { issuedLog }

    /// Exchanges a valid refresh token for a new pair; the old refresh token stops working.
    /// Returns `nil` for an unknown, already rotated or revoked refresh token.
    mutating func rotate(refreshToken: String, at now: ContinuousClock.Instant) -> TokenPair? {
        guard let old = refreshTokens[refreshToken], !old.revoked else { return nil }
        refreshTokens[refreshToken] = nil
        return issue(for: old.userID, at: now)
    }

    /// Checks an access token against revocation, forced expiry and the time-to-live.
    func status(ofAccessToken token: String, at now: ContinuousClock.Instant, ttl: Duration) -> AccessTokenStatus {
        guard let issued = accessTokens[token] else { return .unknown }
        if issued.revoked { return .revoked }
        if issued.forcedExpired || now - issued.issuedAt >= ttl { return .expired }
        return .valid(userID: issued.userID)
    }

    /// Every access token issued so far answers "expired" from now on.
    mutating func expireAllAccessTokens() {
        for token in accessTokens.keys { accessTokens[token]?.forcedExpired = true }
    }

    /// Every token issued so far (access and refresh) is revoked.
    /// RFC 7009: revokes an access or refresh token; a refresh token takes its user's access
    /// tokens with it. Whether the token was known.
    mutating func revoke(token: String) -> Bool {
        if let refresh = refreshTokens[token] {
            refreshTokens[token]?.revoked = true
            for (key, access) in accessTokens where access.userID == refresh.userID { accessTokens[key]?.revoked = true }
            return true
        }
        guard accessTokens[token] != nil else { return false }
        accessTokens[token]?.revoked = true
        return true
    }

    /// Refresh tokens that would still be accepted.
    var liveRefreshTokens: Int { refreshTokens.values.filter { !$0.revoked }.count }

    mutating func revokeAll() {
        for token in accessTokens.keys { accessTokens[token]?.revoked = true }
        for token in refreshTokens.keys { refreshTokens[token]?.revoked = true }
    }

    private static func randomHex(byteCount: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<byteCount).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return HexEncoding.lowercase(bytes)
    }
}
