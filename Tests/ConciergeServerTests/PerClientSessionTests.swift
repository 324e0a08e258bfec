import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// `per_client` (a backend-for-frontend): one instance of the session per caller-chosen id in
/// `Concierge-Session`, each with its own login, tokens and single-flight refresh, against the
/// sample API's OAuth2 dialect.
@Suite("Per-client sessions")
struct PerClientSessionTests {
    static let alice = "client-alice-0123456789"
    static let bob = "client-bob-9876543210ab"
    static let carol = "client-carol-55555555555"

    static func with(max: Int = 2, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        let api = SampleAPIConfiguration(refreshDelay: .milliseconds(50), dialect: .oauth2)
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.oauth2Endpoints,
                                        extra: DialectTestConfig.oauth2(sessionExtra: "  per_client: { header: Concierge-Session, max: \(max), idle: 1h }"),
                                        apiConfiguration: api, environment: DialectTestConfig.environment, body)
    }

    static func login(_ rig: ConciergeTestRig, _ user: String, id: String) async throws -> TestResponse {
        let (clientID, secret) = (SampleAPIConfiguration.defaultClientID, SampleAPIConfiguration.defaultClientSecret)
        return try await rig.post("/oauth/token", form: "grant_type=password&username=\(user)&password=\(OAuth2DialectTests.password)&client_id=\(clientID)&client_secret=\(secret)",
                                  headers: [("Concierge-Session", id)])
    }

    static func me(_ rig: ConciergeTestRig, id: String, _ query: String = "") async throws -> TestResponse {
        try await rig.get("/api/me" + query, headers: [("Concierge-Session", id)])
    }

    @Test("two users through two instances at once; one refresh grant per instance under a storm; the id never reaches the upstream")
    func twoUsersStorm() async throws {
        try await Self.with { rig in
            async let a = Self.login(rig, "alice", id: Self.alice)
            async let b = Self.login(rig, "bob", id: Self.bob)
            #expect(try await a.status == 200)
            #expect(try await b.status == 200)
            #expect(try await Self.me(rig, id: Self.alice).json?[path: "id"] == "alice")
            #expect(try await Self.me(rig, id: Self.bob).json?[path: "id"] == "bob")
            #expect(rig.api.state.lastRequest("/api/me")?.headers["concierge-session"] == nil)
            rig.api.state.expireAllAccessTokens()
            let replies = try await withThrowingTaskGroup(of: (String, TestResponse).self) { group in
                for i in 0..<50 {
                    group.addTask { ("alice", try await rig.get("/api/items?a=\(i)", headers: [("Concierge-Session", Self.alice)])) }
                    group.addTask { ("bob", try await rig.get("/api/items?b=\(i)", headers: [("Concierge-Session", Self.bob)])) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.count == 100)
            #expect(replies.allSatisfy { $0.1.status == 200 })
            #expect(rig.api.state.tokenCalls == 2, "one refresh grant per instance")
            #expect(try await Self.me(rig, id: Self.alice, "?after=1").json?[path: "id"] == "alice")
        }
    }

    @Test("the tokens of many instances never reach the log, before and after they are refreshed (the scrubber's index and its renewal)")
    func manyInstancesTokensScrubbed() async throws {
        try await Self.with(max: 20) { rig in
            let ids = (0..<12).map { "client-many-\(String(format: "%012d", $0))" }
            for (n, id) in ids.enumerated() { #expect(try await Self.login(rig, "user\(n)", id: id).status == 200) }
            // A token in a parameter whose name says nothing: only the literal scrubber masks it.
            func echoEveryToken() async throws {
                for (n, token) in rig.api.state.everyTokenIssued.enumerated() {
                    #expect(try await rig.get("/api/items?q=\(token)", headers: [("Concierge-Session", ids[n % ids.count])]).status == 200)
                }
            }
            try await echoEveryToken()
            rig.api.state.expireAllAccessTokens()
            for id in ids { #expect(try await Self.me(rig, id: id, "?renewed=1").status == 200) }
            #expect(rig.api.state.tokenCalls >= 12, "every instance refreshed")
            try await echoEveryToken()
            let issued = rig.api.state.everyTokenIssued
            #expect(issued.count >= 36, "12 logins (access and refresh) and 12 new access tokens")
            let log = rig.logText
            #expect(log.contains("q=***"))
            for token in issued { #expect(!log.contains(token), "a token reached the log: \(token.prefix(4))…") }
        }
    }

    @Test("logging one instance out leaves the other live; a login beyond max is 503; a bad id is 400")
    func revokeMaxAndBadID() async throws {
        try await Self.with { rig in
            #expect(try await Self.login(rig, "alice", id: Self.alice).status == 200)
            #expect(try await Self.login(rig, "bob", id: Self.bob).status == 200)
            let beyond = try await Self.login(rig, "carol", id: Self.carol)
            #expect(beyond.status == 503)
            #expect(rig.api.state.lastRequest("/oauth/token")?.body.contains("carol") != true, "the login beyond max is not forwarded")
            let listed = try await rig.admin(.GET, "/sessions/default")
            #expect(listed.json?[path: "instances.live"] == 2)
            let dropped = try await rig.admin(.DELETE, "/sessions/default/instances/\(Self.alice)")
            #expect(dropped.json?[path: "logged_out"] == true)
            #expect(try await Self.me(rig, id: Self.alice).status == 401)
            #expect(try await Self.me(rig, id: Self.bob).json?[path: "id"] == "bob")
            #expect(try await Self.login(rig, "carol", id: Self.carol).status == 200, "a slot is free again")
            let bad = try await Self.me(rig, id: "short")
            #expect(bad.status == 400)
            #expect(try await rig.get("/api/me").status == 400, "an endpoint that needs the session without an id")
            #expect(try await rig.admin(.DELETE, "/sessions/default/instances/short").status == 400)
        }
    }
}
