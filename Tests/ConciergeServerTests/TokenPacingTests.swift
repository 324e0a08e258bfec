import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import Synchronization
import Testing

/// Which failed token requests end a session, and how failed ones are paced, against the
/// sample API's dialects (seed envelope, OAuth2, WeChat) and a real daemon.
@Suite("Token requests: refusals and pacing")
struct TokenPacingTests {
    /// The WeChat dialect with a wrong app secret.
    static let wrongSecret = DialectTestConfig.environment.merging(["WECHAT_SECRET": "not-the-secret"]) { $1 }

    /// One reply's status and `Retry-After`.
    struct Answer: Sendable {
        var status: Int
        var retryAfter: Int?
    }

    /// `count` requests over `span` of the daemon's injected clock: in batches of `batch` sent at
    /// once, the clock moved on by an equal step before each batch. What the pacing allows then
    /// depends on that clock only, not on how fast this machine answers.
    static func spread(_ count: Int, over span: Duration, clock: ManualClock, batch: Int = 10,
                       _ send: @escaping @Sendable (Int) async throws -> TestResponse) async throws -> [Answer] {
        let steps = max(1, count / batch)
        let step = (Double(span.components.seconds) + Double(span.components.attoseconds) / 1e18) / Double(steps)
        var answers: [Answer] = []
        for s in 0..<steps {
            if s > 0 { clock.advance(by: step) }
            try await withThrowingTaskGroup(of: Answer.self) { group in
                for i in (s * batch)..<min(count, (s + 1) * batch) {
                    group.addTask {
                        let reply = try await send(i)
                        return Answer(status: reply.status, retryAfter: reply.header("Retry-After").flatMap(Int.init))
                    }
                }
                for try await answer in group { answers.append(answer) }
            }
        }
        return answers
    }

    @Test("the seed dialect's refused refresh (810 on HTTP 200, no logout_errors listed) ends the session: 401 not_logged_in, session.logout refresh_failed, one token request")
    func seedRefusedRefreshLogsOut() async throws {
        try await ConciergeTestRig.with { rig in
            #expect(try !String(contentsOfFile: rig.configPath, encoding: .utf8).contains("logout_errors"))
            let events = EventCollector(port: rig.proxyPort)
            defer { events.stop() }
            try await events.waitConnected()
            try await rig.login("cleo")
            // /api/always-expired answers 801; the refresh endpoint, its tokens revoked, answers 810.
            rig.api.state.revokeAllSessions()
            let reply = try await rig.get("/api/always-expired")
            #expect(reply.status == 401)
            #expect(reply.code == 800)
            #expect(rig.api.state.refreshCalls == 1)
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(false))
            #expect(await eventually { !events.payloads(of: "session.logout").isEmpty })
            #expect(events.payloads(of: "session.logout").map { $0[path: "reason"] } == [.string("refresh_failed")])
            #expect(try await rig.get("/api/user/info").status == 401)
            #expect(rig.api.state.refreshCalls == 1, "no token request once logged out")
        }
    }

    @Test("a business code listed in retry_errors keeps the session: unavailable with Retry-After, and the next request after recovery succeeds")
    func retryErrorsKeepSession() async throws {
        let clock = ManualClock()
        try await IdentityProviderTests.with(refreshExtra: "retry_errors: [811]", clock: clock) { rig in
            #expect(try await OAuth2DialectTests.login(rig).status == 200)
            rig.api.state.setTokenEndpointFault(.busy(code: 811))
            rig.api.state.expireAllAccessTokens()
            let busy = try await rig.get("/api/me")
            #expect(busy.status == 502)
            #expect(busy.header("Retry-After") == "1")
            #expect(try await IdentityProviderTests.loggedIn(rig))
            #expect(rig.api.state.tokenCalls == 1)
            rig.api.state.setTokenEndpointFault(nil)
            clock.advance(by: 1)
            let recovered = try await rig.get("/api/me")
            #expect(recovered.status == 200)
            #expect(recovered.header("X-Concierge-Replays") == "1")
            #expect(rig.api.state.tokenCalls == 2)
        }
    }

    @Test("without retry_errors the same business code is the provider's no: the session ends")
    func unlistedBusinessCodeLogsOut() async throws {
        try await IdentityProviderTests.with { rig in
            #expect(try await OAuth2DialectTests.login(rig).status == 200)
            rig.api.state.setTokenEndpointFault(.busy(code: 811))
            rig.api.state.expireAllAccessTokens()
            let refused = try await rig.get("/api/me")
            #expect(refused.status == 401)
            #expect(try await !IdentityProviderTests.loggedIn(rig))
            #expect(rig.api.state.tokenCalls == 1)
        }
    }

    @Test("a wrong app secret backs off 1, 2, 4 s on the daemon's clock: unavailable with that Retry-After, no fetch meanwhile")
    func wrongSecretBacksOffOnInjectedClock() async throws {
        // Whole seconds, so that half-second steps add up exactly.
        let clock = ManualClock(start: Date().timeIntervalSince1970.rounded(.down))
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.weChatEndpoints, extra: DialectTestConfig.weChat(),
                                        apiConfiguration: SampleAPIConfiguration(dialect: .wechat), environment: Self.wrongSecret,
                                        clock: clock) { rig in
            var seen: [(retryAfter: String?, fetches: Int)] = []
            // At 0, 0.5, 1, 2, 3, 5, 7, 11 and 15 s: fetches at 0, 1, 3, 7 and 15 s.
            for step in [0.0, 0.5, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0] {
                clock.advance(by: step)
                let reply = try await rig.get("/cgi-bin/items")
                #expect(reply.status == 502)
                seen.append((reply.header("Retry-After"), rig.api.state.tokenCalls))
            }
            #expect(seen.map(\.fetches) == [1, 1, 2, 2, 3, 3, 4, 4, 5], "\(seen)")
            #expect(seen.map(\.retryAfter) == ["1", "1", "2", "1", "4", "2", "8", "4", "16"], "\(seen)")
            let errors = rig.logText.components(separatedBy: "refused Concierge's client credentials").count - 1
            #expect(errors == 1, "logged at error level once a minute, not per fetch")
            #expect(!rig.logText.contains("not-the-secret"))
        }
    }

    @Test("a wrong WeChat secret at 100 requests a second for a minute of the daemon's clock: at most 7 token requests, none of the 6,000 forwarded")
    func wrongSecretFirstMinute() async throws {
        let clock = ManualClock()
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.weChatEndpoints, extra: DialectTestConfig.weChat(),
                                        apiConfiguration: SampleAPIConfiguration(dialect: .wechat), environment: Self.wrongSecret,
                                        clock: clock) { rig in
            let answers = try await Self.spread(6_000, over: .seconds(60), clock: clock) { i in try await rig.get("/cgi-bin/items?i=\(i)") }
            let fetches = rig.api.state.tokenCalls
            print("wrong WeChat secret, 100 requests a second for a minute: \(fetches) token requests")
            #expect(answers.count == 6_000)
            #expect(answers.allSatisfy { $0.status == 502 && ($0.retryAfter ?? 0) >= 1 })
            // Fetches at 0, 1, 3, 7, 15, 31 s (the back-off doubling from 1 s): 6.
            #expect(fetches <= 7, "\(fetches) token requests")
            #expect(fetches >= 5, "\(fetches): tried again as each back-off passed")
            #expect(rig.api.state.calls("/cgi-bin/items") == 0)
        }
    }

    @Test("a wrong WeChat secret under 200 requests in 3 s: at most 4 token requests, every reply unavailable with Retry-After")
    func wrongWeChatSecretUnderLoad() async throws {
        let clock = ManualClock()
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.weChatEndpoints, extra: DialectTestConfig.weChat(),
                                        apiConfiguration: SampleAPIConfiguration(dialect: .wechat), environment: Self.wrongSecret,
                                        clock: clock) { rig in
            let answers = try await Self.spread(200, over: .seconds(3), clock: clock) { i in try await rig.get("/cgi-bin/items?i=\(i)") }
            let fetches = rig.api.state.tokenCalls
            print("wrong WeChat secret, 200 requests in 3 s: \(fetches) token requests")
            #expect(answers.count == 200)
            #expect(answers.allSatisfy { $0.status == 502 }, "\(Dictionary(grouping: answers.map(\.status), by: { $0 }).mapValues(\.count))")
            #expect(answers.allSatisfy { ($0.retryAfter ?? 0) >= 1 }, "every reply has Retry-After")
            #expect(fetches <= 4, "\(fetches) token requests")
            #expect(fetches >= 2, "tried again once the back-off passed")
            #expect(rig.api.state.calls("/cgi-bin/items") == 0, "no request went out without a token")
            // Each failed token request is counted once (/stats and concierge_token_request_failures_total).
            let stats = try await rig.admin(.GET, "/stats").json
            #expect(stats?[path: "token_request_failures"] == .int(Int64(fetches)))
            #expect(try await rig.admin(.GET, "/metrics").text.contains("\nconcierge_token_request_failures_total \(fetches)\n"))
        }
    }

    @Test("a provider answering 503 for 3 s under load: at most 5 token requests; the first request a second after it recovers succeeds")
    func outageUnderLoadThenRecovery() async throws {
        let clock = ManualClock()
        try await IdentityProviderTests.with(clock: clock) { rig in
            #expect(try await OAuth2DialectTests.login(rig).status == 200)
            rig.api.state.setTokenEndpointFault(.serverError)
            rig.api.state.expireAllAccessTokens()
            let answers = try await Self.spread(150, over: .seconds(3), clock: clock) { i in try await rig.get("/api/items?i=\(i)") }
            let fetches = rig.api.state.tokenCalls
            print("provider answering 503 for 3 s, 150 requests: \(fetches) token requests")
            #expect(answers.allSatisfy { $0.status == 502 && ($0.retryAfter ?? 0) >= 1 })
            #expect(fetches <= 5, "\(fetches) token requests")
            #expect(try await IdentityProviderTests.loggedIn(rig))
            rig.api.state.setTokenEndpointFault(nil)
            // A second of the daemon's clock after the last failure, the provider is asked again.
            clock.advance(by: 1.0)
            #expect(try await rig.get("/api/items?after=1").status == 200, "used within a second of its recovery")
        }
    }
}
