import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// Login guard, injection, capture, refresh-and-replay and logout.
@Suite("Session")
struct SessionTests {
    @Test("login: required without a session is answered locally; the upstream is not called")
    func guardWithoutSession() async throws {
        try await ConciergeTestRig.with { rig in
            let reply = try await rig.get("/api/user/info")
            #expect(reply.status == 401)
            #expect(reply.json == ["code": 800, "msg": "not logged in"])
            #expect(rig.api.state.calls("/api/user/info") == 0)
        }
    }

    @Test("a login success is captured and the token injected as a query param, replacing the client's")
    func captureAndQueryInjection() async throws {
        try await ConciergeTestRig.with { rig in
            let login = try await rig.login("alice")
            let token = try #require(login.json?[path: "data.result.accessToken"]?.stringValue)
            let info = try await rig.get("/api/user/info?accessToken=forged")
            #expect(info.code == 200)
            #expect(rig.api.state.lastRequest("/api/user/info")?.queryValue("accessToken") == token)
            let session = try await rig.admin(.GET, "/session")
            #expect(session.json?[path: "user_id"] == "alice")
            #expect(session.text.contains(token) == false)
        }
    }

    @Test("header injection with a format, and body-field injection into form and JSON bodies")
    func headerAndBodyInjection() async throws {
        let extra = TestConfig.defaultSession.replacingOccurrences(of: "    - query: accessToken",
                                                                   with: "    - header: Authorization\n      format: \"Bearer {access_token}\"\n    - body: accessToken")
        try await ConciergeTestRig.with(endpoints: TestConfig.defaultEndpoints + "\n- name: echoLogin\n  match: ~^/api/echo-never$", extra: extra) { rig in
            let login = try await rig.login("carol")
            let token = try #require(login.json?[path: "data.result.accessToken"]?.stringValue)
            let info = try await rig.get("/api/user/info", headers: [("Authorization", "Bearer forged")])
            #expect(info.code == 200)
            #expect(rig.api.state.lastRequest("/api/user/info")?.headers["authorization"] == "Bearer \(token)")
            // userInfo is GET: body injection does not apply, the header does. A POST endpoint with login gets the field.
            _ = try await rig.post("/api/user/update", form: "name=x&accessToken=forged")
            let form = rig.api.state.lastRequest("/api/user/update")?.body ?? ""
            #expect(form.contains("accessToken=\(token)"))
            #expect(!form.contains("forged"))
            _ = try await rig.postJSON("/api/user/update", ["name": "y"])
            let json = JSONValue.parse(rig.api.state.lastRequest("/api/user/update")?.body ?? "")
            #expect(json?[path: "accessToken"] == .string(token))
        }
    }

    @Test("801 → exactly one refresh and a successful replay, with X-Concierge-Replays: 1")
    func refreshAndReplay() async throws {
        try await ConciergeTestRig.with { rig in
            try await rig.login()
            rig.api.state.expireAllAccessTokens()
            let reply = try await rig.request(.GET, "/api/user/info", headers: [("Cache-Control", "no-cache")])
            #expect(reply.code == 200)
            #expect(reply.header("X-Concierge-Replays") == "1")
            #expect(rig.api.state.refreshCalls == 1)
            #expect(rig.api.state.calls("/api/user/info") == 2)
        }
    }

    @Test("500 concurrent requests on an expired token → exactly one refresh call and 500 successes")
    func refreshStorm() async throws {
        try await ConciergeTestRig.with(apiConfiguration: SampleAPIConfiguration(refreshDelay: .milliseconds(100))) { rig in
            try await rig.login()
            rig.api.state.expireAllAccessTokens()
            let single = ContinuousClock.now
            #expect(try await rig.get("/api/user/info?single=1").code == 200)
            let singleElapsed = ContinuousClock.now - single
            rig.api.state.expireAllAccessTokens()
            let started = ContinuousClock.now
            let codes = try await withThrowingTaskGroup(of: Int?.self) { group in
                for i in 0..<500 { group.addTask { try await rig.get("/api/user/info?i=\(i)").code } }
                var all: [Int?] = []
                for try await c in group { all.append(c) }
                return all
            }
            let elapsed = ContinuousClock.now - started
            #expect(codes.count == 500)
            #expect(codes.allSatisfy { $0 == 200 })
            #expect(rig.api.state.refreshCalls == 2)
            print("refresh storm: 500 requests on an expired token in \(elapsed); one request on an expired token: \(singleElapsed)")
        }
    }

    @Test("an upstream that always answers 801 gets no more than max_replays replays, then its reply is passed on")
    func replayLimit() async throws {
        try await ConciergeTestRig.with { rig in
            try await rig.login()
            let reply = try await rig.get("/api/always-expired")
            #expect(reply.code == 801)
            #expect(reply.header("X-Concierge-Replays") == "3")
            #expect(rig.api.state.calls("/api/always-expired") == 4)
            #expect(rig.api.state.refreshCalls == 3)
        }
    }

    @Test("a failed refresh drops the session and answers not_logged_in")
    func failedRefresh() async throws {
        try await ConciergeTestRig.with { rig in
            try await rig.login()
            rig.api.state.expireAllAccessTokens()
            // Revoke only refresh tokens' validity by revoking everything: the refresh answers 810.
            rig.api.state.revokeAllSessions()
            _ = rig
            let reply = try await rig.get("/api/always-expired")
            #expect(reply.status == 401)
            #expect(reply.code == 800)
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(false))
            #expect(try await rig.get("/api/user/info").status == 401)
        }
    }

    @Test("802 drops the session and the user's entries; the next request is answered locally")
    func logoutCode() async throws {
        try await ConciergeTestRig.with { rig in
            try await rig.login("dave")
            _ = try await rig.get("/api/user/info")
            _ = try await rig.get("/api/items")
            rig.api.state.revokeAllSessions()
            let reply = try await rig.get("/api/user/info", headers: [("Cache-Control", "no-cache")])
            #expect(reply.code == 802)
            #expect(try await rig.admin(.GET, "/session").json?[path: "logged_in"] == .bool(false))
            let keys = try await rig.admin(.GET, "/cache/entries").json?[path: "entries"]?.serialized ?? ""
            #expect(!keys.contains("user=dave"))
            #expect(keys.contains("/api/items"))
            let calls = rig.api.state.calls("/api/user/info")
            #expect(try await rig.get("/api/user/info").status == 401)
            #expect(rig.api.state.calls("/api/user/info") == calls)
        }
    }

    @Test("the session survives a restart")
    func sessionSurvivesRestart() async throws {
        try await ConciergeTestRig.with { rig in
            try await rig.login("erin")
            try await rig.withRestart { restarted in
                let info = try await restarted.get("/api/user/info")
                #expect(info.code == 200)
                #expect(info.json?[path: "data.result.userId"] == "erin")
            }
        }
    }

    @Test("tokens never appear in the log output, neither the session's nor one a client sent")
    func tokensMaskedInLogs() async throws {
        try await ConciergeTestRig.with { rig in
            let login = try await rig.login("frank")
            let access = try #require(login.json?[path: "data.result.accessToken"]?.stringValue)
            let refresh = try #require(login.json?[path: "data.result.refreshToken"]?.stringValue)
            rig.api.state.expireAllAccessTokens()
            _ = try await rig.get("/api/user/info")
            _ = try await rig.get("/api/echo?accessToken=client-secret-token-123")
            let log = rig.logText
            #expect(log.contains("/api/user/info"))
            #expect(!log.contains(access))
            #expect(!log.contains(refresh))
            #expect(!log.contains("client-secret-token-123"))
            let newAccess = try #require(await rig.daemon.session.current?.accessToken)
            #expect(!log.contains(newAccess))
        }
    }
}
