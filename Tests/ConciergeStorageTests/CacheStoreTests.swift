@testable import ConciergeStorage
import ConciergeCore
import Foundation
import Logging
import NIOCore
import Testing

@Suite("CacheStore")
struct CacheStoreTests {
    static let base = "GET https://api.example.com"

    /// Entries covering shared and user-scoped keys of three endpoints.
    static let seedEntries: [(key: String, endpoint: String, user: String?)] = [
        ("\(base)/api/items?page=1 v=1", "itemList", nil),
        ("\(base)/api/items?page=2 v=1", "itemList", nil),
        ("\(base)/api/items?page=1 user=1 v=1", "itemList", "1"),
        ("\(base)/api/user/info user=1 v=1", "userInfo", "1"),
        ("\(base)/api/user/info user=2 v=1", "userInfo", "2"),
        ("\(base)/api/orders user=2 v=1", "orders", "2"),
    ]

    private func seed(_ fixture: StoreFixture) async throws {
        for e in Self.seedEntries { fixture.store.store(makeEntry(key: e.key, endpoint: e.endpoint, user: e.user)) }
        try await fixture.flush()
    }

    /// Every key in SQLite (through the listing, which reads the database).
    // MARK: Persistence and reads

    @Test("an entry stored and flushed is found by a new CacheStore on the same file (survives a restart)")
    func survivesRestart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let key = "\(Self.base)/api/user/info user=42 v=1"
        let storedAt = Date().timeIntervalSince1970 - 5
        do {
            let fixture = try StoreFixture(path: path)
            fixture.store.store(makeEntry(key: key, endpoint: "userInfo", user: "42", bodyText: #"{"code":200,"data":{"n":"é"}}"#,
                                          storedAt: storedAt, ttl: 300, swr: 30, sie: 3600, version: 3,
                                          headers: [("Content-Type", "application/json"), ("ETag", "\"abc\"")]))
            try await fixture.flush()
            try await fixture.finish()
        }
        let reopened = try StoreFixture(path: path)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        #expect(reopened.store.entryCount == 1)
        #expect(reopened.store.byteCount > 0)
        #expect(reopened.store.hotLookup(key) == nil)
        let found = try #require(await bounded("lookup") { await reopened.store.lookup(key) })
        #expect(found.key == key)
        #expect(found.endpoint == "userInfo")
        #expect(found.userID == "42")
        #expect(found.status == 200)
        #expect(found.headers.map(\.name) == ["Content-Type", "ETag"])
        #expect(found.headers.map(\.value) == ["application/json", "\"abc\""])
        #expect(String(buffer: found.body) == #"{"code":200,"data":{"n":"é"}}"#)
        #expect(abs(found.storedAt - storedAt) < 0.001)
        #expect(found.ttl == 300)
        #expect(found.staleWhileRevalidate == 30)
        #expect(found.staleIfError == 3600)
        #expect(found.version == 3)
        try await reopened.finish()
    }

    @Test("one batch of entries with and without a user, short and long texts and an empty body reads back exactly after a restart")
    func batchRoundTrip() async throws {
        // The writer binds each entry's texts and body in place for its own step: every value
        // read back must be that entry's, never a neighbour's, and no user must read as "".
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let users: [String?] = [nil, "7", "a-user-id-longer-than-fifteen-bytes", nil, "é"]
        let keys = users.indices.map { "\(Self.base)/api/items?n=\($0)\(String(repeating: "x", count: $0 * 7)) v=1" }
        do {
            let fixture = try StoreFixture(path: path)
            for (i, key) in keys.enumerated() {
                fixture.store.store(makeEntry(key: key, endpoint: i == 2 ? "an-endpoint-name-of-some-length" : "e\(i)", user: users[i],
                                              bodyText: i == 3 ? "" : "body \(i)", headers: i == 1 ? [] : [("X-N", "\(i)")]))
            }
            try await fixture.flush()
            try await fixture.finish()
        }
        let reopened = try StoreFixture(path: path)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        #expect(reopened.store.entryCount == keys.count)
        for (i, key) in keys.enumerated() {
            let found = try #require(await bounded("lookup") { await reopened.store.lookup(key) }, "\(i)")
            #expect(found.key == key)
            #expect(found.endpoint == (i == 2 ? "an-endpoint-name-of-some-length" : "e\(i)"))
            #expect(found.userID == users[i], "\(i)")
            #expect(String(buffer: found.body) == (i == 3 ? "" : "body \(i)"), "\(i)")
            #expect(found.headers.map(\.value) == (i == 1 ? [] : ["\(i)"]), "\(i)")
        }
        try await reopened.finish()
    }

    @Test("a SQLite hit is promoted to the hot tier")
    func lookupPromotes() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let key = "\(Self.base)/api/items?page=1 v=1"
        do {
            let fixture = try StoreFixture(path: path)
            fixture.store.store(makeEntry(key: key))
            try await fixture.finish()  // commits what is queued
        }
        let fixture = try StoreFixture(path: path)
        #expect(fixture.store.hot.count == 0)
        #expect(fixture.store.hotLookup(key) == nil)
        #expect(try await bounded("lookup") { await fixture.store.lookup(key) } != nil)
        #expect(fixture.store.hot.count == 1)
        #expect(fixture.store.hotLookup(key)?.key == key)
        #expect(try await bounded("lookup") { await fixture.store.lookup("\(Self.base)/nope v=1") } == nil)
        try await fixture.finish()
    }

    @Test("a stored entry is served from the hot tier at once, before any flush")
    func storeFillsHotTier() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let key = "\(Self.base)/api/items v=1"
        fixture.store.store(makeEntry(key: key))
        #expect(fixture.store.hotLookup(key)?.key == key)
        try await fixture.finish()
    }

    @Test("lookup ignores a stored entry past all its windows and does not promote it")
    func lookupSkipsUnusable() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let key = "\(Self.base)/api/old v=1"
        do {
            let fixture = try StoreFixture(path: path)
            fixture.store.store(makeEntry(key: key, storedAt: Date().timeIntervalSince1970 - 1000, ttl: 10, swr: 5, sie: 20))
            try await fixture.finish()
        }
        let fixture = try StoreFixture(path: path)
        #expect(try await bounded("lookup") { await fixture.store.lookup(key) } == nil)
        #expect(fixture.store.hot.count == 0)
        try await fixture.finish()
    }

    @Test("entry and byte counts follow puts, overwrites and invalidations")
    func totals() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        store.store(makeEntry(key: "a", size: 1000))
        store.store(makeEntry(key: "b", size: 2000))
        store.store(makeEntry(key: "a", size: 1500))
        try await fixture.flush()
        #expect(store.entryCount == 2)
        #expect(store.byteCount == 3500)
        #expect(try await bounded("invalidate") { try await store.invalidate(.pattern("^a$")) } == 1)
        #expect(store.entryCount == 1)
        #expect(store.byteCount == 2000)
        try await fixture.finish()
    }

    @Test("a restart does not read the rows before serving: the writer loads them in slices, with stores, lookups and invalidations between, and the counts end exact")
    func loadsAfterStart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let count = Int(CacheWriter.loadSliceRows) * 3 + 100
        do {
            let fixture = try StoreFixture(path: path, maxBytes: 512 << 20)
            for i in 0..<count {
                fixture.store.store(makeEntry(key: "k\(i)", size: 200))
                if i % 5_000 == 4_999 { try await fixture.flush() }  // the writer's queue holds 20,000
            }
            try await fixture.flush()
            try await fixture.finish()
        }
        // The writer is not running yet: nothing is read, the rows are still served.
        let database = try StorageDatabase(path: path, logger: quietLogger)
        let store = try CacheStore(database: database, maxBytes: 512 << 20, memoryBytes: 1 << 20, logger: quietLogger)
        #expect(store.isIndexLoading)
        #expect(store.entryCount == 0)
        #expect(try await bounded("lookup") { await store.lookup("k\(count - 1)") }?.key == "k\(count - 1)")
        let writer = Task { await store.run() }
        // Changes while it loads: replacements and new keys, a delete by endpoint, everything
        // of one endpoint on rows loaded or not.
        for i in stride(from: 0, to: count, by: 97) { store.store(makeEntry(key: "k\(i)", size: 300)) }
        for i in 0..<50 { store.store(makeEntry(key: "new\(i)", endpoint: "other", size: 250)) }
        let removed = try await bounded("invalidate") { try await store.invalidate(.endpoints(["other"], scope: .everyone)) }
        #expect(removed == 50)
        try await bounded("index loaded") { await store.indexLoaded() }
        #expect(!store.isIndexLoading)
        let (rows, bytes) = try await database.pool.read { db in
            (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM cache_entry") ?? -1, try Int.fetchOne(db, sql: "SELECT SUM(size) FROM cache_entry") ?? -1)
        }
        #expect(store.entryCount == count)
        #expect(store.entryCount == rows)
        #expect(store.byteCount == bytes)
        store.finish()
        try await bounded("writer loop end") { await writer.value }
    }

    @Test("an overwrite after a restart replaces the stored row: the counts do not grow")
    func overwriteAfterRestart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        do {
            let fixture = try StoreFixture(path: path)
            fixture.store.store(makeEntry(key: "a", size: 1000))
            try await fixture.flush()
            try await fixture.finish()
        }
        let reopened = try StoreFixture(path: path)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        reopened.store.store(makeEntry(key: "a", size: 1500))
        reopened.store.store(makeEntry(key: "b", size: 2000))
        try await reopened.flush()
        #expect(reopened.store.entryCount == 2)
        #expect(reopened.store.byteCount == 3500)
        try await reopened.finish()
    }

    @Test("after a large invalidation's background delete, a key stored again (on a reused rowid) is counted once and visible at once")
    func restoredOnReusedRowid() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        let count = CacheStore.inlineDeleteLimit + 10
        for i in 0..<count { store.store(makeEntry(key: "k\(i)", size: 100)) }
        try await fixture.flush()
        #expect(try await bounded("invalidate") { try await store.invalidate(.pattern("^k")) } == count)
        // Wait (bounded) until the background delete has emptied the table: the next row then
        // takes rowid 1 again, which stays marked doomed for a while.
        let database = fixture.database
        try await bounded("background delete") {
            while try await database.pool.read({ try Int.fetchOne($0, sql: "SELECT count(*) FROM cache_entry") }) != 0 {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        store.store(makeEntry(key: "k0", size: 300))
        try await fixture.flush()
        #expect(store.entryCount == 1)
        #expect(store.byteCount == 300)
        #expect(try await storedKeys(store).contains("k0"))
        try await fixture.finish()
    }

    // MARK: Invalidation

    static let invalidationCases: [(String, InvalidationCriteria, Int, Set<String>)] = [
        ("pattern page=1", .pattern("page=1"), 2, ["\(base)/api/items?page=1 v=1", "\(base)/api/items?page=1 user=1 v=1"]),
        ("pattern anchored", .pattern("^GET https://api\\.example\\.com/api/user/"), 2,
         ["\(base)/api/user/info user=1 v=1", "\(base)/api/user/info user=2 v=1"]),
        ("pattern matching nothing", .pattern("page=9"), 0, []),
        ("endpoint everyone", .endpoints(["userInfo"], scope: .everyone), 2,
         ["\(base)/api/user/info user=1 v=1", "\(base)/api/user/info user=2 v=1"]),
        ("endpoints sharedOnly", .endpoints(["itemList", "userInfo"], scope: .sharedOnly), 2,
         ["\(base)/api/items?page=1 v=1", "\(base)/api/items?page=2 v=1"]),
        ("endpoints sharedAnd user 1", .endpoints(["itemList", "userInfo"], scope: .sharedAnd("1")), 4,
         ["\(base)/api/items?page=1 v=1", "\(base)/api/items?page=2 v=1", "\(base)/api/items?page=1 user=1 v=1",
          "\(base)/api/user/info user=1 v=1"]),
        ("unknown endpoint", .endpoints(["nope"], scope: .everyone), 0, []),
        ("no endpoints", .endpoints([], scope: .everyone), 0, []),
        ("user 2", .user("2"), 2, ["\(base)/api/user/info user=2 v=1", "\(base)/api/orders user=2 v=1"]),
        ("all", .all, 6, Set(seedEntries.map(\.key))),
    ]

    @Test("invalidate returns the exact count and removes only matching keys, from SQLite and the hot tier",
          arguments: 0..<invalidationCases.count)
    func invalidate(caseIndex: Int) async throws {
        let (label, criteria, expectedCount, expectedRemoved) = Self.invalidationCases[caseIndex]
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        try await seed(fixture)
        let removed = try await bounded("invalidate") { try await store.invalidate(criteria) }
        #expect(removed == expectedCount, "\(label)")
        let all = Set(Self.seedEntries.map(\.key))
        let remaining = all.subtracting(expectedRemoved)
        #expect(try await storedKeys(store) == remaining, "\(label)")
        #expect(store.entryCount == remaining.count, "\(label)")
        for key in expectedRemoved { #expect(store.hotLookup(key) == nil, "\(label): \(key) still in the hot tier") }
        for key in remaining { #expect(store.hotLookup(key) != nil, "\(label): \(key) lost from the hot tier") }
        try await fixture.finish()
    }

    @Test("invalidate counts entries stored just before it, not yet committed")
    func invalidateQueued() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        for i in 0..<5 { store.store(makeEntry(key: "\(Self.base)/api/items?page=\(i) v=1")) }
        #expect(try await bounded("invalidate") { try await store.invalidate(.endpoints(["itemList"], scope: .everyone)) } == 5)
        #expect(store.entryCount == 0)
        #expect(store.hot.count == 0)
        try await fixture.finish()
    }

    @Test("a second identical invalidation removes nothing")
    func invalidateTwice() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        try await seed(fixture)
        let store = fixture.store
        #expect(try await bounded("invalidate") { try await store.invalidate(.user("1")) } == 2)
        #expect(try await bounded("invalidate") { try await store.invalidate(.user("1")) } == 0)
        try await fixture.finish()
    }

    @Test("an invalid regex is an error and removes nothing")
    func invalidateBadRegex() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        try await seed(fixture)
        let store = fixture.store
        await #expect(throws: (any Error).self) {
            try await bounded("invalidate") { try await store.invalidate(.pattern("[unclosed")) }
        }
        #expect(store.entryCount == Self.seedEntries.count)
        #expect(try await storedKeys(store).count == Self.seedEntries.count)
        try await fixture.finish()
    }

    // MARK: Sweep

    @Test("sweep deletes entries past their windows, entries of another version and of endpoints no longer configured")
    func sweep() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        let now = Date().timeIntervalSince1970
        let expired = "\(Self.base)/expired v=2"
        let staleButUsable = "\(Self.base)/stale-if-error v=2"
        let swrUsable = "\(Self.base)/swr v=2"
        let oldVersion = "\(Self.base)/old-version v=1"
        let goneEndpoint = "\(Self.base)/gone v=1"
        let fresh = "\(Self.base)/fresh v=2"
        let otherEndpointFresh = "\(Self.base)/other v=5"
        store.store(makeEntry(key: expired, endpoint: "a", storedAt: now - 1000, ttl: 10, swr: 100, sie: 200, version: 2))
        store.store(makeEntry(key: staleButUsable, endpoint: "a", storedAt: now - 100, ttl: 10, sie: 1000, version: 2))
        store.store(makeEntry(key: swrUsable, endpoint: "a", storedAt: now - 15, ttl: 10, swr: 60, version: 2))
        store.store(makeEntry(key: oldVersion, endpoint: "a", storedAt: now, ttl: 600, version: 1))
        store.store(makeEntry(key: goneEndpoint, endpoint: "removed", storedAt: now, ttl: 600, version: 1))
        store.store(makeEntry(key: fresh, endpoint: "a", storedAt: now, ttl: 600, version: 2))
        store.store(makeEntry(key: otherEndpointFresh, endpoint: "b", storedAt: now, ttl: 600, version: 5))
        try await fixture.flush()
        let removed = try await bounded("sweep") { await store.sweep(currentVersions: ["a": 2, "b": 5]) }
        #expect(removed == 3)
        #expect(try await storedKeys(store) == [staleButUsable, swrUsable, fresh, otherEndpointFresh])
        #expect(store.entryCount == 4)
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["a": 2, "b": 5]) } == 0)
        try await fixture.finish()
    }

    @Test("a version bump in the config makes sweep delete the old entries")
    func sweepVersionBump() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        try await seed(fixture)
        let store = fixture.store
        let removed = try await bounded("sweep") {
            await store.sweep(currentVersions: ["itemList": 2, "userInfo": 1, "orders": 1])
        }
        #expect(removed == 3)
        #expect(try await storedKeys(store) == Set(Self.seedEntries.filter { $0.endpoint != "itemList" }.map(\.key)))
        try await fixture.finish()
    }

    // MARK: Eviction

    static func blobKey(_ i: Int) -> String { "\(base)/api/blob?n=\(String(format: "%04d", i)) v=1" }

    @Test("writing far more than maxBytes keeps the database file under maxBytes, dropping the oldest entries")
    func evictionKeepsFileUnderMax() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let maxBytes = 1 << 20
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"), maxBytes: maxBytes, memoryBytes: 128 << 10)
        let store = fixture.store
        for i in 0..<300 {
            store.store(makeEntry(key: Self.blobKey(i), endpoint: "blob", size: 16 << 10))
            if i % 25 == 24 { await Task.yield() }
        }
        // The first flush returns once the writes are committed; eviction runs right after
        // that commit, so a second flush waits for it.
        try await fixture.flush()
        try await fixture.flush()
        let fileBytes = fixture.database.fileBytes
        #expect(fileBytes <= maxBytes, "database file is \(fileBytes) bytes, over maxBytes \(maxBytes)")
        #expect(store.byteCount <= maxBytes)
        #expect(store.entryCount < 300)
        #expect(store.entryCount > 0)
        #expect(try await storedKeys(store).count == store.entryCount)
        // Evicted rows leave the row times too.
        #expect(store.writer.facts.withLock { $0.count } == store.entryCount)
        #expect(try await bounded("lookup") { await store.lookup(Self.blobKey(299)) } != nil)
        #expect(try await bounded("lookup") { await store.lookup(Self.blobKey(0)) } == nil)
        try await fixture.finish()
        #expect(fixture.database.fileBytes <= maxBytes)
    }

    @Test("a lower maxBytes (a reload) evicts down to it at once, oldest first, with nothing new written")
    func loweredLimitEvicts() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"), maxBytes: 8 << 20, memoryBytes: 128 << 10)
        let store = fixture.store
        for i in 0..<100 { store.store(makeEntry(key: Self.blobKey(i), endpoint: "blob", size: 16 << 10)) }
        try await fixture.flush()
        try await fixture.flush()
        #expect(store.entryCount == 100, "8 MB holds 100 entries of 16 KB")
        store.limit(toBytes: 1 << 20)
        #expect(store.maxBytes == 1 << 20)
        // The writer's next pass evicts, before it answers a flush queued after the call; a
        // pass is time-bounded and goes on at the next one, so a loaded machine may need more.
        for _ in 0..<50 where store.byteCount > (1 << 20) / 10 * 8 { try await fixture.flush() }
        #expect(store.byteCount <= (1 << 20) / 10 * 8, "\(store.byteCount) bytes left")
        #expect(store.entryCount > 0 && store.entryCount < 100)
        #expect(try await storedKeys(store).count == store.entryCount)
        #expect(try await bounded("lookup") { await store.lookup(Self.blobKey(99)) } != nil)
        #expect(try await bounded("lookup") { await store.lookup(Self.blobKey(0)) } == nil)
        try await fixture.finish()
    }

    @Test("eviction is least recently used: an entry read recently outlives older untouched ones")
    func evictionHonoursAccess() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let maxBytes = 1 << 20
        let clock = ManualClock()
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"), maxBytes: maxBytes, memoryBytes: 4 << 20, clock: clock.wallClock)
        let store = fixture.store
        let size = 16 << 10
        for i in 0..<20 { store.store(makeEntry(key: Self.blobKey(i), endpoint: "blob", size: size, storedAt: clock.now)) }
        try await fixture.flush()
        clock.advance(by: 2)
        #expect(try await bounded("lookup") { await store.lookup(Self.blobKey(0)) } != nil)  // touch the oldest
        clock.advance(by: 2)
        // 55 entries in all: over the 80% high-water mark, so some go, but far fewer than 20.
        for i in 20..<55 { store.store(makeEntry(key: Self.blobKey(i), endpoint: "blob", size: size)) }
        try await fixture.flush()
        try await fixture.flush()
        let kept = try await storedKeys(store)
        #expect(kept.count < 55)
        #expect(kept.contains(Self.blobKey(0)), "the recently read entry was evicted")
        #expect(!kept.contains(Self.blobKey(1)), "the oldest untouched entry was kept")
        #expect(kept.contains(Self.blobKey(54)))
        try await fixture.finish()
    }

    // MARK: Listing

    @Test("entries pages through keys in order with limit and cursor")
    func entriesPaging() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        let keys = (0..<25).map { "\(Self.base)/api/items?page=\(String(format: "%02d", $0)) v=1" }
        for k in keys.shuffled() { store.store(makeEntry(key: k, ttl: 120)) }
        // entries() flushes itself.
        let p1 = try await bounded("entries") { try await store.entries(pattern: nil, limit: 10, cursor: nil) }
        #expect(p1.entries.map(\.key) == Array(keys[0..<10]))
        #expect(p1.next == keys[9])
        let p2 = try await bounded("entries") { try await store.entries(pattern: nil, limit: 10, cursor: p1.next) }
        #expect(p2.entries.map(\.key) == Array(keys[10..<20]))
        #expect(p2.next == keys[19])
        let p3 = try await bounded("entries") { try await store.entries(pattern: nil, limit: 10, cursor: p2.next) }
        #expect(p3.entries.map(\.key) == Array(keys[20..<25]))
        #expect(p3.next == nil)
        let summary = try #require(p1.entries.first)
        #expect(summary.endpoint == "itemList")
        #expect(summary.userID == nil)
        #expect(summary.size == makeEntry(key: keys[0], ttl: 120).size)
        // Bounds wide enough for a loaded machine: the point is age counts up and ttl down.
        #expect(summary.age >= 0 && summary.age <= 60)
        #expect(summary.ttl > 60 && summary.ttl <= 120)
        try await fixture.finish()
    }

    @Test("a page that ends exactly at the last entry has no next cursor")
    func entriesExactPage() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        for i in 0..<4 { store.store(makeEntry(key: "k\(i)")) }
        let p1 = try await bounded("entries") { try await store.entries(pattern: nil, limit: 2, cursor: nil) }
        #expect(p1.entries.map(\.key) == ["k0", "k1"])
        let p2 = try await bounded("entries") { try await store.entries(pattern: nil, limit: 2, cursor: p1.next) }
        #expect(p2.entries.map(\.key) == ["k2", "k3"])
        #expect(p2.next == nil)
        let all = try await bounded("entries") { try await store.entries(pattern: nil, limit: 4, cursor: nil) }
        #expect(all.entries.count == 4)
        #expect(all.next == nil)
        try await fixture.finish()
    }

    @Test("entries filters by pattern and pages over the matches")
    func entriesPattern() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        try await seed(fixture)
        for i in 0..<30 { store.store(makeEntry(key: "\(Self.base)/api/items?page=\(String(format: "%02d", i + 10)) v=1")) }
        let pattern = try KeyPattern("user=")
        let users = try await bounded("entries") { try await store.entries(pattern: pattern, limit: 10, cursor: nil) }
        #expect(Set(users.entries.map(\.key)) == Set(Self.seedEntries.filter { $0.user != nil }.map(\.key)))
        #expect(users.next == nil)
        #expect(users.entries.first { $0.key.contains("orders") }?.userID == "2")

        let tens = try KeyPattern("page=1[0-9] ")
        let a = try await bounded("entries") { try await store.entries(pattern: tens, limit: 6, cursor: nil) }
        #expect(a.entries.count == 6)
        let b = try await bounded("entries") { try await store.entries(pattern: tens, limit: 6, cursor: a.next) }
        #expect(b.entries.count == 4)
        #expect(b.next == nil)
        #expect(Set(a.entries.map(\.key) + b.entries.map(\.key)).count == 10)
        try await fixture.finish()
    }

    @Test("the writer loop ends on finish() after committing what was queued")
    func finishCommits() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        do {
            let fixture = try StoreFixture(path: path)
            for i in 0..<50 { fixture.store.store(makeEntry(key: "k\(i)")) }
            try await fixture.finish()
        }
        let reopened = try StoreFixture(path: path)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        #expect(reopened.store.entryCount == 50)
        try await reopened.finish()
    }
}
