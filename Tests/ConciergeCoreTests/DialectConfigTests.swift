@testable import ConciergeCore
import Foundation
import NIOHTTP1
import Testing

/// SPEC §9 in the pure core: the dialect keys, string codes, token requests and replies.
@Suite("Dialects (config, envelope variants, token requests)")
struct DialectConfigTests {
    static let repoRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let environment = [
        "OAUTH_CLIENT_ID": "client-1", "OAUTH_CLIENT_SECRET": "client-secret-1",
        "WECHAT_APPID": "wx-app", "WECHAT_SECRET": "wx-secret-1",
        "DINGTALK_KEY": "ding-key", "DINGTALK_SECRET": "ding-secret-1",
    ]

    private func issues(_ yaml: String) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.parse(yaml: yaml, environment: Self.environment)
            Issue.record("expected a ConfigError")
            return []
        } catch {
            return error.issues
        }
    }

    @Test("every §9 key loads: string and integer codes as one set, refresh_on_status, refresh_ahead, max_refreshes, form refresh")
    func allKeys() throws {
        let config = try ConfigLoader.parse(yaml: """
            upstreams:
              release: https://api.example.com
              auth: https://login.example.com
            envelope:
              code_path: errcode
              success_codes: [0, "200"]
              refresh_codes: [40001, "42001", InvalidAuthentication]
              success_when_missing: true
            session:
              inject:
                - header: Authorization
                  format: "Bearer {access_token}"
              refresh_on_status: [401]
              refresh_ahead: 45s
              max_refreshes: { count: 3, within: 2m }
              capture:
                endpoint: token
                access_token: access_token
                refresh_token: refresh_token
                expires_in: expires_in
                redact: true
              refresh:
                path: /oauth/token
                upstream: auth
                encoding: form
                headers: { X-Client: "${OAUTH_CLIENT_ID}" }
                body: { grant_type: refresh_token, refresh_token: "{refresh_token}", client_secret: "${OAUTH_CLIENT_SECRET}" }
                access_token: access_token
                refresh_token: refresh_token
                expires_in: expires_in
            endpoints:
              - name: token
                match: POST /oauth/token
            """, environment: Self.environment)
        #expect(config.envelope.successCodes == [0, 200])
        #expect(config.envelope.refreshCodes == [40001, 42001])
        #expect(config.envelope.refreshTextCodes == ["InvalidAuthentication"])
        #expect(config.envelope.successWhenMissing)
        #expect(config.session.refreshOnStatus == [401])
        #expect(config.session.refreshAhead == .seconds(45))
        #expect(config.session.maxRefreshes == .init(count: 3, within: .seconds(120)))
        #expect(config.session.capture?.expiresIn == "expires_in")
        #expect(config.session.capture?.redact == true)
        let refresh = try #require(config.session.refresh)
        #expect(refresh.encoding == .form)
        #expect(refresh.upstream == "auth")
        #expect(refresh.headers.map(\.value) == ["client-1"])
        #expect(config.session.kind == .user)
        #expect(config.secretValues.contains("client-secret-1"))
    }

    @Test("defaults: refresh_ahead 30s, max_refreshes 5 per 60s, success_when_missing false, JSON token bodies")
    func defaults() throws {
        let config = try ConfigLoader.parse(yaml: "upstreams:\n  release: https://api.example.com\n")
        #expect(config.session.refreshAhead == .seconds(30))
        #expect(config.session.maxRefreshes == .init(count: 5, within: .seconds(60)))
        #expect(config.envelope.successWhenMissing == false)
        #expect(config.session.refreshOnStatus.isEmpty)
        #expect(config.session.appToken == nil)
    }

    @Test("app_token together with capture or refresh is an error naming the key and line")
    func appTokenExclusive() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            session:
              inject:
                - query: access_token
              capture:
                endpoint: login
                access_token: token
              app_token:
                path: /cgi-bin/token
                access_token: access_token
            endpoints:
              - name: login
                match: POST /login
            """)
        let issue = found.first { $0.path == "session.app_token" }
        #expect(issue?.line == 10)
        #expect(issue?.message.contains("capture") == true)
    }

    @Test("bad token-request keys are errors with key path and line: encoding, header name, upstream, status")
    func badTokenKeys() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            session:
              inject:
                - query: access_token
              refresh_on_status: [200]
              app_token:
                path: /token
                encoding: xml
                upstream: nowhere
                headers: { "Bad Header": x }
                access_token: access_token
            """)
        let paths = Set(found.map(\.path))
        #expect(paths.contains("session.refresh_on_status[0]"))
        #expect(paths.contains("session.app_token.encoding"))
        #expect(paths.contains("session.app_token.upstream"))
        #expect(found.contains { $0.path.hasPrefix("session.app_token.headers") && $0.line == 11 })
        #expect(found.first { $0.path == "session.app_token.encoding" }?.line == 9)
    }

    @Test("0 and \"0\" are one code; string codes are read on any status below 500; only a 2xx is a success")
    func envelopeVariants() throws {
        let config = try ConfigLoader.parse(yaml: """
            upstreams:
              release: https://api.example.com
            envelope:
              code_path: code
              success_codes: ["0"]
              refresh_codes: [InvalidAuthentication]
              success_when_missing: true
            """)
        let reader = EnvelopeReader(envelope: config.envelope)
        #expect(reader.classify(.parse(#"{"code":0}"#)) == .success(code: 0))
        #expect(reader.classify(.parse(#"{"code":"0"}"#)) == .success(code: 0))
        #expect(reader.classify(.parse(#"{"code":0}"#), status: 404) == .failure(code: 0))
        #expect(reader.classify(.parse(#"{"code":"InvalidAuthentication"}"#), status: 400) == .refresh(code: .text("InvalidAuthentication")))
        #expect(reader.classify(.parse(#"{"code":"Forbidden.AccessDenied"}"#), status: 403) == .failure(code: .text("Forbidden.AccessDenied")))
        #expect(reader.classify(.parse(#"{"items":[]}"#)) == .success(code: nil))
        #expect(reader.classify(.parse(#"{"items":[]}"#), status: 400) == .failure(code: nil))
        #expect(reader.classify(.parse(#"{"code":"Weird"}"#)) == .failure(code: .text("Weird")))
    }

    @Test("a form token request: sorted, percent-encoded fields, templated headers and query")
    func formTokenRequest() {
        var endpoint = ConciergeConfig.TokenEndpoint(method: "POST", path: "/oauth/token", upstream: nil,
                                                     body: ["grant_type": "refresh_token", "refresh_token": "{refresh_token}", "client_secret": "a b&c"],
                                                     accessToken: "access_token", refreshToken: nil, maxReplays: 3, timeout: .seconds(5))
        endpoint.encoding = .form
        endpoint.headers = ["X-Token-Hint": "{access_token}"]
        endpoint.query = [("scope", "read write")]
        let request = TokenRequest(endpoint, refreshToken: "rt/1", accessToken: "at-1")
        #expect(String(decoding: request.body ?? [], as: UTF8.self) == "client_secret=a%20b%26c&grant_type=refresh_token&refresh_token=rt%2F1")
        #expect(request.headers.first(name: "Content-Type") == "application/x-www-form-urlencoded")
        #expect(request.headers.first(name: "X-Token-Hint") == "at-1")
        #expect(request.target == "/oauth/token?scope=read%20write")
        #expect(request.path == "/oauth/token")
    }

    @Test("a token reply is good on 2xx with a token and no failure code; the provider's definite no is rejected; every other refusal keeps the session")
    func tokenReplyRule() throws {
        let config = try ConfigLoader.parse(yaml: "upstreams:\n  r: https://a.example\nenvelope:\n  code_path: errcode\n  success_codes: [0]\n")
        let reader = EnvelopeReader(envelope: config.envelope)
        func judge(_ status: Int, _ body: String) -> TokenReply {
            TokenReply.judge(status: status, body: .parse(body), envelope: reader, accessToken: "access_token",
                             refreshToken: "refresh_token", expiresIn: "expires_in")
        }
        #expect(judge(200, #"{"access_token":"t1","expires_in":7200}"#) == .good(accessToken: "t1", refreshToken: nil, expiresIn: 7200))
        #expect(judge(200, #"{"errcode":0,"access_token":"t1","refresh_token":"r1"}"#) == .good(accessToken: "t1", refreshToken: "r1", expiresIn: nil))
        #expect(judge(400, #"{"error":"invalid_grant"}"#) == .rejected(reason: "HTTP 400 (invalid_grant)"))
        // A failure code below 500 is the provider's own "no" (the seed dialect's 810 "refresh refused").
        #expect(judge(200, #"{"errcode":40125,"errmsg":"invalid appsecret"}"#) == .rejected(reason: "HTTP 200, code 40125"))
        if case .refused = judge(200, #"{"access_token":""}"#) {} else { Issue.record("expected refused") }
        // RFC 6749 §5.2: only invalid_grant (or a listed error) says the grant is dead.
        #expect(judge(401, #"{"error":"invalid_client"}"#) == .refused(reason: "HTTP 401 (invalid_client)", retryAfter: nil, clientCredentials: true))
        #expect(judge(400, #"{"error":"unauthorized_client"}"#)
            == .refused(reason: "HTTP 400 (unauthorized_client)", retryAfter: nil, clientCredentials: true))
        #expect(TokenReply.judge(status: 429, body: .parse(#"{"error":"slow_down"}"#), envelope: reader, accessToken: "access_token",
                                 refreshToken: nil, expiresIn: nil, retryAfter: 7)
            == .refused(reason: "HTTP 429 (slow_down)", retryAfter: 7, clientCredentials: false))
        if case .refused = judge(408, "") {} else { Issue.record("a 408 keeps the session") }
        #expect(TokenReply.judge(status: 200, body: .parse(#"{"errcode":810}"#), envelope: reader, accessToken: "access_token",
                                 refreshToken: nil, expiresIn: nil, logoutErrors: ["invalid_grant", "810"]) == .rejected(reason: "HTTP 200, code 810"))
        #expect(judge(200, #"{"errcode":810}"#) == .rejected(reason: "HTTP 200, code 810"), "no list needed for a failure code")
        #expect(judge(400, #"{"errcode":810}"#) == .rejected(reason: "HTTP 400, code 810"))
    }

    @Test("retry_errors: a listed business code or error keeps the session (refused, not rejected); a 5xx with a code is never rejected")
    func retryErrorsKeepTheSession() throws {
        let config = try ConfigLoader.parse(yaml: "upstreams:\n  r: https://a.example\nenvelope:\n  code_path: errcode\n  success_codes: [0]\n")
        let reader = EnvelopeReader(envelope: config.envelope)
        func judge(_ status: Int, _ body: String, retryAfter: Int? = nil) -> TokenReply {
            TokenReply.judge(status: status, body: .parse(body), envelope: reader, accessToken: "access_token", refreshToken: nil,
                             expiresIn: nil, retryErrors: ["-1", "45009", "temporarily_unavailable"], retryAfter: retryAfter)
        }
        #expect(judge(200, #"{"errcode":-1,"errmsg":"system busy"}"#) == .refused(reason: "HTTP 200 (-1)", retryAfter: nil, clientCredentials: false))
        #expect(judge(200, #"{"errcode":45009}"#, retryAfter: 3) == .refused(reason: "HTTP 200 (45009)", retryAfter: 3, clientCredentials: false))
        #expect(judge(400, #"{"error":"temporarily_unavailable"}"#)
            == .refused(reason: "HTTP 400 (temporarily_unavailable)", retryAfter: nil, clientCredentials: false))
        #expect(judge(200, #"{"errcode":40125}"#) == .rejected(reason: "HTTP 200, code 40125"), "an unlisted failure code still ends it")
        #expect(judge(503, #"{"errcode":40125}"#) == .refused(reason: "HTTP 503 (40125)", retryAfter: nil, clientCredentials: false))
        #expect(judge(429, #"{"errcode":40125}"#) == .refused(reason: "HTTP 429 (40125)", retryAfter: nil, clientCredentials: false))
    }

    @Test("retry_errors and max_backoff are read with their defaults; a code in both lists and a back-off under 1 s are errors")
    func retryErrorsAndBackoffKeys() throws {
        let base = "upstreams:\n  r: https://a.example\nsession:\n  inject: [{ query: access_token }]\n  app_token:\n    path: /t\n    access_token: access_token\n"
        let config = try ConfigLoader.parse(yaml: base + "    retry_errors: [-1, 45009]\n    max_backoff: 30s\n")
        #expect(config.session.appToken?.retryErrors == ["-1", "45009"])
        #expect(config.session.appToken?.maxBackoff == .seconds(30))
        let defaults = try ConfigLoader.parse(yaml: base)
        #expect(defaults.session.appToken?.retryErrors == [])
        #expect(defaults.session.appToken?.maxBackoff == .seconds(60))
        #expect(issues(base + "    retry_errors: [invalid_grant]\n").contains { $0.path == "session.app_token.retry_errors" })
        #expect(issues(base + "    max_backoff: 500ms\n").contains { $0.path == "session.app_token.max_backoff" })
    }

    @Test("Retry-After in seconds or as an HTTP date")
    func retryAfter() {
        #expect(TokenReply.retryAfterSeconds("120") == 120)
        #expect(TokenReply.retryAfterSeconds(" 5 ") == 5)
        #expect(TokenReply.retryAfterSeconds(nil) == nil)
        #expect(TokenReply.retryAfterSeconds("soon") == nil)
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(TokenReply.retryAfterSeconds("Tue, 14 Nov 2023 22:13:50 GMT", now: now) == 30)
    }

    @Test("client_auth basic sends the form-encoded id and secret in Authorization; post sends them as body fields")
    func clientAuthentication() throws {
        var endpoint = ConciergeConfig.TokenEndpoint(method: "POST", path: "/oauth/token", upstream: nil,
                                                     body: ["grant_type": "refresh_token", "refresh_token": "{refresh_token}"],
                                                     accessToken: "access_token", refreshToken: "refresh_token", maxReplays: 3, timeout: .seconds(5))
        endpoint.encoding = .form
        endpoint.clientID = "my app"
        endpoint.clientSecret = "s3cr:t/+"
        endpoint.clientAuth = .basic
        let basic = TokenRequest(endpoint, refreshToken: "rt", accessToken: nil)
        let expected = "Basic " + Data("my+app:s3cr%3At%2F%2B".utf8).base64EncodedString()
        #expect(basic.headers.first(name: "Authorization") == expected)
        #expect(String(decoding: basic.body ?? [], as: UTF8.self) == "grant_type=refresh_token&refresh_token=rt")
        endpoint.clientAuth = .post
        let post = TokenRequest(endpoint, refreshToken: "rt", accessToken: nil)
        #expect(post.headers.first(name: "Authorization") == nil)
        #expect(String(decoding: post.body ?? [], as: UTF8.self)
            == "client_id=my%20app&client_secret=s3cr%3At%2F%2B&grant_type=refresh_token&refresh_token=rt")
    }

    @Test("renewal ahead of expiry: within refresh_ahead, or within half the lifetime when that is shorter")
    func renewalMargin() {
        let now = Date()
        let long = SessionTokens(accessToken: "a", refreshToken: nil, userID: nil, setAt: now, expiresAt: now.addingTimeInterval(3600))
        #expect(!long.needsRenewal(at: now, ahead: .seconds(30)))
        #expect(long.needsRenewal(at: now.addingTimeInterval(3580), ahead: .seconds(30)))
        let short = SessionTokens(accessToken: "a", refreshToken: nil, userID: nil, setAt: now, expiresAt: now.addingTimeInterval(10))
        #expect(!short.needsRenewal(at: now.addingTimeInterval(1), ahead: .seconds(30)))
        #expect(short.needsRenewal(at: now.addingTimeInterval(6), ahead: .seconds(30)))
        #expect(!SessionTokens(accessToken: "a", refreshToken: nil, userID: nil).needsRenewal(at: now, ahead: .seconds(30)))
    }

    @Test("Config/examples/{oauth2,wechat,dingtalk}.yaml load with their variables set")
    func examplesLoad() throws {
        for name in ["oauth2", "wechat", "dingtalk"] {
            let path = Self.repoRoot.appendingPathComponent("Config/examples/\(name).yaml").path
            let config = try ConfigLoader.load(path: path, environment: Self.environment)
            #expect(config.session.kind == (name == "oauth2" ? .user : .app), "\(name)")
        }
    }
}
