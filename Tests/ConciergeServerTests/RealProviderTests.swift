import ConciergeCore
import ConciergeTestSupport
import Foundation
import Testing

/// Sessions against a real OAuth2 provider: django-oauth-toolkit (``OAuthProvider``) with
/// refresh-token rotation, counted in its own database. Runs wherever its Python is installed
/// (`.ci/run` installs it); in CI (`CI` set) a missing provider fails the suite. One test at a
/// time: seven providers starting at once on a two-core machine overran their 30 s start.
@Suite("A real OAuth2 provider (django-oauth-toolkit)", .serialized,
       .enabled(if: OAuthProvider.python != nil || ProcessInfo.processInfo.environment["CI"] != nil))
struct RealProviderTests {
    static func config(port: Int, secret: String = OAuthProvider.clientSecret) -> (endpoints: String, extra: String) {
        let endpoints = """
            - { name: token, match: "POST /o/token/" }
            - { name: me, match: "GET /api/me", login: required }
            """
        let extra = """
            envelope: { code_path: code, success_when_missing: true }
            session:
              inject: [{ header: Authorization, format: "Bearer {access_token}" }]
              refresh_on_status: [401]
              not_logged_in: { status: 401, body: { error: not_logged_in, code: 800 } }
              capture: { endpoint: token, access_token: access_token, refresh_token: refresh_token, expires_in: expires_in, redact: true }
              refresh:
                upstream: idp
                path: /o/token/
                encoding: form
                body: { grant_type: refresh_token, refresh_token: "{refresh_token}" }
                client_id: \(OAuthProvider.clientID)
                client_secret: \(secret)
                client_auth: basic
                access_token: access_token
                refresh_token: refresh_token
                expires_in: expires_in
              revoke:
                upstream: idp
                path: /o/revoke_token/
                encoding: form
                body: { token: "{refresh_token}", token_type_hint: refresh_token }
                client_id: \(OAuthProvider.clientID)
                client_secret: \(secret)
                client_auth: basic
                timeout: 5s
            """
        return (endpoints, extra)
    }

    static func with(secret: String = OAuthProvider.clientSecret, _ body: (ConciergeTestRig, OAuthProvider) async throws -> Void) async throws {
        let provider = try await OAuthProvider.start()
        do {
            let (endpoints, extra) = config(port: provider.port, secret: secret)
            try await ConciergeTestRig.with(endpoints: endpoints, extra: extra, configTransform: { yaml in
                yaml.replacingOccurrences(of: "upstreams:\n", with: "upstreams:\n  idp: \(provider.baseURL)\n")
                    .replacingOccurrences(of: "environment: debug\n", with: "environment: idp\n")
            }) { rig in
                try await body(rig, provider)
            }
        } catch {
            await provider.stop()
            throw error
        }
        await provider.stop()
    }

    static func login(_ rig: ConciergeTestRig) async throws -> TestResponse {
        let credentials = Data("\(OAuthProvider.clientID):\(OAuthProvider.clientSecret)".utf8).base64EncodedString()
        return try await rig.post("/o/token/", form: "grant_type=password&username=\(OAuthProvider.username)&password=\(OAuthProvider.password)",
                                  headers: [("Authorization", "Basic \(credentials)")])
    }

    static func int(_ json: JSONValue, _ key: String) -> Int { json[path: key]?.intValue ?? -1 }

    @Test("login is captured and redacted; the Bearer token reaches the protected resource")
    func loginCaptureRedact() async throws {
        try await Self.with { rig, _ in
            let login = try await Self.login(rig)
            #expect(login.status == 200)
            #expect(login.json?[path: "access_token"] == nil)
            #expect(login.json?[path: "refresh_token"] == nil)
            let me = try await rig.get("/api/me")
            #expect(me.status == 200)
            #expect(me.json?[path: "user"] == "alice")
        }
    }

    @Test("a storm of 100 concurrent requests on an expired token: one refresh grant in the provider's database, 100 successes")
    func stormOneRefreshGrant() async throws {
        try await Self.with { rig, provider in
            #expect(try await Self.login(rig).status == 200)
            try await provider.expireAccessTokens()
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<100 { group.addTask { try await rig.get("/api/me").status } }
                var all: [Int] = []
                for try await status in group { all.append(status) }
                return all
            }
            #expect(statuses.count == 100)
            #expect(statuses.allSatisfy { $0 == 200 }, "\(Dictionary(grouping: statuses, by: { $0 }).mapValues(\.count))")
            let stats = try await provider.stats()
            #expect(Self.int(stats, "refresh_grants") == 1, "\(stats)")
            #expect(Self.int(stats, "live_refresh_tokens") == 1)
        }
    }

    @Test("the session survives a restart of the daemon")
    func restartSurvival() async throws {
        try await Self.with { rig, _ in
            #expect(try await Self.login(rig).status == 200)
            try await rig.withRestart { restarted in
                let me = try await restarted.get("/api/me")
                #expect(me.status == 200)
            }
        }
    }

    @Test("logout revokes the refresh token at the provider; after 10 login and logout cycles none is live")
    func revocationOnLogout() async throws {
        try await Self.with { rig, provider in
            for _ in 0..<10 {
                #expect(try await Self.login(rig).status == 200)
                #expect(try await rig.get("/api/me").status == 200)
                #expect(try await rig.admin(.DELETE, "/session").status == 200)
            }
            let revoked = try await eventually { Self.int(try await provider.stats(), "live_refresh_tokens") == 0 }
            let stats = try await provider.stats()
            let revocationLines = rig.logText.split(separator: "\n").filter { $0.contains("revo") }
            #expect(revoked, "\(stats) \(revocationLines)")
        }
    }

    @Test("a login that replaces a session revokes the tokens it replaces: 10 cycles of login over login and logout leave no live refresh token")
    func loginOverLoginRevokes() async throws {
        try await Self.with { rig, provider in
            for _ in 0..<10 {
                #expect(try await Self.login(rig).status == 200)
                #expect(try await Self.login(rig).status == 200)
                #expect(try await rig.get("/api/me").status == 200)
                #expect(try await rig.admin(.DELETE, "/session").status == 200)
            }
            let settled = try await eventually(.seconds(20)) {
                let stats = try await provider.stats()
                return Self.int(stats, "live_refresh_tokens") == 0 && Self.int(stats, "revoke_calls") == 20
            }
            let stats = try await provider.stats()
            print("10 cycles of login over login and logout: \(Self.int(stats, "live_refresh_tokens")) live refresh tokens, "
                  + "\(Self.int(stats, "revoke_calls")) revoke calls")
            #expect(settled, "\(stats)")
            #expect(Self.int(stats, "live_refresh_tokens") == 0)
            #expect(Self.int(stats, "revoke_calls") == 20, "one for each login replaced, one for each logout")
        }
    }

    @Test("a 429 and a 503 from the provider keep the session: unavailable (with Retry-After), then success once it recovers")
    func providerTroubleKeepsSession() async throws {
        try await Self.with { rig, provider in
            #expect(try await Self.login(rig).status == 200)
            try await provider.expireAccessTokens()
            try await provider.setFault("503")
            for _ in 0..<5 { #expect(try await rig.get("/api/me").status == 502) }
            try await provider.setFault("429")
            // Token requests after a 503 are paced to one a second: a later one gets the 429.
            var limited = try await rig.get("/api/me")
            let deadline = ContinuousClock.now + .seconds(5)
            while limited.header("Retry-After") != "7", ContinuousClock.now < deadline {
                #expect(limited.status == 502)
                try await Task.sleep(for: .milliseconds(100))
                limited = try await rig.get("/api/me")
            }
            #expect(limited.status == 502)
            #expect(limited.header("Retry-After") == "7")
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(true))
            try await provider.setFault(nil)
            // The provider asked for 7 s: until then Concierge does not call it.
            let recovered = try await eventually(.seconds(15)) { try await rig.get("/api/me").status == 200 }
            #expect(recovered)
        }
    }

    @Test("a wrong client secret (401 invalid_client) keeps the session and is logged at error level")
    func wrongClientSecret() async throws {
        try await Self.with(secret: "not-the-secret") { rig, provider in
            #expect(try await Self.login(rig).status == 200)
            try await provider.expireAccessTokens()
            let reply = try await rig.get("/api/me")
            #expect(reply.status == 502)
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(true))
            #expect(rig.logText.contains("refused Concierge's client credentials"))
            #expect(!rig.logText.contains("not-the-secret"))
        }
    }
}
