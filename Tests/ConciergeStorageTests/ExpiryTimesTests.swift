@testable import ConciergeStorage
import Foundation
import GRDB
import Testing

/// The sweep's expiry times are kept by the writer (``ExpiryTimes``), not by a SQLite index:
/// every way a row's `usable_until` is set, changed or deleted must reach them.
@Suite("Expiry times kept by the writer")
struct ExpiryTimesTests {
    private static let base = "GET http://127.0.0.1:9/api"

    private func rowid(of key: String, in fixture: StoreFixture) async throws -> Int64 {
        try #require(try await fixture.database.pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT rowid FROM cache_entry WHERE key = ?", arguments: [key])
        })
    }

    @Test("times by rowid across pages: set, replace, remove, due; an emptied page is given back")
    func pages() {
        var times = ExpiryTimes()
        let rowids: [Int64] = [1, 2, 255, 256, 257, 1_000_000, 1 << 40]
        for (n, rowid) in rowids.enumerated() { times.set(rowid, Double(n * 10)) }
        #expect(times.count == rowids.count)
        times.set(2, 5)  // replaced, not counted twice
        #expect(times.count == rowids.count)
        #expect(Set(times.due(by: 20)) == [1, 2, 255])
        times.remove(255)
        times.remove(255)  // absent: nothing changes
        times.remove(77)
        #expect(times.count == rowids.count - 1)
        #expect(Set(times.due(by: .infinity)) == Set(rowids).subtracting([255]))
        for rowid in rowids { times.remove(rowid) }
        #expect(times.count == 0 && times.due(by: .infinity).isEmpty)
        times.set(3, 1)
        times.lostTrack()
        #expect(times.needsRebuild)
        times.rebuilt([(rowid: 9, usableUntil: 2), (rowid: 700, usableUntil: 3)])
        #expect(!times.needsRebuild && times.count == 2 && Set(times.due(by: 2)) == [9])
    }

    @Test("after a restart the rows the loader read are swept; the usable_until index is gone")
    func afterRestart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let now = Date().timeIntervalSince1970
        let expired = "\(Self.base)/expired v=1"
        let fresh = "\(Self.base)/fresh v=1"
        do {
            let fixture = try StoreFixture(path: path)
            fixture.store.store(makeEntry(key: expired, storedAt: now - 1000, ttl: 10, swr: 20, sie: 30))
            fixture.store.store(makeEntry(key: fresh, storedAt: now, ttl: 600))
            try await fixture.flush()
            try await fixture.finish()
        }
        let reopened = try StoreFixture(path: path)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        #expect(reopened.store.writer.expiry.withLock { $0.count } == 2)
        #expect(try await bounded("sweep") { await reopened.store.sweep(currentVersions: ["itemList": 1]) } == 1)
        #expect(try await storedKeys(reopened.store) == [fresh])
        #expect(reopened.store.writer.expiry.withLock { $0.count } == 1)
        let index = try await reopened.database.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE name = 'cache_entry_usable_until'")
        }
        #expect(index == 0)
        try await reopened.finish()
    }

    @Test("a soft purge brings the expiry forward, by criteria and by matched rows; deletes take rows out")
    func softPurgeAndDeletes() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        let now = Date().timeIntervalSince1970
        let byEndpoint = "\(Self.base)/purged-by-endpoint v=1"
        let byPattern = "\(Self.base)/purged-by-pattern v=1"
        let invalidated = "\(Self.base)/invalidated v=1"
        let kept = "\(Self.base)/kept v=1"
        store.store(makeEntry(key: byEndpoint, endpoint: "purged", storedAt: now, ttl: 600))
        store.store(makeEntry(key: byPattern, storedAt: now, ttl: 600))
        store.store(makeEntry(key: invalidated, endpoint: "gone", storedAt: now, ttl: 600))
        store.store(makeEntry(key: kept, storedAt: now, ttl: 600, sie: 3600))
        try await fixture.flush()
        #expect(store.writer.expiry.withLock { $0.count } == 4)
        // Fresh for ten minutes: nothing is due yet.
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["itemList": 1, "purged": 1, "gone": 1]) } == 0)
        #expect(try await store.markStale(.endpoints(["purged"], scope: .everyone)) == 1)
        #expect(try await store.markStale(.pattern("purged-by-pattern")) == 1)
        #expect(try await store.invalidate(.endpoints(["gone"], scope: .everyone)) == 1)
        #expect(store.writer.expiry.withLock { $0.count } == 3)
        // Both purged entries are usable until the purge (no stale windows): due at once.
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["itemList": 1, "purged": 1]) } == 2)
        #expect(try await storedKeys(store) == [kept])
        #expect(store.writer.expiry.withLock { $0.count } == 1)
        #expect(try await store.invalidate(.all) == 1)
        #expect(store.writer.expiry.withLock { $0.count } == 0)
        try await fixture.finish()
    }

    @Test("a time kept wrong in memory never deletes a row SQLite says is usable; SQLite's time replaces it")
    func sqliteHasTheLastWord() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        let key = "\(Self.base)/fresh v=1"
        store.store(makeEntry(key: key, storedAt: Date().timeIntervalSince1970, ttl: 600))
        try await fixture.flush()
        let rowid = try await rowid(of: key, in: fixture)
        store.writer.expiry.withLock { $0.set(rowid, 0) }
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["itemList": 1]) } == 0)
        #expect(try await storedKeys(store) == [key])
        let now = Date().timeIntervalSince1970
        #expect(store.writer.expiry.withLock { $0.due(by: now) }.isEmpty)
        // Unsure after a rolled-back batch: read again from SQLite before the next sweep.
        store.writer.expiry.withLock { $0.lostTrack() }
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["itemList": 1]) } == 0)
        #expect(store.writer.expiry.withLock { ($0.needsRebuild, $0.count) } == (false, 1))
        try await fixture.finish()
    }
}
