@testable import ConciergeStorage
import ConciergeCore
import Foundation
import GRDB
import Testing

/// Tags stored beside entries, invalidation through the tag index, soft purge in SQLite and
/// the hot tier, and the criteria as the fleet's log carries them.
@Suite("Cache tags and soft purge in storage")
struct CacheTagTests {
    func tagged(_ key: String, _ tags: [String], user: String? = nil, endpoint: String = "itemList", sie: Double = 0) -> CacheEntry {
        var entry = makeEntry(key: key, endpoint: endpoint, user: user, sie: sie)
        entry.tags = tags
        return entry
    }

    @Test("criteria by tags and soft ones go through the fleet's JSON and back")
    func json() {
        for criteria in [InvalidationCriteria.tags(["a", "b c"]), .soft(.tags(["x"])), .soft(.endpoints(["e"], scope: .sharedAnd("u"))),
                         .soft(.pattern("^GET")), .soft(.all)] {
            #expect(InvalidationCriteria(json: criteria.json)?.json == criteria.json, "\(criteria.json)")
        }
    }

    @Test("a tag invalidation removes every entry with any of the tags, user-scoped ones too, through SQLite and the hot tier")
    func invalidateByTag() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        store.store(tagged("k1", ["item:1", "items"]))
        store.store(tagged("k2", ["item:2", "items"], user: "alice"))
        store.store(tagged("k3", ["other"]))
        store.store(makeEntry(key: "k4"))
        #expect(try await store.invalidate(.tags(["item:2", "nothing"])) == 1)
        #expect(await store.lookup("k2") == nil && store.hot.get("k2") == nil)
        // Re-stored with other tags: the old ones no longer select it.
        store.store(tagged("k1", ["fresh"]))
        #expect(try await store.invalidate(.tags(["items"])) == 0)
        #expect(await store.lookup("k1") != nil)
        #expect(try await store.invalidate(.tags(["fresh", "other"])) == 2)
        #expect(await store.lookup("k4") != nil, "untagged entries stay")
        // The sweep drops the tags of keys gone by other paths.
        store.store(tagged("k5", ["t5"]))
        _ = try await store.invalidate(.endpoints(["itemList"], scope: .everyone))
        _ = await store.sweep(currentVersions: ["itemList": 1])
        let orphans = try await fixture.database.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM cache_tag") ?? -1 }
        #expect(orphans == 0)
        try await fixture.finish()
    }

    @Test("after a restart the loader knows which rows have tags: a file without any tag rows is read without probing for them")
    func loaderReadsTags() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        for withTags in [true, false] {
            let path = dir.path("cache-\(withTags).sqlite")
            let fixture = try StoreFixture(path: path)
            fixture.store.store(withTags ? tagged("k1", ["items"]) : makeEntry(key: "k1"))
            fixture.store.store(makeEntry(key: "k2"))
            try await fixture.flush()
            try await fixture.finish()
            let reopened = try StoreFixture(path: path)
            try await bounded("index loaded") { await reopened.store.indexLoaded() }
            let rows = try await reopened.database.pool.read { db in
                try Row.fetchAll(db, sql: "SELECT rowid, key FROM cache_entry").map { (rowid: $0[0] as Int64, key: $0[1] as String) }
            }
            let flags = Dictionary(uniqueKeysWithValues: rows.map { row in (row.key, reopened.store.writer.facts.withLock { $0.mayHaveTags(row.rowid) }) })
            #expect(flags == ["k1": withTags, "k2": false])
            #expect(try await reopened.store.invalidate(.tags(["items"])) == (withTags ? 1 : 0))
            try await reopened.finish()
        }
    }

    @Test("a row given tags while the index loads, before the loader reads it, is known to have them: deleting it drops its tag rows", arguments: [true, false])
    func tagsWhileLoading(fileHasTags: Bool) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let count = Int(CacheWriter.loadSliceRows) * 2 + 10
        do {
            let fixture = try StoreFixture(path: path, maxBytes: 512 << 20)
            for i in 0..<count {
                fixture.store.store(fileHasTags && i == 0 ? tagged("k0", ["early"]) : makeEntry(key: "k\(i)"))
                if i % 5_000 == 4_999 { try await fixture.flush() }  // the writer's queue holds 20,000
            }
            try await fixture.flush()
            try await fixture.finish()
        }
        let database = try StorageDatabase(path: path, logger: quietLogger)
        let store = try CacheStore(database: database, maxBytes: 512 << 20, memoryBytes: 1 << 20, logger: quietLogger)
        let last = "k\(count - 1)"
        // Queued before the writer starts: committed between the loader's slices, before it
        // reaches the last rows.
        store.store(tagged(last, ["late"]))
        let writer = Task { await store.run() }
        try await bounded("index loaded") { await store.indexLoaded() }
        let rowids = try await database.pool.read { db in
            try Dictionary(uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT key, rowid FROM cache_entry WHERE key IN ('k0', 'k1', ?)",
                                                              arguments: [last]).map { ($0[0] as String, $0[1] as Int64) })
        }
        let flags = rowids.mapValues { rowid in store.writer.facts.withLock { $0.mayHaveTags(rowid) } }
        #expect(flags == ["k0": fileHasTags, "k1": false, last: true])
        #expect(try await bounded("invalidate") { try await store.invalidate(.pattern("^\(last)$")) } == 1)
        let tagRows = try await database.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM cache_tag WHERE key = ?", arguments: [last]) }
        #expect(tagRows == 0, "the deletion dropped the row's tags")
        store.finish()
        try await bounded("writer loop end") { await writer.value }
    }

    @Test("soft purge marks fresh entries stale (kept, counted once), for every kind of criteria")
    func markStale() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        store.store(tagged("GET a", ["t"], sie: 3600))
        store.store(tagged("GET b", [], user: "bob", endpoint: "mine"))
        store.store(tagged("GET c", []))
        #expect(try await store.markStale(.tags(["t"])) == 1)
        let marked = try #require(await store.lookup("GET a"))
        #expect(!marked.isFresh(at: store.clock.now) && marked.staleIfError == 3600, "kept for its stale window")
        #expect(try await store.markStale(.tags(["t"])) == 0, "already stale")
        #expect(try await store.invalidate(.soft(.user("bob"))) == 1)
        #expect(await store.lookup("GET b") == nil, "no stale window: of no more use")
        #expect(try await store.markStale(.pattern("^GET c$")) == 1)
        #expect(try await store.markStale(.all) == 0)
        #expect(store.entryCount == 3, "nothing removed")
        try await fixture.finish()
    }
}
