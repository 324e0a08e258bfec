@testable import ConciergeStorage
import ConciergeCore
import Foundation
import GRDB
import Testing

/// Invalidation by URL key (`mode: http`'s unsafe requests): the entry under the key and those
/// under keys extending it with a space go, found through the key column's index, after a
/// restart as before it; neighbours whose keys merely begin alike stay.
@Suite("URL key invalidation")
struct URLKeyInvalidationTests {
    static let url = "GET http://127.0.0.1:1/h/items v=1"
    static let family = [url, url + " vary=accept-language:de", url + " vary=accept-language:fr", url + " headers=x-forwarded-host:a"]
    static let neighbours = ["GET http://127.0.0.1:1/h/items v=10", "GET http://127.0.0.1:1/h/items2 v=1",
                             "GET http://127.0.0.1:1/h/items?page=2 v=1", "GET http://127.0.0.1:1/h/items user=alice v=1"]

    @Test("a URL key and its variants go, after a restart too, through the key index; keys that only begin alike stay")
    func urlAndVariantsGoAfterRestart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        do {
            let fixture = try StoreFixture(path: path)
            for key in Self.family + Self.neighbours { fixture.store.store(makeEntry(key: key, endpoint: "httpCached", ttl: 600)) }
            try await fixture.flush()
            try await fixture.finish()
        }
        let reopened = try StoreFixture(path: path)
        let store = reopened.store
        // Before the start-up loader read a row, and with one variant in the hot tier already.
        _ = try await bounded("lookup") { await store.lookup(Self.family[1]) }
        let removed = try await bounded("invalidate") { try await store.invalidate(urlKeys: [Self.url]) }
        #expect(removed == Self.family.count)
        for key in Self.family {
            #expect(try await bounded("lookup") { await store.lookup(key) } == nil, "\(key)")
        }
        for key in Self.neighbours {
            #expect(try await bounded("lookup") { await store.lookup(key) } != nil, "\(key) stays")
        }
        let plan = try await reopened.database.pool.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN SELECT rowid FROM cache_entry WHERE key >= ? AND key < ?", arguments: ["a", "b"])
                .map { $0["detail"] as String }
        }
        #expect(plan.joined().contains("INDEX"), "a range of the key's index, not a scan: \(plan)")
        try await bounded("index loaded") { await store.indexLoaded() }
        #expect(store.entryCount == Self.neighbours.count)
        try await reopened.finish()
    }

    @Test("keys only the hot tier holds go too, and an error of SQLite is thrown, never swallowed")
    func hotOnlyKeysAndErrors() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let variant = Self.url + " vary=accept:json"
        fixture.store.hot.put(makeEntry(key: variant, endpoint: "httpCached", ttl: 600))
        #expect(try await bounded("invalidate") { try await fixture.store.invalidate(urlKeys: [Self.url], hotKeys: [variant]) } == 0)
        #expect(fixture.store.hotLookup(variant) == nil)
        try await fixture.database.pool.write { db in try db.execute(sql: "ALTER TABLE cache_entry RENAME TO cache_entry_moved") }
        fixture.store.hot.put(makeEntry(key: Self.url, endpoint: "httpCached", ttl: 600))
        await #expect(throws: (any Error).self) { try await fixture.store.invalidate(urlKeys: [Self.url]) }
        #expect(fixture.store.hotLookup(Self.url) == nil, "the hot tier lost the entry all the same")
        try await fixture.database.pool.write { db in try db.execute(sql: "ALTER TABLE cache_entry_moved RENAME TO cache_entry") }
        try await fixture.finish()
    }
}
