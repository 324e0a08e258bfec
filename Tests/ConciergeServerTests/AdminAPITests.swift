import ConciergeCore
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// The admin API (docs/admin-api.md) against a running daemon.
@Suite("Admin API")
struct AdminAPITests {
    @Test("every route but /health needs the bearer token; a wrong token is 401")
    func authentication() async throws {
        try await ConciergeTestRig.with { rig in
            let health = try await rig.admin(.GET, "/health", token: nil)
            #expect(health.json == ["status": "ok"])
            let missing = try await rig.admin(.GET, "/stats", token: nil)
            #expect(missing.status == 401)
            let wrong = try await rig.admin(.GET, "/stats", token: "wrong")
            #expect(wrong.status == 401)
            let longer = try await rig.admin(.GET, "/stats", token: ConciergeTestRig.adminToken + "x")
            #expect(longer.status == 401)
            let right = try await rig.admin(.GET, "/stats")
            #expect(right.status == 200)
        }
    }

    @Test("invalidation by regex, endpoint and all removes exactly the matching entries and returns the count")
    func invalidation() async throws {
        try await ConciergeTestRig.with { rig in
            for i in 0..<6 { _ = try await rig.get("/api/items?limit=\(i)") }
            for i in 1...3 { _ = try await rig.get("/api/items/\(i)") }
            let byRegex = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": "limit=[0-2]&"])
            #expect(byRegex.json == ["removed": 3])
            #expect(try await rig.get("/api/items?limit=1").header("X-Cache") == "MISS")
            #expect(try await rig.get("/api/items?limit=4").header("X-Cache") == "HIT")
            let byEndpoint = try await rig.admin(.POST, "/cache/invalidate", json: ["endpoint": "item"])
            #expect(byEndpoint.json == ["removed": 3])
            #expect(try await rig.get("/api/items?limit=5").header("X-Cache") == "HIT")
            let all = try await rig.admin(.POST, "/cache/invalidate", json: ["all": true])
            #expect(all.json == ["removed": 4])
            #expect(try await rig.admin(.GET, "/stats").json?[path: "entries"] == .int(0))
        }
    }

    @Test("a bad regex is 400 with the reason; an unknown endpoint is 404; a malformed body is 400")
    func invalidationErrors() async throws {
        try await ConciergeTestRig.with { rig in
            let bad = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": "([unclosed"])
            #expect(bad.status == 400)
            #expect(bad.json?[path: "error"]?.stringValue?.hasPrefix("invalid regex") == true)
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["endpoint": "nope"]).status == 404)
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["all": true, "pattern": "x"]).status == 400)
        }
    }

    @Test("entries page with limit and cursor, filter by pattern, and never show tokens")
    func entriesPaging() async throws {
        try await ConciergeTestRig.with { rig in
            try await rig.login("gina")
            _ = try await rig.get("/api/user/info")
            for i in 0..<5 { _ = try await rig.get("/api/items?limit=\(i)") }
            var keys: [String] = []
            var cursor: String? = nil
            var pages = 0
            repeat {
                let query = "limit=2" + (cursor.map { "&cursor=\(QueryString.percentEncode($0))" } ?? "")
                let page = try await rig.admin(.GET, "/cache/entries?\(query)")
                guard case .array(let entries)? = page.json?[path: "entries"] else { Issue.record("no entries"); break }
                keys += entries.compactMap { $0[path: "key"]?.stringValue }
                cursor = page.json?[path: "next"]?.stringValue
                pages += 1
            } while cursor != nil && pages < 10
            #expect(keys.count == 6)
            #expect(Set(keys).count == 6)
            #expect(pages == 3)
            let filtered = try await rig.admin(.GET, "/cache/entries?pattern=\(QueryString.percentEncode("user="))")
            #expect(filtered.json?[path: "entries.0.user"] == "gina")
            let token = rig.daemon.session.current?.accessToken ?? "?"
            #expect(!filtered.text.contains(token))
        }
    }

    @Test("after a mixed load /stats and /metrics report the same value for every counter")
    func statsEqualMetrics() async throws {
        try await ConciergeTestRig.with { rig in
            var sent = 0
            func send(_ work: () async throws -> TestResponse) async rethrows {
                _ = try await work()
                sent += 1
            }
            try await send { try await rig.login("ivy") }
            try await send { try await rig.get("/api/items") }
            try await send { try await rig.get("/api/items") }
            try await send { try await rig.get("/api/items", headers: [("Cache-Control", "no-cache")]) }
            try await send { try await rig.get("/api/user/info") }
            try await send { try await rig.get("/api/user/info") }
            try await send { try await rig.get("/api/always-expired") }
            try await send { try await rig.get("/api/fail") }
            try await send { try await rig.get("/api/echo?x=1") }
            let batch: JSONValue = ["requests": [["id": "a", "method": "GET", "path": "/api/items"],
                                                 ["id": "b", "method": "GET", "path": "/api/items/7"]]]
            try await send { try await rig.postJSON("/_concierge/batch", batch) }
            sent += 2  // the batch's sub-requests are counted one by one
            _ = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": "items/7"])
            _ = try await rig.admin(.DELETE, "/session")
            // A request is counted once its reply is written: wait for the last one.
            let expected = sent
            #expect(try await eventually { try await rig.admin(.GET, "/stats").json?[path: "requests"] == .int(Int64(expected)) })
            let stats = try #require(try await rig.admin(.GET, "/stats").json)
            let metrics = try await rig.admin(.GET, "/metrics").text
            let names = ["requests", "hits", "misses", "stale", "bypass", "refreshes", "replays", "logouts", "upstream_errors", "invalidations"]
            for name in names {
                let value = try #require(stats[path: name]?.intValue, "\(name)")
                #expect(metrics.contains("\nconcierge_\(name)_total \(value)\n"), "\(name) = \(value) in /stats")
            }
            for name in ["hits", "misses", "bypass", "refreshes", "replays", "logouts", "upstream_errors", "invalidations"] {
                #expect((stats[path: name]?.intValue ?? 0) > 0, "\(name) was exercised")
            }
        }
    }

    @Test("stats and metrics agree with the traffic sent")
    func statsAndMetrics() async throws {
        try await ConciergeTestRig.with { rig in
            _ = try await rig.get("/api/items")
            _ = try await rig.get("/api/items")
            _ = try await rig.get("/api/items", headers: [("Cache-Control", "no-cache")])
            _ = try await rig.get("/api/echo")
            let stats = try #require(try await rig.admin(.GET, "/stats").json)
            #expect(stats[path: "requests"] == .int(4))
            #expect(stats[path: "hits"] == .int(1))
            #expect(stats[path: "misses"] == .int(1))
            #expect(stats[path: "bypass"] == .int(1))
            #expect(stats[path: "entries"] == .int(1))
            for key in ["stale", "refreshes", "replays", "logouts", "upstream_errors", "bytes"] { #expect(stats[path: key] != nil, "\(key)") }
            let metrics = try await rig.admin(.GET, "/metrics").text
            #expect(metrics.contains("concierge_requests_total 4"))
            #expect(metrics.contains("concierge_hits_total 1"))
            #expect(metrics.contains("concierge_upstream_duration_seconds_bucket"))
            #expect(metrics.contains(#"concierge_requests_by_endpoint_total{endpoint="itemList",cache="HIT",status="200"} 1"#))
        }
    }

    @Test("PUT /environment switches the upstream at run time and keys never mix")
    func environmentSwitch() async throws {
        try await ConciergeTestRig.with(endpoints: "- name: items\n  match: GET /api/items\n  cache: { ttl: 60s }") { rig in
            _ = try await rig.get("/api/items")
            #expect(try await rig.admin(.PUT, "/environment", json: ["environment": "down"]).json == ["environment": "down"])
            #expect(try await rig.admin(.GET, "/environment").json?[path: "environment"] == "down")
            #expect(try await rig.get("/api/items").status == 502)
            #expect(try await rig.admin(.PUT, "/environment", json: ["environment": "nowhere"]).status == 404)
            _ = try await rig.admin(.PUT, "/environment", json: ["environment": "debug"])
            #expect(try await rig.get("/api/items").header("X-Cache") == "HIT")
        }
    }

    @Test("reload applies a valid file and keeps the running config on an invalid one")
    func reload() async throws {
        try await ConciergeTestRig.with { rig in
            let original = try String(contentsOfFile: rig.configPath, encoding: .utf8)
            try original.replacingOccurrences(of: "app_version: \"1.4.0\"", with: "app_version: \"2.0.0\"")
                .write(toFile: rig.configPath, atomically: true, encoding: .utf8)
            let good = try await rig.admin(.POST, "/reload")
            #expect(good.json?[path: "reloaded"] == .bool(true))
            _ = try await rig.get("/api/echo")
            #expect(rig.api.state.lastRequest("/api/echo")?.queryValue("app_version") == "2.0.0")
            try (original + "\nbogus_key: 1\n").write(toFile: rig.configPath, atomically: true, encoding: .utf8)
            let bad = try await rig.admin(.POST, "/reload")
            #expect(bad.status == 422)
            #expect(bad.json?[path: "error"]?.stringValue?.contains("bogus_key") == true)
            _ = try await rig.get("/api/echo")
            #expect(rig.api.state.lastRequest("/api/echo")?.queryValue("app_version") == "2.0.0")
        }
    }

    @Test("a reload applies a new storage.max_bytes at once; a new memory_bytes is noted as needing a restart")
    func reloadStorageBounds() async throws {
        try await ConciergeTestRig.with { rig in
            #expect(rig.daemon.cache.maxBytes == 64 << 20)
            let original = try String(contentsOfFile: rig.configPath, encoding: .utf8)
            try original.replacingOccurrences(of: "max_bytes: 64MB", with: "max_bytes: 2MB")
                .replacingOccurrences(of: "memory_bytes: 8MB", with: "memory_bytes: 4MB")
                .write(toFile: rig.configPath, atomically: true, encoding: .utf8)
            let reply = try await rig.admin(.POST, "/reload")
            #expect(reply.json?[path: "reloaded"] == .bool(true))
            #expect(rig.daemon.cache.maxBytes == 2 << 20)
            #expect(reply.json?[path: "message"]?.stringValue?.contains("storage.memory_bytes changes only on restart") == true, "\(reply.text)")
        }
    }

    @Test("PUT and DELETE /session set tokens by hand and log out (dropping the user's entries)")
    func sessionControl() async throws {
        try await ConciergeTestRig.with { rig in
            let login = try await rig.login("hank")
            let token = try #require(login.json?[path: "data.result.accessToken"]?.stringValue)
            _ = try await rig.admin(.DELETE, "/session")
            #expect(try await rig.get("/api/user/info").status == 401)
            let set = try await rig.admin(.PUT, "/session", json: ["access_token": .string(token), "user_id": "hank"])
            #expect(set.json?[path: "logged_in"] == .bool(true))
            #expect(!set.text.contains(token))
            #expect(try await rig.get("/api/user/info").code == 200)
        }
    }
}
