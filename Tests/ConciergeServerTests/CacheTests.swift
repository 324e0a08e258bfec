import ConciergeCore
@testable import ConciergeServer
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// The cache through the whole daemon (lookup, coalescing, reply headers, storage), against the counting
/// sample API.
@Suite("Cache")
struct CacheTests {
    @Test("a first request is a MISS and stored, the second a HIT with Age and Cache-Status, the upstream is called once")
    func missThenHit() async throws {
        // The daemon's clock stands still: the hit's `Age` is 0 however long the machine takes.
        try await ConciergeTestRig.with(clock: ManualClock()) { rig in
            let first = try await rig.get("/api/items?limit=2")
            #expect(first.header("X-Cache") == "MISS")
            #expect(first.header("Cache-Status") == "concierge; fwd=miss; stored")
            let second = try await rig.get("/api/items?limit=2")
            #expect(second.header("X-Cache") == "HIT")
            #expect(second.header("Cache-Status")?.hasPrefix("concierge; hit; ttl=") == true)
            #expect(second.header("Age") == "0")
            #expect(second.text == first.text)
            #expect(rig.api.state.calls("/api/items") == 1)
        }
    }

    @Test("an entry expires after its TTL")
    func ttlExpiry() async throws {
        let clock = ManualClock()
        try await ConciergeTestRig.with(endpoints: "- name: items\n  match: GET /api/items\n  cache: { ttl: 1s }", clock: clock) { rig in
            _ = try await rig.get("/api/items")
            #expect(try await rig.get("/api/items").header("X-Cache") == "HIT")
            clock.advance(by: 1.1)
            #expect(try await rig.get("/api/items").header("X-Cache") == "MISS")
            #expect(rig.api.state.calls("/api/items") == 2)
        }
    }

    @Test("parameter order does not matter and a volatile timestamp is ignored")
    func canonicalParams() async throws {
        try await ConciergeTestRig.with { rig in
            _ = try await rig.get("/api/items?b=2&a=1&timestamp=1")
            let reordered = try await rig.get("/api/items?a=1&b=2&timestamp=99")
            #expect(reordered.header("X-Cache") == "HIT")
            #expect(rig.api.state.calls("/api/items") == 1)
            let entries = try await rig.admin(.GET, "/cache/entries")
            let key = entries.json?[path: "entries.0.key"]?.stringValue
            #expect(key == "GET http://127.0.0.1:\(rig.api.port)/api/items?a=1&app_version=1.4.0&b=2&platform=linux v=1")
        }
    }

    @Test("POST form params are part of the key and POST replies are cached")
    func postFormCached() async throws {
        try await ConciergeTestRig.with { rig in
            _ = try await rig.post("/api/items", form: "limit=3&offset=1")
            #expect(try await rig.post("/api/items", form: "offset=1&limit=3").header("X-Cache") == "HIT")
            #expect(try await rig.post("/api/items", form: "offset=2&limit=3").header("X-Cache") == "MISS")
            #expect(rig.api.state.calls("/api/items") == 2)
        }
    }

    @Test("logical failures, non-JSON, empty, 5xx and no-store replies are never cached")
    func failuresNeverCached() async throws {
        try await ConciergeTestRig.with { rig in
            for path in ["/api/business-error", "/api/nonjson", "/api/empty", "/api/fail", "/api/nostore"] {
                _ = try await rig.get(path)
                let again = try await rig.get(path)
                #expect(again.header("X-Cache") == "MISS", "\(path)")
                #expect(rig.api.state.calls(path) == 2, "\(path)")
            }
            #expect(try await rig.admin(.GET, "/stats").json?[path: "entries"] == .int(0))
        }
    }

    @Test("Cache-Control: no-cache and X-Concierge-Cache: bypass skip the lookup and store the fresh reply")
    func bypass() async throws {
        try await ConciergeTestRig.with { rig in
            _ = try await rig.get("/api/items")
            let bypassed = try await rig.get("/api/items", headers: [("Cache-Control", "no-cache")])
            #expect(bypassed.header("X-Cache") == "BYPASS")
            #expect(bypassed.header("Cache-Status") == "concierge; fwd=request; stored")
            #expect(bypassed.json?[path: "data.served"] == .int(2))
            let hit = try await rig.get("/api/items")
            #expect(hit.header("X-Cache") == "HIT")
            #expect(hit.json?[path: "data.served"] == .int(2))
            #expect(try await rig.get("/api/items", headers: [("X-Concierge-Cache", "bypass")]).header("X-Cache") == "BYPASS")
            #expect(rig.api.state.calls("/api/items") == 3)
        }
    }

    @Test("50 concurrent identical misses make exactly one upstream call and all get the reply")
    func coalescing() async throws {
        try await ConciergeTestRig.with(endpoints: "- name: slow\n  match: GET /api/slow\n  cache: { ttl: 60s }") { rig in
            let replies = try await withThrowingTaskGroup(of: TestResponse.self) { group in
                for _ in 0..<50 { group.addTask { try await rig.get("/api/slow?ms=300") } }
                var all: [TestResponse] = []
                for try await r in group { all.append(r) }
                return all
            }
            #expect(replies.count == 50)
            #expect(replies.allSatisfy { $0.status == 200 && $0.code == 200 })
            #expect(rig.api.state.calls("/api/slow") == 1)
        }
    }

    @Test("within stale-while-revalidate an expired entry is served at once and refreshed in the background, once")
    func staleWhileRevalidate() async throws {
        let clock = ManualClock()
        try await ConciergeTestRig.with(endpoints: "- name: items\n  match: GET /api/items\n  cache: { ttl: 1s, stale_while_revalidate: 30s }",
                                        clock: clock) { rig in
            _ = try await rig.get("/api/items")
            clock.advance(by: 1.1)
            let stale = try await rig.get("/api/items")
            #expect(stale.header("X-Cache") == "STALE")
            #expect(stale.json?[path: "data.served"] == .int(1))
            #expect(await eventually { rig.api.state.calls("/api/items") == 2 })
            #expect(try await eventually { try await rig.get("/api/items").header("X-Cache") == "HIT" })
            let fresh = try await rig.get("/api/items")
            #expect(fresh.header("X-Cache") == "HIT")
            #expect(fresh.json?[path: "data.served"] == .int(2))
            // No second refresh: none is queued or running, and the upstream saw two calls.
            let revalidation = rig.daemon.pipeline.revalidation
            #expect(await eventually { revalidation.pendingKeys.isEmpty })
            #expect(rig.api.state.calls("/api/items") == 2)
        }
    }

    @Test("within stale-if-error an expired entry is served when the upstream fails; past it the unavailable reply")
    func staleIfError() async throws {
        let clock = ManualClock()
        try await ConciergeTestRig.with(endpoints: "- name: items\n  match: GET /api/items\n  cache: { ttl: 1s, stale_if_error: 1h }",
                                        clock: clock) { rig in
            _ = try await rig.get("/api/items")
            clock.advance(by: 1.1)
            await rig.api.shutdown()
            let stale = try await rig.get("/api/items")
            #expect(stale.status == 200)
            #expect(stale.header("X-Cache") == "STALE")
            #expect(stale.json?[path: "data.served"] == .int(1))
            let other = try await rig.get("/api/items?limit=1")
            #expect(other.status == 502)
        }
    }

    @Test("entries survive a restart (SQLite is the source of truth) and a version bump drops them")
    func survivesRestartAndVersionBump() async throws {
        try await ConciergeTestRig.with { rig in
            _ = try await rig.get("/api/items?limit=4")
            try await rig.withRestart { restarted in
                let hit = try await restarted.get("/api/items?limit=4")
                #expect(hit.header("X-Cache") == "HIT")
                #expect(restarted.api.state.calls("/api/items") == 1)
                try await restarted.withRestart(configTransform: { $0.replacingOccurrences(of: "log:\n", with: "cache:\n  version: 2\nlog:\n") }) { bumped async throws in
                    #expect(try await bumped.get("/api/items?limit=4").header("X-Cache") == "MISS")
                    #expect(await eventually { (try? await bumped.admin(.GET, "/cache/entries"))?.json?[path: "entries"]?.serialized.contains("v=1") == false })
                }
            }
        }
    }

    @Test("user-scoped entries: user A's entry is never served to user B")
    func userScope() async throws {
        try await ConciergeTestRig.with { rig in
            try await rig.login("alice")
            let a = try await rig.get("/api/user/info")
            #expect(a.json?[path: "data.result.userId"] == "alice")
            try await rig.login("bob")
            let b = try await rig.get("/api/user/info")
            #expect(b.header("X-Cache") == "MISS")
            #expect(b.json?[path: "data.result.userId"] == "bob")
            let keys = try await rig.admin(.GET, "/cache/entries").json?[path: "entries"]?.serialized ?? ""
            #expect(keys.contains("user=alice"))
            #expect(keys.contains("user=bob"))
            #expect(!keys.contains("at-"))
        }
    }
}

@Suite("Hits as ready bytes")
struct EncodedHitTests {
    @Test("pipelined requests on one connection are answered in order: hits as ready bytes among a miss and a passed-through HEAD")
    func pipelinedInOrder() async throws {
        try await ConciergeTestRig.with { rig in
            #expect(try await rig.get("/api/items?limit=2").header("X-Cache") == "MISS")
            let socket = try RawSocket(port: rig.proxyPort, timeout: .seconds(5))
            let requests = [
                "GET /api/items?limit=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",      // hit, ready bytes
                "GET /api/items?limit=3 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",      // miss, by callbacks on the loop
                "HEAD /api/items?limit=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",     // not the endpoint's method: passed through, no body
                "GET /api/items?limit=2 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",  // hit, closes
            ]
            socket.send(requests.joined())
            let text = await socket.receive { $0.components(separatedBy: "HTTP/1.1 200 OK").count == 5 && $0.hasSuffix("}") }
            let replies = text.components(separatedBy: "HTTP/1.1 200 OK").dropFirst().map { String($0) }
            #expect(replies.count == 4)
            guard replies.count == 4 else { return }
            #expect(replies[0].contains("X-Cache: HIT") && replies[0].contains("Cache-Status: concierge; hit; ttl="))
            #expect(replies[0].contains("\"served\":1"))
            #expect(replies[1].contains("X-Cache: MISS"))
            #expect(!replies[2].contains("X-Cache") && !replies[2].contains("{"))
            #expect(replies[3].contains("X-Cache: HIT") && replies[3].lowercased().contains("connection: close"))
            for reply in replies.enumerated().filter({ $0.offset != 2 }).map(\.element) {
                // Each body is exactly Content-Length bytes: nothing of one reply runs into the next.
                let length = reply.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
                let body = reply.components(separatedBy: "\r\n\r\n").last ?? ""
                #expect(body.utf8.count == length, "\(reply)")
            }
        }
    }

    @Test("a ready-bytes hit carries the stored headers, Age and the remaining ttl")
    func encodedHeaders() async throws {
        try await ConciergeTestRig.with { rig in
            let began = ContinuousClock.now
            _ = try await rig.get("/api/items?limit=4")
            let text = try await RawHTTP.send("GET /api/items?limit=4 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", port: rig.proxyPort)
            // Whole seconds since before the entry was stored: Age is at most that (0 or 1 on
            // an idle machine), and the ttl left is the rest of the 60 s.
            let waited = Int((ContinuousClock.now - began) / .seconds(1))
            #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(text.contains("\r\nContent-Type: application/json"))
            #expect(text.contains("\r\nX-Cache: HIT\r\n"))
            let lines = text.split(separator: "\r\n")
            let age = lines.first { $0.hasPrefix("Age: ") }.flatMap { Int($0.dropFirst(5)) }
            let status = lines.first { $0.hasPrefix("Cache-Status: ") } ?? ""
            let ttl = status.range(of: "ttl=").flatMap { field in Int(status[field.upperBound...].prefix { $0.isNumber }) }
            let stored = try #require(age, "no Age: \(text)")
            #expect((0...waited + 1).contains(stored), "Age \(stored) after \(waited) s")
            #expect(ttl.map { abs($0 - (60 - stored)) <= 1 } == true, "ttl \(String(describing: ttl)) with Age \(stored): \(text)")
        }
    }
}

/// A client's own `Authorization` or `Cookie` is part of who a reply belongs to.
@Suite("Client credentials and shared entries")
struct ClientCredentialsCacheTests {
    @Test("alice and bob with their own Authorization never share a reply, and neither reply is served to a client without one")
    func ownAuthorizationNeverShared() async throws {
        try await ConciergeTestRig.with(endpoints: "- name: items\n  match: GET /api/items\n  cache: { ttl: 60s }") { rig in
            let alice = try await rig.get("/api/items?page=1", headers: [("Authorization", "Bearer alice-own")])
            let bob = try await rig.get("/api/items?page=1", headers: [("Authorization", "Bearer bob-own")])
            #expect(alice.header("X-Cache") == "MISS")
            #expect(bob.header("X-Cache") == "MISS")
            #expect(alice.header("Cache-Status")?.contains("stored") != true)
            let anonymous = try await rig.get("/api/items?page=1")
            #expect(anonymous.header("X-Cache") == "MISS", "nothing was stored from alice's or bob's request")
            #expect(try await rig.get("/api/items?page=1").header("X-Cache") == "HIT", "a request without credentials is shared")
            let aliceAgain = try await rig.get("/api/items?page=1", headers: [("Authorization", "Bearer alice-own")])
            #expect(aliceAgain.header("X-Cache") == "MISS", "the shared entry is not served to a client with credentials")
            #expect(rig.api.state.calls("/api/items") == 4)
        }
    }

    @Test("a client's own Cookie keeps it out of shared entries too")
    func ownCookieNeverShared() async throws {
        try await ConciergeTestRig.with(endpoints: "- name: items\n  match: GET /api/items\n  cache: { ttl: 60s }") { rig in
            _ = try await rig.get("/api/items?c=1", headers: [("Cookie", "sid=alice")])
            #expect(try await rig.get("/api/items?c=1", headers: [("Cookie", "sid=bob")]).header("X-Cache") == "MISS")
            #expect(rig.api.state.calls("/api/items") == 2)
        }
    }

    @Test("scope: shared said explicitly shares replies whatever credentials the client sent")
    func explicitSharedScope() async throws {
        try await ConciergeTestRig.with(endpoints: "- name: items\n  match: GET /api/items\n  cache: { ttl: 60s, scope: shared }") { rig in
            _ = try await rig.get("/api/items?s=1", headers: [("Authorization", "Bearer alice-own")])
            #expect(try await rig.get("/api/items?s=1", headers: [("Authorization", "Bearer bob-own")]).header("X-Cache") == "HIT")
            #expect(rig.api.state.calls("/api/items") == 1)
        }
    }
}
