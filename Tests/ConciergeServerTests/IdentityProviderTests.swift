import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import Testing

/// A session against an identity provider in trouble (the sample API's OAuth2 dialect with a
/// token endpoint that rate-limits, is down or refuses Concierge's client credentials): only a
/// dead grant ends a session; every other failure answers `unavailable` and keeps it.
@Suite("Identity provider faults")
struct IdentityProviderTests {
    static func with(ttl: Duration = .seconds(3600), refreshExtra: String = "", clock: ManualClock? = nil,
                     _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.oauth2Endpoints, extra: DialectTestConfig.oauth2(refreshExtra: refreshExtra),
                                        apiConfiguration: SampleAPIConfiguration(accessTokenTTL: ttl, dialect: .oauth2),
                                        environment: DialectTestConfig.environment, clock: clock, body)
    }

    static func loggedIn(_ rig: ConciergeTestRig) async throws -> Bool {
        try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(true)
    }

    @Test("a 429 from the token endpoint keeps the session: unavailable with its Retry-After, and no token call before then")
    func rateLimitedKeepsSession() async throws {
        try await Self.with { rig in
            #expect(try await OAuth2DialectTests.login(rig).status == 200)
            rig.api.state.setTokenEndpointFault(.rateLimited(retryAfter: 30))
            rig.api.state.expireAllAccessTokens()
            let first = try await rig.get("/api/me")
            #expect(first.status == 502)
            #expect(first.header("Retry-After") == "30")
            #expect(first.json?[path: "code"] != 800, "never not_logged_in")
            let calls = rig.api.state.tokenCalls
            let second = try await rig.get("/api/items")
            #expect(second.status == 502)
            #expect(second.header("Retry-After").flatMap(Int.init).map { (1...30).contains($0) } == true)
            #expect(rig.api.state.tokenCalls == calls, "no token call before Retry-After")
            #expect(try await Self.loggedIn(rig))
        }
    }

    @Test("a refused client secret (401 invalid_client) keeps the session, answers unavailable and is logged at error level")
    func invalidClientKeepsSession() async throws {
        let clock = ManualClock()
        try await Self.with(clock: clock) { rig in
            #expect(try await OAuth2DialectTests.login(rig).status == 200)
            rig.api.state.setTokenEndpointFault(.invalidClient)
            rig.api.state.expireAllAccessTokens()
            for _ in 0..<3 {
                let reply = try await rig.get("/api/me")
                #expect(reply.status == 502)
            }
            #expect(try await Self.loggedIn(rig))
            #expect(rig.logText.contains("refused Concierge's client credentials"))
            #expect(rig.logText.components(separatedBy: "refused Concierge's client credentials").count == 2, "once a minute, not per request")
            rig.api.state.setTokenEndpointFault(nil)
            clock.advance(by: 1)  // past the back-off (1 s after one refusal)
            #expect(try await rig.get("/api/me").status == 200, "the same session works once the credentials are right")
        }
    }

    @Test("a provider outage never answers not_logged_in and never uses up the loop guard; token requests are paced to one a second; the first request a second after recovery succeeds")
    func outageKeepsSession() async throws {
        let clock = ManualClock()
        try await Self.with(clock: clock) { rig in
            #expect(try await OAuth2DialectTests.login(rig).status == 200)
            rig.api.state.setTokenEndpointFault(.serverError)
            rig.api.state.expireAllAccessTokens()
            var statuses: [Int] = []
            for i in 0..<12 { statuses.append(try await rig.get("/api/items?i=\(i)").status) }
            #expect(statuses.allSatisfy { $0 == 502 }, "\(statuses)")
            #expect(rig.api.state.tokenCalls == 1, "one token request a second: the daemon's clock stood still")
            #expect(!rig.logText.contains("token calls throttled"))
            #expect(try await Self.loggedIn(rig))
            rig.api.state.setTokenEndpointFault(nil)
            clock.advance(by: 1)
            let recovered = try await rig.get("/api/items?after=1")
            #expect(recovered.status == 200)
            #expect(recovered.header("X-Concierge-Replays") == "1")
        }
    }

    @Test("client_auth: basic sends the form-encoded client id and secret in Authorization, not in the body")
    func basicClientAuthentication() async throws {
        let id = SampleAPIConfiguration.defaultClientID, secret = SampleAPIConfiguration.defaultClientSecret
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.oauth2Endpoints,
                                        extra: DialectTestConfig.oauth2(refreshExtra: "client_id: \(id)\nclient_secret: \(secret)\nclient_auth: basic")
                                            .replacingOccurrences(of: "      client_id: \"${OAUTH_CLIENT_ID}\"\n", with: "")
                                            .replacingOccurrences(of: "      client_secret: \"${OAUTH_CLIENT_SECRET}\"\n", with: ""),
                                        apiConfiguration: SampleAPIConfiguration(dialect: .oauth2), environment: DialectTestConfig.environment) { rig in
            #expect(try await OAuth2DialectTests.login(rig).status == 200)
            rig.api.state.expireAllAccessTokens()
            #expect(try await rig.get("/api/me").status == 200)
            let refresh = try #require(rig.api.state.lastRequest("/oauth/token"))
            #expect(refresh.headers["authorization"] == TokenRequest.basicCredentials(id: id, secret: secret))
            #expect(!refresh.body.contains("client_secret"))
            #expect(!rig.logText.contains(secret))
        }
    }

    @Test("tokens that live shorter than max_refreshes allows are logged once, naming session.max_refreshes")
    func shortLifetimeWarning() async throws {
        let warning = "tokens live shorter than session.max_refreshes allows"
        try await Self.with(ttl: .seconds(2)) { rig in
            let first = try await OAuth2DialectTests.login(rig)
            #expect(first.status == 200)
            #expect(try await OAuth2DialectTests.login(rig, user: "bob").status == 200)
            #expect(rig.logText.components(separatedBy: warning).count == 2, "once")
        }
        try await Self.with { rig in
            let login = try await OAuth2DialectTests.login(rig)
            #expect(login.status == 200)
            #expect(!rig.logText.contains(warning), "an hour-long token is no cause")
        }
    }

    @Test("renewal ahead of expiry follows the daemon's clock: an hour-long token is renewed once the clock nears its end, without waiting")
    func renewalFollowsInjectedClock() async throws {
        let clock = ManualClock()
        try await Self.with(clock: clock) { rig in
            let login = try await OAuth2DialectTests.login(rig)
            #expect(login.status == 200)
            #expect(try await rig.get("/api/items").status == 200)
            #expect(rig.api.state.tokenCalls == 0)
            clock.advance(by: 3590)  // 10 s left: inside refresh_ahead (30 s)
            #expect(try await rig.get("/api/items").status == 200)
            #expect(rig.api.state.tokenCalls == 1)
            #expect(rig.api.state.expirySignals == 0)
        }
    }

    @Test("a token whose known expiry has passed is never sent while it cannot be renewed")
    func expiredTokenNeverSent() async throws {
        let clock = ManualClock()
        try await Self.with(clock: clock) { rig in
            let login = try await OAuth2DialectTests.login(rig)
            #expect(login.status == 200)
            rig.api.state.setTokenEndpointFault(.serverError)
            // 10 s left: renewal ahead fails, the still valid token is sent.
            clock.advance(by: 3590)
            #expect(try await rig.get("/api/items").status == 200)
            // Past its expiry (for Concierge and the provider alike): never sent, answered unavailable.
            clock.advance(by: 20)
            rig.api.state.advanceClock(by: .seconds(3610))
            let reply = try await rig.get("/api/items")
            #expect(reply.status == 502)
            #expect(rig.api.state.expirySignals == 0, "the upstream never saw the expired token")
            #expect(try await Self.loggedIn(rig))
        }
    }
}

/// RFC 7009 revocation on logout (`session.revoke`) against the sample OAuth2 provider.
@Suite("Token revocation")
struct TokenRevocationTests {
    /// A revocation's timeout long enough that a busy machine (the whole suite on two cores)
    /// never turns the provider's answer into a timeout; the waits for the background
    /// revocation are as long.
    static let revoke = """
          revoke:
            method: POST
            path: /oauth/revoke
            encoding: form
            body: { token: "{refresh_token}", token_type_hint: refresh_token }
            client_id: \(SampleAPIConfiguration.defaultClientID)
            client_secret: \(SampleAPIConfiguration.defaultClientSecret)
            client_auth: basic
            timeout: 30s
        """

    static func rig(revokePath: String = "/oauth/revoke", _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.oauth2Endpoints,
                                        extra: DialectTestConfig.oauth2(sessionExtra: revoke.replacingOccurrences(of: "/oauth/revoke", with: revokePath)),
                                        apiConfiguration: SampleAPIConfiguration(dialect: .oauth2), environment: DialectTestConfig.environment, body)
    }

    @Test("DELETE /session revokes the refresh token at the provider, once, in the background")
    func revokedOnLogout() async throws {
        try await Self.rig { rig in
            let login = try await OAuth2DialectTests.login(rig)
            #expect(login.status == 200)
            #expect(rig.api.state.liveRefreshTokens == 1)
            #expect(try await rig.admin(.DELETE, "/session").status == 200)
            #expect(await eventually(.seconds(90)) { rig.api.state.calls("/oauth/revoke") == 1 })
            #expect(rig.api.state.liveRefreshTokens == 0)
            #expect(rig.api.state.lastRequest("/oauth/revoke")?.headers["authorization"]?.hasPrefix("Basic ") == true)
            #expect(await eventually(.seconds(90)) { rig.logText.contains("tokens revoked at the provider") })
        }
    }

    @Test("after 10 login and logout cycles the provider holds no live refresh token")
    func tenCycles() async throws {
        try await Self.rig { rig in
            for i in 0..<10 {
                let login = try await OAuth2DialectTests.login(rig, user: "u\(i)")
                #expect(login.status == 200)
                #expect(try await rig.admin(.DELETE, "/session").status == 200)
            }
            #expect(await eventually { rig.api.state.calls("/oauth/revoke") == 10 })
            #expect(rig.api.state.liveRefreshTokens == 0)
        }
    }

    @Test("a refresh refused with invalid_grant ends the session without a revocation (the grant is already dead)")
    func noRevocationAfterDeadGrant() async throws {
        try await Self.rig { rig in
            let login = try await OAuth2DialectTests.login(rig)
            #expect(login.status == 200)
            rig.api.state.revokeAllSessions()
            #expect(try await rig.get("/api/items").status == 401)
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(false))
            // A marker logout afterwards is revoked; the dead grant's logout was not.
            #expect(try await OAuth2DialectTests.login(rig, user: "bob").status == 200)
            #expect(try await rig.admin(.DELETE, "/session").status == 200)
            #expect(await eventually { rig.api.state.calls("/oauth/revoke") >= 1 })
            #expect(rig.api.state.calls("/oauth/revoke") == 1)
        }
    }

    @Test("a revocation endpoint that fails never keeps the session; the failure is logged")
    func failedRevocation() async throws {
        try await Self.rig(revokePath: "/oauth/missing") { rig in
            let login = try await OAuth2DialectTests.login(rig)
            #expect(login.status == 200)
            #expect(try await rig.admin(.DELETE, "/session").status == 200)
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(false))
            #expect(await eventually(.seconds(90)) { rig.logText.contains("token revocation refused") })
        }
    }
}
