import ConciergeSampleAPI

/// Configurations for the sample API's dialects (OAuth2, WeChat, DingTalk), in the shape of
/// `Config/examples/*.yaml`, for ``ConciergeTestRig/with(endpoints:extra:api:apiConfiguration:directory:configTransform:environment:clock:_:)``.
public enum DialectTestConfig {
    /// `${VAR}` values the dialect configs take their credentials from.
    public static let environment: [String: String] = [
        "OAUTH_CLIENT_ID": SampleAPIConfiguration.defaultClientID,
        "OAUTH_CLIENT_SECRET": SampleAPIConfiguration.defaultClientSecret,
        "WECHAT_APPID": SampleAPIConfiguration.defaultClientID,
        "WECHAT_SECRET": SampleAPIConfiguration.defaultClientSecret,
        "DINGTALK_KEY": SampleAPIConfiguration.defaultClientID,
        "DINGTALK_SECRET": SampleAPIConfiguration.defaultClientSecret,
    ]

    /// `me` (cached), `items` and `forbidden` (cached), all `login: required`, at a dialect's paths.
    static func userEndpoints(me: String, items: String, forbidden: String) -> String {
        """
        - { name: me, match: "GET \(me)", login: required, cache: { ttl: 60s } }
        - { name: items, match: "GET \(items)", login: required }
        - { name: forbidden, match: "GET \(forbidden)", login: required, cache: { ttl: 60s } }
        """
    }

    public static let oauth2Endpoints = "- { name: token, match: \"POST /oauth/token\" }\n"
        + userEndpoints(me: "/api/me", items: "/api/items", forbidden: "/api/forbidden")

    /// - Parameter refreshExtra: more keys of `session.refresh` (one per line, unindented).
    public static func oauth2(sessionExtra: String = "", refreshExtra: String = "") -> String {
        let refreshLines = refreshExtra.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n")
        return """
        envelope:
          code_path: code
          success_when_missing: true
        session:
          inject:
            - header: Authorization
              format: "Bearer {access_token}"
          refresh_on_status: [401]
          not_logged_in: { status: 401, body: { error: not_logged_in, code: 800 } }
          capture:
            endpoint: token
            access_token: access_token
            refresh_token: refresh_token
            expires_in: expires_in
            redact: true
          refresh:
            method: POST
            path: /oauth/token
            encoding: form
            body:
              grant_type: refresh_token
              refresh_token: "{refresh_token}"
              client_id: "${OAUTH_CLIENT_ID}"
              client_secret: "${OAUTH_CLIENT_SECRET}"
            access_token: access_token
            refresh_token: refresh_token
            expires_in: expires_in
        \(refreshLines)
        \(sessionExtra)
        """
    }

    public static let weChatEndpoints = """
        - { name: userInfo, match: "GET /cgi-bin/user/info", login: required, cache: { ttl: 60s } }
        - { name: items, match: "GET /cgi-bin/items", login: required, cache: { ttl: 60s, tags: ["items", "q:{query.shared}"] } }
        - { name: forbidden, match: "GET /cgi-bin/forbidden", login: required, cache: { ttl: 60s } }
        - { name: stale, match: "GET /cgi-bin/stale", login: required }
        """

    public static func weChat(sessionExtra: String = "") -> String {
        """
        envelope:
          code_path: errcode
          message_path: errmsg
          success_codes: [0]
          refresh_codes: [40001, 42001]
          logout_codes: []
          success_when_missing: true
        session:
          inject:
            - query: access_token
          app_token:
            method: GET
            path: /cgi-bin/token
            query: { grant_type: client_credential, appid: "${WECHAT_APPID}", secret: "${WECHAT_SECRET}" }
            access_token: access_token
            expires_in: expires_in
        \(sessionExtra)
        """
    }

    public static let dingTalkEndpoints = userEndpoints(me: "/v1.0/contact/users/me", items: "/v1.0/items", forbidden: "/v1.0/forbidden")

    public static func dingTalk(sessionExtra: String = "") -> String {
        """
        envelope:
          code_path: code
          message_path: message
          success_codes: []
          refresh_codes: [InvalidAuthentication]
          logout_codes: []
          success_when_missing: true
        session:
          inject:
            - header: x-acs-dingtalk-access-token
          app_token:
            method: POST
            path: /v1.0/oauth2/accessToken
            encoding: json
            body: { appKey: "${DINGTALK_KEY}", appSecret: "${DINGTALK_SECRET}" }
            access_token: accessToken
            expires_in: expireIn
        \(sessionExtra)
        """
    }
}
