import ConciergeCore
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// Cache tags (`cache.tags`, `cache.tags_header`, `{"tags": [...]}`) and soft purge
/// (`"soft": true`), end to end against an origin whose replies each test chooses.
@Suite("Cache tags and soft purge")
struct TagsAndSoftPurgeTests {
    static let endpoints = """
        - name: taggedItem
          match: GET /t/items/{id}
          upstream: origin
          cache: { ttl: 10m, tags: ["item:{id}", "items", "owner:{data.result.ownerId}", "shop:{query.shop}"], tags_header: Surrogate-Key }
        - name: mine
          match: GET /t/mine/{id}
          upstream: origin
          login: required
          cache: { ttl: 10m, tags: ["item:{id}"] }
        - name: lenient
          match: GET /t/soft/lenient
          upstream: origin
          cache: { ttl: 10m, stale_while_revalidate: 1m }
        - name: safetyNet
          match: GET /t/soft/net
          upstream: origin
          cache: { ttl: 10m, stale_if_error: 1h }
        - name: strict
          match: GET /t/soft/strict
          upstream: origin
          cache: { ttl: 10m }
        """

    static func envelope(_ data: String) -> String { #"{"code":200,"msg":"ok","data":\#(data)}"# }

    func withRig(_ origin: HTTPTestOrigin, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(origin: origin, endpoints: Self.endpoints, body)
    }


    func entries(_ rig: ConciergeTestRig, _ pattern: String) async throws -> [JSONValue] {
        let reply = try await rig.admin(.GET, "/cache/entries?pattern=" + (pattern.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""))
        return reply.json?[path: "entries"]?.arrayValue ?? []
    }

    @Test("templates (path param, query param, JSON path with an array), the tags header (stripped), listed in /cache/entries, invalidated by any tag")
    func tags() async throws {
        let origin = try await HTTPTestOrigin.start { request, n in
            let owner = request.path.hasSuffix("/2") ? "[7, 8]" : "42"
            return .init(headers: [("Content-Type", "application/json"), ("Surrogate-Key", "cat:books promo")],
                         body: Self.envelope(#"{"result":{"ownerId":\#(owner),"n":\#(n)}}"#))
        }
        try await withRig(origin) { rig in
            let first = try await rig.get("/t/items/1?shop=9")
            #expect(first.status == 200 && first.header("Surrogate-Key") == nil, "the tags header never reaches the client")
            _ = try await rig.get("/t/items/2")
            let listed = try await entries(rig, "/t/items/1")
            #expect(listed.first?[path: "tags"] == ["cat:books", "item:1", "items", "owner:42", "promo", "shop:9"])
            #expect(try await entries(rig, "/t/items/2").first?[path: "tags"] == ["cat:books", "item:2", "items", "owner:7", "owner:8", "promo"],
                    "an array: a tag per element; a missing query param: no shop tag")

            let one = try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["item:1"]])
            #expect(one.json == ["removed": 1])
            #expect(try await rig.get("/t/items/1?shop=9").header("X-Cache") == "MISS")
            #expect(try await rig.get("/t/items/2").header("X-Cache") == "HIT")
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["owner:8", "nothing"]]).json == ["removed": 1])
            #expect(try await rig.get("/t/items/2").header("X-Cache") == "MISS")
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["promo"]]).json == ["removed": 2])
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["tags": []]).status == 400)
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["a"], "endpoint": "mine"]).status == 400)
        }
    }

    @Test("a tag invalidation removes user-scoped entries too")
    func userScoped() async throws {
        let origin = try await HTTPTestOrigin.start { _, n in .init(body: Self.envelope(#"{"n":\#(n)}"#)) }
        try await withRig(origin) { rig in
            _ = try await rig.login("alice")
            _ = try await rig.get("/t/mine/5")
            let stored = try await entries(rig, "/t/mine/5")
            #expect(stored.first?[path: "user"] == "alice" && stored.first?[path: "tags"] == ["item:5"])
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["item:5"]]).json == ["removed": 1])
            #expect(try await rig.get("/t/mine/5").header("X-Cache") == "MISS")
        }
    }

    @Test("soft purge: marked, not removed; served stale within stale_while_revalidate and refreshed, stale_if_error when the upstream is down, a miss without windows")
    func softPurge() async throws {
        let origin = try await HTTPTestOrigin.start { request, n in .init(body: Self.envelope(#"{"n":\#(n),"path":"\#(request.path)"}"#)) }
        try await withRig(origin) { rig in
            for path in ["/t/soft/lenient", "/t/soft/net", "/t/soft/strict"] { _ = try await rig.get(path) }
            let marked = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": "/t/soft/", "soft": true])
            #expect(marked.json == ["removed": 0, "marked": 3])
            #expect(rig.daemon.cache.entryCount >= 3, "nothing removed")
            let again = try await rig.admin(.POST, "/cache/invalidate", json: ["endpoint": "lenient", "soft": true])
            #expect(again.json == ["removed": 0, "marked": 0], "already stale: nothing more to mark")

            let lenient = try await rig.get("/t/soft/lenient")
            #expect(lenient.header("X-Cache") == "STALE" && lenient.json?[path: "data.n"] == 0, "served at once, stale")
            #expect(await eventually { origin.requests(path: "/t/soft/lenient").count == 2 }, "and refreshed in the background")
            #expect(await eventually { (try? await rig.get("/t/soft/lenient"))?.header("X-Cache") == "HIT" })

            let strict = try await rig.get("/t/soft/strict")
            #expect(strict.header("X-Cache") == "MISS" && strict.json?[path: "data.n"] == 1, "no stale window: a miss")

            await origin.stop()
            let net = try await rig.get("/t/soft/net")
            #expect(net.status == 200 && net.header("X-Cache") == "STALE" && net.json?[path: "data.n"] == 0,
                    "the safety net stays: stale_if_error serves it with the upstream down")
        }
    }

    @Test("soft purge by tag and of everything; a soft tag purge leaves the tag index for the next one")
    func softByTag() async throws {
        let origin = try await HTTPTestOrigin.start { _, n in
            .init(headers: [("Surrogate-Key", "k")], body: Self.envelope(#"{"result":{"ownerId":1,"n":\#(n)}}"#))
        }
        try await withRig(origin) { rig in
            _ = try await rig.get("/t/items/1")
            _ = try await rig.get("/t/items/2")
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["item:2"], "soft": true]).json == ["removed": 0, "marked": 1])
            #expect(try await rig.get("/t/items/2").header("X-Cache") == "MISS", "taggedItem has no stale window")
            #expect(try await rig.get("/t/items/1").header("X-Cache") == "HIT")
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["all": true, "soft": true]).json == ["removed": 0, "marked": 2])
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["k"]]).json?[path: "removed"] == 2,
                    "marked entries still carry their tags")
        }
    }

    @Test("an invalidation by tag of 100,000 entries: through the index, hits served meanwhile")
    func hundredThousandByTag() async throws {
        let origin = try await HTTPTestOrigin.start { _, _ in .init(body: Self.envelope("{}")) }
        try await withRig(origin) { rig in
            let cache = rig.daemon.cache
            for start in stride(from: 0, to: 100_000, by: 10_000) {
                for i in start..<(start + 10_000) {
                    var entry = CacheEntry(key: "GET http://127.0.0.1:1/api/items?q=\(i) v=1", endpoint: "itemList", userID: nil, status: 200,
                                           headers: HTTPHeaders(), body: .init(string: #"{"code":200}"#), storedAt: cache.clock.now, ttl: 600,
                                           staleWhileRevalidate: 0, staleIfError: 0, version: 1)
                    entry.tags = ["bulk", "q:\(i)"]
                    cache.store(entry)
                }
                await cache.flush()
            }
            _ = try await rig.get("/t/items/keep")
            await cache.flush()
            #expect(cache.entryCount == 100_001)
            #expect(try await rig.get("/t/items/keep").header("X-Cache") == "HIT")
            let hits = Task { () -> (count: Int, slowest: Duration, misses: Int) in
                var (count, misses, slowest) = (0, 0, Duration.zero)
                while !Task.isCancelled, count < 5_000 {
                    let began = ContinuousClock.now
                    // The request the cancellation cuts short has no reply: not counted.
                    guard let reply = try? await rig.get("/t/items/keep") else { break }
                    slowest = max(slowest, ContinuousClock.now - began)
                    count += 1
                    if reply.header("X-Cache") != "HIT" { misses += 1 }
                }
                return (count, slowest, misses)
            }
            let began = ContinuousClock.now
            let removed = try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["bulk"]])
            let took = ContinuousClock.now - began
            hits.cancel()
            let served = await hits.value
            print("tags: 100,000 entries invalidated by one tag in \(took); \(served.count) hits meanwhile, slowest \(served.slowest)")
            #expect(removed.json?[path: "removed"] == 100_000)
            #expect(served.misses == 0, "the other entry stayed a hit throughout")
            #expect(await eventually(.seconds(30)) { cache.entryCount == 1 })
            #expect(try await rig.admin(.POST, "/cache/invalidate", json: ["tags": ["q:5"]]).json == ["removed": 0])
        }
    }
}
