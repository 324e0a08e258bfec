import ConciergeCore
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import GRDB
import NIOHTTP1
import Testing

/// `mode: http`: an unsafe request invalidates the stored replies of its URL (and their
/// variants) through the key column's index, whatever the size of the cache.
@Suite("HTTP invalidation index")
struct HTTPInvalidationIndexTests {
    static let endpoints = """
        - name: httpCached
          match: /h/**
          upstream: origin
          envelope: false
          cache: { mode: http }
        """

    /// `count` entries of other URLs straight into the daemon's cache, under the keys the proxy gives them.
    static func fill(_ cache: CacheStore, origin: String, count: Int) async {
        for start in stride(from: 0, to: count, by: 10_000) {
            for i in start..<min(count, start + 10_000) {
                cache.store(CacheEntry(key: "GET \(origin)/h/items/\(i) v=1", endpoint: "httpCached", userID: nil, status: 200,
                                       headers: HTTPHeaders([("Cache-Control", "max-age=600")]), body: .init(string: "item \(i)"),
                                       storedAt: cache.clock.now, ttl: 600, staleWhileRevalidate: 0, staleIfError: 0, version: 1))
            }
            await cache.flush()
        }
    }

    @Test("a POST over 200,000 stored entries invalidates both variants of its URL's GET and nothing else")
    func postInvalidatesAmongManyEntries() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, n in
            request.method == "POST" ? .init(status: 204)
                : .init(headers: [("Cache-Control", "max-age=600"), ("Vary", "Accept-Language")], body: "\(request.uri)#\(n)")
        }
        try await ConciergeTestRig.with(origin: origin, endpoints: Self.endpoints, clock: clock) { rig in
            let cache = rig.daemon.cache
            await Self.fill(cache, origin: origin.url, count: 200_000)
            for path in ["/h/target", "/h/target2", "/h/target?page=2"] {
                for language in ["de", "fr"] { _ = try await rig.get(path, headers: [("Accept-Language", language)]) }
            }
            #expect(try await rig.get("/h/target", headers: [("Accept-Language", "de")]).header("X-Cache") == "HIT")
            #expect(try await rig.get("/h/target", headers: [("Accept-Language", "fr")]).header("X-Cache") == "HIT")
            await cache.flush()
            #expect(cache.entryCount == 200_006)
            let began = ContinuousClock.now
            let post = try await rig.request(.POST, "/h/target", body: "x")
            let took = ContinuousClock.now - began
            #expect(post.status == 204)
            #expect(cache.entryCount == 200_004, "the two variants went before the reply, and nothing else")
            #expect(try await rig.get("/h/target", headers: [("Accept-Language", "de")]).header("X-Cache") == "MISS")
            #expect(try await rig.get("/h/target", headers: [("Accept-Language", "fr")]).header("X-Cache") == "MISS")
            for path in ["/h/target2", "/h/target?page=2"] {
                #expect(try await rig.get(path, headers: [("Accept-Language", "de")]).header("X-Cache") == "HIT", "\(path) stays")
            }
            // What the POST did before the index: a scan of every key with the URL's pattern.
            let key = "GET \(origin.url)/h/items/7 v=1"
            let scanBegan = ContinuousClock.now
            let scanned = try await cache.invalidate(matching: KeyPattern("^\\Q" + key + "\\E(?: vary=.*)?$"))
            let scanTook = ContinuousClock.now - scanBegan
            #expect(scanned == 1)
            print("http invalidation over \(cache.entryCount) entries: POST answered in \(took); the former pattern scan took \(scanTook)")
        }
    }

    @Test("an invalidation that storage cannot make is logged and counted in /metrics, and the hot tier loses the entry all the same")
    func skippedInvalidationIsCounted() async throws {
        let origin = try await HTTPTestOrigin.start { request, n in
            request.method == "POST" ? .init(status: 204) : .init(headers: [("Cache-Control", "max-age=600")], body: "v\(n)")
        }
        try await ConciergeTestRig.with(origin: origin, endpoints: Self.endpoints, clock: ManualClock()) { rig in
            _ = try await rig.get("/h/broken")
            #expect(try await rig.get("/h/broken").header("X-Cache") == "HIT")
            await rig.daemon.cache.flush()
            let pool = rig.daemon.cache.database.pool
            try await pool.write { db in try db.execute(sql: "ALTER TABLE cache_entry RENAME TO cache_entry_moved") }
            let post = try await rig.request(.POST, "/h/broken", body: "x")
            #expect(post.status == 204)
            try await pool.write { db in try db.execute(sql: "ALTER TABLE cache_entry_moved RENAME TO cache_entry") }
            let metrics = try await rig.admin(.GET, "/metrics").text
            #expect(metrics.contains("\nconcierge_http_invalidations_skipped_total 1\n"), "\(metrics.prefix(2000))")
            #expect(rig.logText.contains("invalidation was skipped"))
            #expect(try await rig.admin(.GET, "/stats").json?[path: "http_invalidations_skipped"] == 1)
            #expect(rig.daemon.cache.hotLookup("GET \(origin.url)/h/broken v=1") == nil, "the hot tier lost it all the same")
        }
    }
}
