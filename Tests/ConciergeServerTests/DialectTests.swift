import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// Runs `count` concurrent GETs of `path(i)` and returns their statuses and the time taken.
private func storm(_ rig: ConciergeTestRig, count: Int = 100, _ path: @escaping @Sendable (Int) -> String) async throws -> ([Int], Duration) {
    let started = ContinuousClock.now
    let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
        for i in 0..<count { group.addTask { try await rig.get(path(i)).status } }
        var all: [Int] = []
        for try await status in group { all.append(status) }
        return all
    }
    return (statuses, ContinuousClock.now - started)
}

/// The OAuth2 dialect (RFC 6749/6750) end to end against the sample API speaking it.
@Suite("Dialect: OAuth2")
struct OAuth2DialectTests {
    static let password = "hunter2-correct-horse"

    static func login(_ rig: ConciergeTestRig, user: String = "alice") async throws -> TestResponse {
        let id = SampleAPIConfiguration.defaultClientID, secret = SampleAPIConfiguration.defaultClientSecret
        return try await rig.post("/oauth/token", form: "grant_type=password&username=\(user)&password=\(password)&client_id=\(id)&client_secret=\(secret)")
    }

    static func with(ttl: Duration = .seconds(3600), refreshDelay: Duration = .zero, sessionExtra: String = "",
                     _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.oauth2Endpoints, extra: DialectTestConfig.oauth2(sessionExtra: sessionExtra),
                                        apiConfiguration: SampleAPIConfiguration(accessTokenTTL: ttl, refreshDelay: refreshDelay, dialect: .oauth2),
                                        environment: DialectTestConfig.environment, body)
    }

    @Test("the token reply is captured with its expiry and redacted; the token goes in as a Bearer header")
    func captureRedactInject() async throws {
        try await Self.with { rig in
            let login = try await Self.login(rig)
            #expect(login.status == 200)
            #expect(login.json?[path: "access_token"] == nil)
            #expect(login.json?[path: "refresh_token"] == nil)
            #expect(login.json?[path: "expires_in"] == .int(3600))
            let token = try #require(rig.api.state.everyTokenIssued.first)
            let me = try await rig.get("/api/me")
            #expect(me.status == 200)
            #expect(me.json?[path: "id"] == "alice")
            #expect(rig.api.state.lastRequest("/api/me")?.headers["authorization"] == "Bearer \(token)")
            let session = try await rig.admin(.GET, "/session")
            #expect(session.json?[path: "kind"] == "user")
            #expect(session.json?[path: "expires_at"]?.stringValue?.isEmpty == false)
            #expect(!session.text.contains(token))
        }
    }

    @Test("401 on a request that carried Concierge's token → exactly one form-encoded refresh → replay")
    func refreshOnStatus() async throws {
        try await Self.with { rig in
            _ = try await Self.login(rig)
            rig.api.state.expireAllAccessTokens()
            let me = try await rig.get("/api/me")
            #expect(me.status == 200)
            #expect(me.header("X-Concierge-Replays") == "1")
            #expect(rig.api.state.tokenCalls == 1)
            #expect(rig.api.state.lastRequest("/oauth/token")?.headers["content-type"] == "application/x-www-form-urlencoded")
            // A client's own 401 (no Concierge token: login: none) is passed on untouched.
        }
    }

    @Test("a storm of 100 concurrent requests on an expired token → one token call, 100 successes")
    func storm100() async throws {
        try await Self.with(refreshDelay: .milliseconds(100)) { rig in
            _ = try await Self.login(rig)
            rig.api.state.expireAllAccessTokens()
            let (statuses, elapsed) = try await storm(rig) { "/api/items?i=\($0)" }
            #expect(statuses.count == 100)
            #expect(statuses.allSatisfy { $0 == 200 })
            #expect(rig.api.state.tokenCalls == 1)
            print("storm oauth2: 100 requests, \(rig.api.state.tokenCalls) token call(s), \(elapsed)")
        }
    }

    @Test("with a short expires_in the token is renewed before it expires: the upstream never answers 401")
    func refreshAhead() async throws {
        // 10-second tokens are renewed once less than half their life is left: a token sent has
        // 5 s or more to reach the upstream, which a loaded machine takes too (2-second tokens,
        // with 1 s, met expiry signals under load).
        try await Self.with(ttl: .seconds(10)) { rig in
            _ = try await Self.login(rig)
            let renewed = try await eventually(.seconds(60)) {
                let reply = try await rig.get("/api/items")
                #expect(reply.status == 200)
                return rig.api.state.tokenCalls >= 2
            }
            #expect(renewed)
            #expect(rig.api.state.expirySignals == 0)
        }
    }

    @Test("a dead refresh token (400 invalid_grant) → not_logged_in, session and the user's entries gone")
    func invalidGrantLogsOut() async throws {
        try await Self.with { rig in
            _ = try await Self.login(rig)
            #expect(try await rig.get("/api/me").status == 200)
            #expect(try await rig.admin(.GET, "/cache/entries").json?[path: "entries"]?.serialized.contains("/api/me") == true)
            rig.api.state.revokeAllSessions()
            let me = try await rig.get("/api/me", headers: [("Cache-Control", "no-cache")])
            #expect(me.status == 401)
            #expect(me.json?[path: "error"] == "not_logged_in")
            #expect(rig.api.state.tokenCalls == 1)
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(false))
            #expect(try await rig.admin(.GET, "/cache/entries").json?[path: "entries"] == .array([]))
            #expect(try await rig.get("/api/me").status == 401)
            #expect(rig.logText.contains("reason=refresh_failed"))
        }
    }

    @Test("403 is passed on and never cached; a 2xx without a code is cached")
    func failuresAndSuccesses() async throws {
        try await Self.with { rig in
            _ = try await Self.login(rig)
            for _ in 0..<2 { #expect(try await rig.get("/api/forbidden").status == 403) }
            #expect(rig.api.state.calls("/api/forbidden") == 2)
            #expect(try await rig.get("/api/me").header("X-Cache") == "MISS")
            #expect(try await rig.get("/api/me").header("X-Cache") == "HIT")
        }
    }

    @Test("at level debug no log line holds a token, refresh token, client secret or password")
    func logsHoldNoSecrets() async throws {
        try await Self.with { rig in
            _ = try await Self.login(rig)
            _ = try await rig.get("/api/me")
            rig.api.state.expireAllAccessTokens()
            _ = try await rig.get("/api/items?x=1")
            _ = try await rig.request(.GET, "/api/items?access_token=client-sent-token-1234", headers: [("Authorization", "Bearer client-bearer-5678")])
            rig.api.state.revokeAllSessions()
            _ = try await rig.get("/api/items?x=2")
            let logs = rig.logText
            #expect(logs.contains("DEBUG"))
            let secrets = rig.api.state.everyTokenIssued + [SampleAPIConfiguration.defaultClientSecret, Self.password, "client-bearer-5678"]
            #expect(secrets.count >= 5)
            for secret in secrets { #expect(!logs.contains(secret), "log holds \(secret.prefix(6))…") }
        }
    }
}

/// The WeChat dialect: an app token fetched by Concierge, injected as `?access_token=`.
@Suite("Dialect: WeChat app token")
struct WeChatDialectTests {
    static func with(refreshDelay: Duration = .zero, secret: String = SampleAPIConfiguration.defaultClientSecret, sessionExtra: String = "",
                     clock: ManualClock? = nil, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        var environment = DialectTestConfig.environment
        environment["WECHAT_SECRET"] = secret
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.weChatEndpoints, extra: DialectTestConfig.weChat(sessionExtra: sessionExtra),
                                        apiConfiguration: SampleAPIConfiguration(refreshDelay: refreshDelay, dialect: .wechat),
                                        environment: environment, clock: clock, body)
    }

    @Test("fetched on first need by exactly one call however many requests wait; injected as ?access_token=; shared entries")
    func firstNeedSingleFlight() async throws {
        try await Self.with(refreshDelay: .milliseconds(100)) { rig in
            let (statuses, elapsed) = try await storm(rig) { "/cgi-bin/user/info?i=\($0)" }
            #expect(statuses.allSatisfy { $0 == 200 })
            #expect(rig.api.state.tokenCalls == 1)
            let token = try #require(rig.api.state.everyTokenIssued.last)
            #expect(rig.api.state.lastRequest("/cgi-bin/user/info")?.queryValue("access_token") == token)
            let entries = try await rig.admin(.GET, "/cache/entries").json?[path: "entries"]?.serialized ?? ""
            #expect(entries.contains("/cgi-bin/user/info"))
            #expect(!entries.contains("user="))
            let session = try await rig.admin(.GET, "/session")
            #expect(session.json?[path: "kind"] == "app")
            #expect(session.json?[path: "expires_at"]?.stringValue?.isEmpty == false)
            print("first-need wechat: 100 requests, \(rig.api.state.tokenCalls) token call(s), \(elapsed)")
        }
    }

    @Test("a storm of 100 concurrent requests on an expired app token → one fetch (each fetch invalidates the last), 100 successes")
    func storm100() async throws {
        try await Self.with(refreshDelay: .milliseconds(100)) { rig in
            #expect(try await rig.get("/cgi-bin/items?warm=1").status == 200)
            rig.api.state.expireAllAccessTokens()
            let (statuses, elapsed) = try await storm(rig) { "/cgi-bin/items?i=\($0)" }
            #expect(statuses.count == 100)
            #expect(statuses.allSatisfy { $0 == 200 })
            #expect(rig.api.state.tokenCalls == 2)
            print("storm wechat: 100 requests, \(rig.api.state.tokenCalls - 1) token call(s), \(elapsed)")
        }
    }

    @Test("42001 → one fetch → replay; errcode 45009 passed on and not cached; a success without errcode cached")
    func expiryAndFailures() async throws {
        try await Self.with { rig in
            #expect(try await rig.get("/cgi-bin/user/info").json?[path: "errcode"] == .int(0))
            rig.api.state.expireAllAccessTokens()
            let replayed = try await rig.get("/cgi-bin/items")
            #expect(replayed.status == 200)
            #expect(replayed.header("X-Concierge-Replays") == "1")
            #expect(rig.api.state.tokenCalls == 2)
            #expect(try await rig.get("/cgi-bin/items").header("X-Cache") == "HIT")
            for _ in 0..<2 { #expect(try await rig.get("/cgi-bin/forbidden").json?[path: "errcode"] == .int(45009)) }
            #expect(rig.api.state.calls("/cgi-bin/forbidden") == 2)
            let logs = rig.logText
            #expect(logs.contains("DEBUG"))
            for secret in rig.api.state.everyTokenIssued + [SampleAPIConfiguration.defaultClientSecret] {
                #expect(!logs.contains(secret), "log holds \(secret.prefix(6))…")
            }
        }
    }

    @Test("the app token is persisted and survives a restart without a new fetch")
    func survivesRestart() async throws {
        try await Self.with { rig in
            #expect(try await rig.get("/cgi-bin/items").status == 200)
            #expect(rig.api.state.tokenCalls == 1)
            try await rig.withRestart(environment: DialectTestConfig.environment) { current async throws in
                #expect(try await current.get("/cgi-bin/user/info").status == 200)
                #expect(current.api.state.tokenCalls == 1)
                #expect(try await current.admin(.GET, "/session").json?[path: "kind"] == "app")
            }
        }
    }

    @Test("a failed fetch answers unavailable (502) with Retry-After; a later request tries again once the back-off has passed")
    func failedFetch() async throws {
        // The back-off is judged by the daemon's clock: this test's, so a slow machine changes nothing.
        let clock = ManualClock()
        try await Self.with(secret: "wrong-secret-value", clock: clock) { rig in
            let first = try await rig.get("/cgi-bin/items")
            #expect(first.status == 502)
            #expect(first.json?[path: "code"] == .int(-1))
            #expect(first.header("Retry-After") == "1")
            let paced = try await rig.get("/cgi-bin/items")
            #expect(paced.status == 502)
            #expect(paced.header("Retry-After") == "1")
            #expect(rig.api.state.tokenCalls == 1, "no fetch before the back-off has passed")
            clock.advance(by: 1.0)
            #expect(try await rig.get("/cgi-bin/items").status == 502)
            #expect(rig.api.state.tokenCalls == 2, "fetched again once the back-off passed")
            #expect(!rig.logText.contains("wrong-secret-value"))
        }
    }

    @Test("loop guard: an upstream that always says expired gets at most 5 token calls in 60 s, then unavailable")
    func loopGuard() async throws {
        try await Self.with { rig in
            var statuses: [Int] = []
            for _ in 0..<12 { statuses.append(try await rig.get("/cgi-bin/stale").status) }
            #expect(rig.api.state.tokenCalls == 5)
            // The first reply is the upstream's refusal after its one replay; then no token, no call.
            #expect(statuses == [200] + Array(repeating: 502, count: 11), "\(statuses)")
            #expect(rig.logText.contains("token calls throttled"))
            // Every request the guard answered without a token call is counted (concierge_loop_guard_trips_total).
            let trips = try await rig.admin(.GET, "/stats").json?[path: "loop_guard_trips"]?.intValue ?? 0
            #expect(trips >= 1, "\(trips)")
        }
    }
}

/// The DingTalk dialect: string codes on HTTP 400, the token in a header.
@Suite("Dialect: DingTalk string codes")
struct DingTalkDialectTests {
    static func with(refreshDelay: Duration = .zero, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.dingTalkEndpoints, extra: DialectTestConfig.dingTalk(),
                                        apiConfiguration: SampleAPIConfiguration(refreshDelay: refreshDelay, dialect: .dingtalk),
                                        environment: DialectTestConfig.environment, body)
    }

    @Test("a JSON app-token fetch, header injection, 400 InvalidAuthentication → one fetch → replay")
    func fetchInjectReplay() async throws {
        try await Self.with { rig in
            #expect(try await rig.get("/v1.0/contact/users/me").status == 200)
            let token = try #require(rig.api.state.everyTokenIssued.last)
            #expect(rig.api.state.lastRequest("/v1.0/contact/users/me")?.headers["x-acs-dingtalk-access-token"] == token)
            #expect(rig.api.state.lastRequest("/v1.0/oauth2/accessToken")?.headers["content-type"] == "application/json")
            rig.api.state.expireAllAccessTokens()
            let replayed = try await rig.get("/v1.0/items")
            #expect(replayed.status == 200)
            #expect(replayed.header("X-Concierge-Replays") == "1")
            #expect(rig.api.state.tokenCalls == 2)
        }
    }

    @Test("a storm of 100 concurrent requests on an expired token → one fetch, 100 successes")
    func storm100() async throws {
        try await Self.with(refreshDelay: .milliseconds(100)) { rig in
            #expect(try await rig.get("/v1.0/items?warm=1").status == 200)
            rig.api.state.expireAllAccessTokens()
            let (statuses, elapsed) = try await storm(rig) { "/v1.0/items?i=\($0)" }
            #expect(statuses.allSatisfy { $0 == 200 })
            #expect(rig.api.state.tokenCalls == 2)
            print("storm dingtalk: 100 requests, \(rig.api.state.tokenCalls - 1) token call(s), \(elapsed)")
        }
    }

    @Test("403 Forbidden.AccessDenied is passed on and never cached; a 200 without a code is cached")
    func stringCodeFailures() async throws {
        try await Self.with { rig in
            for _ in 0..<2 {
                let reply = try await rig.get("/v1.0/forbidden")
                #expect(reply.status == 403)
                #expect(reply.json?[path: "code"] == "Forbidden.AccessDenied")
            }
            #expect(rig.api.state.calls("/v1.0/forbidden") == 2)
            #expect(try await rig.get("/v1.0/contact/users/me").header("X-Cache") == "MISS")
            #expect(try await rig.get("/v1.0/contact/users/me").header("X-Cache") == "HIT")
        }
    }
}

/// The loop guard with a user session: the seed dialect's always-expired endpoint.
@Suite("Refresh loop guard")
struct RefreshLoopGuardTests {
    @Test("an upstream that always answers 801: at most max_refreshes token calls, then unavailable with Retry-After (the session kept) and an event")
    func userLoopGuard() async throws {
        let receiver = try await SampleAPI.start()
        defer { Task { await receiver.shutdown() } }
        let extra = TestConfig.defaultSession + """

              max_refreshes: { count: 5, within: 60s }
            hooks:
              - url: http://127.0.0.1:\(receiver.port)/api/echo
                events: [session.refresh_throttled]
            """
        try await ConciergeTestRig.with(extra: extra) { rig in
            try await rig.login()
            _ = try await rig.get("/api/always-expired")
            #expect(rig.api.state.refreshCalls == 3)
            let second = try await rig.get("/api/always-expired")
            #expect(rig.api.state.refreshCalls == 5)
            #expect(second.status == 502)
            #expect(second.header("Retry-After").flatMap(Int.init).map { (1...60).contains($0) } == true)
            #expect(try await rig.get("/api/always-expired").status == 502)
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(true))
            #expect(rig.api.state.refreshCalls == 5)
            #expect(rig.logText.contains("token calls throttled"))
            #expect(await eventually { receiver.state.calls("/api/echo") == 1 })
            let event = JSONValue.parse(receiver.state.lastRequest("/api/echo")?.body ?? "")
            #expect(event?[path: "type"] == "session.refresh_throttled")
        }
    }
}

/// The sample API's dialect quirks, checked directly (no Concierge in between).
@Suite("Sample API dialects")
struct SampleAPIDialectTests {
    static func with(_ dialect: SampleDialect, ttl: Duration = .seconds(3600), _ body: (RunningSampleAPI, String) async throws -> Void) async throws {
        let api = try await SampleAPI.start(configuration: SampleAPIConfiguration(accessTokenTTL: ttl, dialect: dialect))
        do { try await body(api, "http://127.0.0.1:\(api.port)") } catch { await api.shutdown(); throw error }
        await api.shutdown()
    }

    static let client = "client_id=\(SampleAPIConfiguration.defaultClientID)&client_secret=\(SampleAPIConfiguration.defaultClientSecret)"

    @Test("OAuth2: the token endpoint is form-only; refresh tokens rotate; tokens really expire after expires_in")
    func oauth2Quirks() async throws {
        // Three seconds: long enough that the first use of the token is never late on a busy
        // machine, short enough to wait for its expiry.
        try await Self.with(.oauth2, ttl: .seconds(3)) { api, base in
            let json = try await ConciergeTestRig.send(.POST, base + "/oauth/token", headers: [("Content-Type", "application/json")],
                                                       body: #"{"grant_type":"password","username":"a","password":"b"}"#)
            #expect(json.status == 400)
            #expect(json.json?[path: "error"] == "invalid_request")
            let form = [("Content-Type", "application/x-www-form-urlencoded")]
            let login = try await ConciergeTestRig.send(.POST, base + "/oauth/token", headers: form,
                                                        body: "grant_type=password&username=a&password=b&\(Self.client)")
            #expect(login.json?[path: "expires_in"] == .int(3))
            let access = try #require(login.json?[path: "access_token"]?.stringValue)
            let refresh = try #require(login.json?[path: "refresh_token"]?.stringValue)
            let bearer = [("Authorization", "Bearer \(access)")]
            #expect(try await ConciergeTestRig.send(.GET, base + "/api/me", headers: bearer).status == 200)
            let rotated = try await ConciergeTestRig.send(.POST, base + "/oauth/token", headers: form,
                                                          body: "grant_type=refresh_token&refresh_token=\(refresh)&\(Self.client)")
            #expect(rotated.status == 200)
            #expect(rotated.json?[path: "refresh_token"]?.stringValue != refresh)
            let reused = try await ConciergeTestRig.send(.POST, base + "/oauth/token", headers: form,
                                                         body: "grant_type=refresh_token&refresh_token=\(refresh)&\(Self.client)")
            #expect(reused.status == 400)
            #expect(reused.json?[path: "error"] == "invalid_grant")
            let expired = try await eventually {
                try await ConciergeTestRig.send(.GET, base + "/api/me", headers: bearer).status == 401
            }
            #expect(expired)
            let denied = try await ConciergeTestRig.send(.GET, base + "/api/me", headers: bearer)
            #expect(denied.header("WWW-Authenticate")?.contains(#"error="invalid_token""#) == true)
            #expect(api.state.tokenCalls == 2)
        }
    }

    @Test("WeChat: every fetch invalidates the previous token (40001); expiry is 42001; both on HTTP 200")
    func weChatQuirks() async throws {
        try await Self.with(.wechat) { api, base in
            let fetch = base + "/cgi-bin/token?grant_type=client_credential&appid=\(SampleAPIConfiguration.defaultClientID)&secret=\(SampleAPIConfiguration.defaultClientSecret)"
            let first = try #require(try await ConciergeTestRig.send(.GET, fetch).json?[path: "access_token"]?.stringValue)
            #expect(try await ConciergeTestRig.send(.GET, base + "/cgi-bin/items?access_token=\(first)").json?[path: "errcode"] == nil)
            let second = try #require(try await ConciergeTestRig.send(.GET, fetch).json?[path: "access_token"]?.stringValue)
            let stale = try await ConciergeTestRig.send(.GET, base + "/cgi-bin/user/info?access_token=\(first)")
            #expect(stale.status == 200)
            #expect(stale.json?[path: "errcode"] == .int(40001))
            #expect(try await ConciergeTestRig.send(.GET, base + "/cgi-bin/user/info?access_token=\(second)").json?[path: "errcode"] == .int(0))
            api.state.expireAllAccessTokens()
            #expect(try await ConciergeTestRig.send(.GET, base + "/cgi-bin/user/info?access_token=\(second)").json?[path: "errcode"] == .int(42001))
            #expect(try await ConciergeTestRig.send(.GET, base + "/cgi-bin/token?grant_type=client_credential&appid=x&secret=y").json?[path: "errcode"] == .int(40013))
        }
    }

    @Test("DingTalk: a JSON token request; a bad token is 400 InvalidAuthentication; success has no code")
    func dingTalkQuirks() async throws {
        try await Self.with(.dingtalk) { _, base in
            let body = #"{"appKey":"\#(SampleAPIConfiguration.defaultClientID)","appSecret":"\#(SampleAPIConfiguration.defaultClientSecret)"}"#
            let reply = try await ConciergeTestRig.send(.POST, base + "/v1.0/oauth2/accessToken", headers: [("Content-Type", "application/json")], body: body)
            let token = try #require(reply.json?[path: "accessToken"]?.stringValue)
            #expect(reply.json?[path: "expireIn"] == .int(3600))
            let ok = try await ConciergeTestRig.send(.GET, base + "/v1.0/items", headers: [("x-acs-dingtalk-access-token", token)])
            #expect(ok.status == 200)
            #expect(ok.json?[path: "code"] == nil)
            let bad = try await ConciergeTestRig.send(.GET, base + "/v1.0/items", headers: [("x-acs-dingtalk-access-token", "nope")])
            #expect(bad.status == 400)
            #expect(bad.json?[path: "code"] == "InvalidAuthentication")
        }
    }
}
