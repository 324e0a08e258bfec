import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// Batch and chain through the whole pipeline.
@Suite("Batch and chain")
struct BatchChainTests {
    @Test("four requests in a batch run concurrently: each waits at a gate until all four have arrived")
    func batchIsConcurrent() async throws {
        try await ConciergeTestRig.with { rig in
            // One after another, the first would wait at the gate alone until its 5 s ran out.
            let requests: [JSONValue] = (0..<4).map { ["id": .string("r\($0)"), "path": .string("/api/gate?n=4&r=\($0)")] }
            let reply = try await rig.postJSON("/_concierge/batch", ["requests": .array(requests)])
            #expect(reply.json?[path: "ok"] == .bool(true))
            for i in 0..<4 {
                #expect(reply.json?[path: "results.r\(i).status"] == .int(200))
                #expect(reply.json?[path: "results.r\(i).body.data.gathered"] == .bool(true), "\(reply.text)")
            }
        }
    }

    @Test("sub-requests fill and hit the cache; the result carries status, headers, body and cache status")
    func batchUsesCache() async throws {
        try await ConciergeTestRig.with { rig in
            let body: JSONValue = ["requests": [["id": "a", "path": "/api/items?limit=1"], ["id": "b", "method": "GET", "path": "/api/items/3"]]]
            let first = try await rig.postJSON("/_concierge/batch", body)
            #expect(first.json?[path: "results.a.cache"] == "MISS")
            #expect(first.json?[path: "results.b.body.data.result.id"] == .int(3))
            let second = try await rig.postJSON("/_concierge/batch", body)
            #expect(second.json?[path: "results.a.cache"] == "HIT")
            #expect(second.json?[path: "results.b.cache"] == "HIT")
            #expect(second.json?[path: "results.a.headers.X-Cache"] == "HIT")
            #expect(rig.api.state.calls("/api/items") == 1)
        }
    }

    @Test("fail_fast replies at the first failure, the rest cancelled and their upstream calls not completed")
    func failFast() async throws {
        // The slow calls may take 60 s here (the default `slow` endpoint times out after 2 s:
        // on a loaded machine that timeout, a failure too, once came before the business error).
        let endpoints = """
            - { name: businessError, match: "GET /api/business-error", cache: { ttl: 60s } }
            - { name: slow, match: "GET /api/slow", timeout: 60s }
            - { name: itemList, match: "GET,POST /api/items", cache: { ttl: 60s } }
            """
        try await ConciergeTestRig.with(endpoints: endpoints) { rig in
            let body: JSONValue = ["mode": "fail_fast", "requests": [
                ["id": "bad", "path": "/api/business-error"],
                ["id": "slow1", "path": "/api/slow?ms=15000&n=1"],
                ["id": "slow2", "path": "/api/slow?ms=15000&n=2"],
            ]]
            let started = ContinuousClock.now
            let reply = try await rig.postJSON("/_concierge/batch", body)
            let elapsed = ContinuousClock.now - started
            #expect(reply.json?[path: "ok"] == .bool(false))
            #expect(reply.json?[path: "results.bad.body.code"] == .int(1002))
            #expect(reply.json?[path: "results.slow1.cancelled"] == .bool(true))
            #expect(reply.json?[path: "results.slow2.cancelled"] == .bool(true))
            // The reply came before the 15 s calls could finish: they were cancelled, not awaited.
            #expect(elapsed < .seconds(14))
            // mode all: everything runs and ok is false.
            let all = try await rig.postJSON("/_concierge/batch", ["requests": [["id": "x", "path": "/api/business-error"], ["id": "y", "path": "/api/items"]]])
            #expect(all.json?[path: "ok"] == .bool(false))
            #expect(all.json?[path: "results.y.status"] == .int(200))
        }
    }

    @Test("a batch of 20 on an expired token makes exactly one refresh")
    func batchSharesRefresh() async throws {
        try await ConciergeTestRig.with(apiConfiguration: SampleAPIConfiguration(refreshDelay: .milliseconds(50))) { rig in
            try await rig.login()
            rig.api.state.expireAllAccessTokens()
            let requests: [JSONValue] = (0..<20).map { ["id": .string("u\($0)"), "path": .string("/api/user/info?n=\($0)")] }
            let reply = try await rig.postJSON("/_concierge/batch", ["requests": .array(requests)])
            #expect(reply.json?[path: "ok"] == .bool(true))
            #expect(rig.api.state.refreshCalls == 1)
        }
    }

    @Test("chain: login then profile with the user id templated; whole-string templates keep their JSON type")
    func chainTemplates() async throws {
        try await ConciergeTestRig.with { rig in
            let body: JSONValue = ["steps": [
                ["id": "login", "method": "POST", "path": "/api/login", "body": ["username": "ivy", "password": "pw"]],
                ["id": "item", "path": "/api/items/{{login.code}}"],
                ["id": "echo", "method": "POST", "path": "/api/echo?user={{login.data.result.userId}}",
                 "headers": ["X-User": "{{login.data.result.userId}}"], "body": ["code": "{{item.code}}", "who": "user {{login.data.result.userId}}"]],
            ]]
            let reply = try await rig.postJSON("/_concierge/chain", body)
            #expect(reply.json?[path: "ok"] == .bool(true))
            #expect(reply.json?[path: "results.1.body.data.result.id"] == .int(200))
            let seen = try #require(rig.api.state.lastRequest("/api/echo"))
            #expect(seen.queryValue("user") == "ivy")
            #expect(seen.headers["x-user"] == "ivy")
            let sent = JSONValue.parse(seen.body)
            #expect(sent?[path: "code"] == .int(200))
            #expect(sent?[path: "who"] == "user ivy")
            #expect(reply.json?[path: "results.2.id"] == "echo")
        }
    }

    @Test("chain stops at the first failure and lists only the steps that ran")
    func chainStops() async throws {
        try await ConciergeTestRig.with { rig in
            let reply = try await rig.postJSON("/_concierge/chain", ["steps": [
                ["id": "a", "path": "/api/items"], ["id": "b", "path": "/api/business-error"], ["id": "c", "path": "/api/items/1"],
            ]])
            #expect(reply.json?[path: "ok"] == .bool(false))
            guard case .array(let results)? = reply.json?[path: "results"] else { Issue.record("no results"); return }
            #expect(results.count == 2)
            #expect(rig.api.state.calls("/api/items/1") == 0)
        }
    }

    @Test("bad input is 400 naming the problem")
    func badInput() async throws {
        try await ConciergeTestRig.with { rig in
            let cases: [(String, String, String)] = [
                ("/_concierge/batch", "not json", "JSON"),
                ("/_concierge/batch", #"{"requests": [{"id": "a", "path": "/x"}, {"id": "a", "path": "/y"}]}"#, "duplicate id"),
                ("/_concierge/batch", #"{"requests": [{"id": "a", "path": "/_concierge/batch"}]}"#, "nested"),
                ("/_concierge/batch", #"{"mode": "sometimes", "requests": [{"id": "a", "path": "/x"}]}"#, "mode"),
                ("/_concierge/batch", #"{"requests": [{"id": "a"}]}"#, "path"),
                ("/_concierge/chain", #"{"steps": [{"id": "a", "path": "/api/items/{{zzz.data}}"}]}"#, "zzz"),
                ("/_concierge/chain", #"{"steps": [{"id": "a", "path": "/api/items"}, {"id": "b", "path": "/api/items/{{a.data.nothing}}"}]}"#, "unknown template path"),
            ]
            for (path, body, expected) in cases {
                let reply = try await rig.request(.POST, path, headers: [("Content-Type", "application/json")], body: body)
                #expect(reply.status == 400, "\(body)")
                #expect(reply.json?[path: "error"]?.stringValue?.contains(expected) == true, "\(body): \(reply.text)")
            }
            let many: [JSONValue] = (0..<101).map { ["id": .string("r\($0)"), "path": "/api/items"] }
            let tooMany = try await rig.postJSON("/_concierge/batch", ["requests": .array(many)])
            #expect(tooMany.status == 400)
            #expect(tooMany.json?[path: "error"]?.stringValue?.contains("too many") == true)
        }
    }
}
