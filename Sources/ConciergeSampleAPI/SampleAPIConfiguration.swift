/// Which real API style the sample API speaks (the dialects of docs/configuration.md).
public enum SampleDialect: String, Sendable, CaseIterable {
    /// The seed envelope `{"code", "msg", "data"}`: login, refresh, 801/802.
    case envelope
    /// OAuth2 (RFC 6749/6750): form-only `POST /oauth/token`, Bearer tokens, 401 on expiry,
    /// `invalid_grant` for a dead refresh token, refresh-token rotation.
    case oauth2
    /// WeChat-style app token: `GET /cgi-bin/token`, `?access_token=`, `errcode` 40001/42001;
    /// every fetch invalidates the previous token.
    case wechat
    /// DingTalk-style app token with string codes: `POST /v1.0/oauth2/accessToken`, header
    /// `x-acs-dingtalk-access-token`, `400 {"code": "InvalidAuthentication"}` on expiry.
    case dingtalk
}

/// Tunables of the sample business API.
public struct SampleAPIConfiguration: Sendable {
    /// How long an issued access token stays valid before it answers code 801.
    public var accessTokenTTL: Duration
    /// Delay applied before answering `POST /api/token/refresh` (to provoke concurrent refreshes).
    public var refreshDelay: Duration
    /// Secret checked by `/api/signed`; `nil` accepts every request unsigned.
    public var signingSecret: String?
    /// The API style spoken.
    public var dialect: SampleDialect = .envelope
    /// OAuth2 client id, WeChat `appid`, DingTalk `appKey`.
    public var clientID: String = SampleAPIConfiguration.defaultClientID
    /// OAuth2 client secret, WeChat `secret`, DingTalk `appSecret`.
    public var clientSecret: String = SampleAPIConfiguration.defaultClientSecret
    /// More WeChat app ids (`appid` → `secret`), each with its own app token: a new fetch
    /// invalidates only the previous token of the same app id.
    public var moreAppIDs: [String: String] = [:]

    public static let defaultClientID = "sample-client"
    public static let defaultClientSecret = "sample-client-secret-8f3a"

    public init(
        accessTokenTTL: Duration = .seconds(3600),
        refreshDelay: Duration = .zero,
        signingSecret: String? = nil,
        dialect: SampleDialect = .envelope
    ) {
        self.accessTokenTTL = accessTokenTTL
        self.refreshDelay = refreshDelay
        self.signingSecret = signingSecret
        self.dialect = dialect
    }

    /// `expires_in` as the dialects report it: whole seconds, at least 1.
    var accessTokenLifetimeSeconds: Int {
        let (seconds, atto) = accessTokenTTL.components
        return max(1, Int(seconds) + (atto > 0 ? 1 : 0))
    }
}
