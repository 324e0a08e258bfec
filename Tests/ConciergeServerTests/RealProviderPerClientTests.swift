import ConciergeCore
import ConciergeTestSupport
import Foundation
import Testing

/// A `per_client` session (a backend-for-frontend holding the tokens of many end users)
/// against a real OAuth2 provider: django-oauth-toolkit (``OAuthProvider``) with refresh-token
/// rotation, whose own database counts each user's grants.
@Suite("A per_client session on a real OAuth2 provider (django-oauth-toolkit)", .serialized,
       .enabled(if: OAuthProvider.python != nil || ProcessInfo.processInfo.environment["CI"] != nil))
struct RealProviderPerClientTests {
    static let alice = "browser-alice-0123456789"
    static let bob = "browser-bob-9876543210ab"
    static let passwords = ["alice": OAuthProvider.password, "bob": "looking-glass-pass"]

    /// The session `portal`, one instance per `Concierge-Session` id, on the provider.
    static func config() -> (endpoints: String, extra: String) {
        let endpoints = """
            - { name: token, match: "POST /o/token/", session: portal }
            - { name: me, match: "GET /api/me", login: required, session: portal }
            """
        let extra = """
            envelope: { code_path: code, success_when_missing: true }
            # no session: here, only a named one
            sessions:
              portal:
                per_client: { header: Concierge-Session, max: 10, idle: 1h }
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
                  client_secret: \(OAuthProvider.clientSecret)
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
                  client_secret: \(OAuthProvider.clientSecret)
                  client_auth: basic
                  timeout: 5s
            """
        return (endpoints, extra)
    }

    static func login(_ rig: ConciergeTestRig, _ user: String, id: String) async throws -> TestResponse {
        let credentials = Data("\(OAuthProvider.clientID):\(OAuthProvider.clientSecret)".utf8).base64EncodedString()
        return try await rig.post("/o/token/", form: "grant_type=password&username=\(user)&password=\(passwords[user]!)",
                                  headers: [("Authorization", "Basic \(credentials)"), ("Concierge-Session", id)])
    }

    static func me(_ rig: ConciergeTestRig, id: String) async throws -> TestResponse {
        try await rig.get("/api/me", headers: [("Concierge-Session", id)])
    }

    static func count(_ stats: JSONValue, _ user: String, _ key: String) -> Int {
        stats[path: "by_user.\(user).\(key)"]?.intValue ?? -1
    }

    @Test("two users through two instances at once; a storm on expired tokens: one refresh grant per user, nobody logged out; logging one out revokes it and leaves the other live, also after a restart")
    func twoUsersStormAndLogout() async throws {
        let provider = try await OAuthProvider.start()
        do {
            let (endpoints, extra) = Self.config()
            try await ConciergeTestRig.with(endpoints: endpoints, extra: extra, configTransform: { yaml in
                yaml.replacingOccurrences(of: "upstreams:\n", with: "upstreams:\n  idp: \(provider.baseURL)\n")
                    .replacingOccurrences(of: "environment: debug\n", with: "environment: idp\n")
            }) { rig in
                try await Self.stormAndLogout(rig, provider)
                // Bob's instance is stored, not loaded, after a restart: its first use reads it.
                try await rig.withRestart { current in
                    let again = try await Self.me(current, id: Self.bob)
                    #expect(again.status == 200)
                    #expect(again.json?[path: "user"] == "bob")
                    #expect(try await Self.me(current, id: Self.alice).status == 401)
                }
            }
        } catch {
            await provider.stop()
            throw error
        }
        await provider.stop()
    }

    static func stormAndLogout(_ rig: ConciergeTestRig, _ provider: OAuthProvider) async throws {
        async let a = login(rig, "alice", id: alice)
        async let b = login(rig, "bob", id: bob)
        let (loginA, loginB) = try await (a, b)
        #expect(loginA.status == 200 && loginB.status == 200)
        #expect(loginA.json?[path: "access_token"] == nil, "redacted")
        #expect(try await me(rig, id: alice).json?[path: "user"] == "alice")
        #expect(try await me(rig, id: bob).json?[path: "user"] == "bob")
        try await provider.expireAccessTokens()
        let replies = try await withThrowingTaskGroup(of: (String, TestResponse).self) { group in
            for _ in 0..<40 {
                group.addTask { ("alice", try await me(rig, id: alice)) }
                group.addTask { ("bob", try await me(rig, id: bob)) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(replies.count == 80)
        let wrong = replies.filter { $0.1.status != 200 || $0.1.json?[path: "user"] != .string($0.0) }
        #expect(wrong.isEmpty, "\(wrong.prefix(3).map { "\($0.0): \($0.1.status) \($0.1.text)" })")
        let stats = try await provider.stats()
        #expect(count(stats, "alice", "refresh_grants") == 1, "\(stats)")
        #expect(count(stats, "bob", "refresh_grants") == 1, "\(stats)")
        #expect(count(stats, "alice", "live_refresh_tokens") == 1 && count(stats, "bob", "live_refresh_tokens") == 1, "\(stats)")
        #expect(!rig.logText.contains("session dropped"), "nobody logged out")
        #expect(try await rig.admin(.GET, "/sessions/portal").json?[path: "instances.live"] == 2)

        let dropped = try await rig.admin(.DELETE, "/sessions/portal/instances/\(alice)")
        #expect(dropped.json?[path: "logged_out"] == true)
        let revoked = try await eventually { count(try await provider.stats(), "alice", "live_refresh_tokens") == 0 }
        let afterLogout = try await provider.stats()
        #expect(revoked, "\(afterLogout)")
        #expect(try await me(rig, id: alice).status == 401)
        for _ in 0..<5 {
            let reply = try await me(rig, id: bob)
            #expect(reply.status == 200)
            #expect(reply.json?[path: "user"] == "bob")
        }
        let after = try await provider.stats()
        #expect(count(after, "bob", "live_refresh_tokens") == 1, "\(after)")
        #expect(after[path: "revoke_calls"]?.intValue == 1, "\(after)")
        let leaks = rig.logText.split(separator: "\n").filter { $0.contains(alice) || $0.contains(bob) }
        #expect(leaks.isEmpty, "instance ids never logged in full: \(leaks.prefix(3))")
    }
}
