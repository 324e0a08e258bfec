@testable import ConciergeStorage
import ConciergeCore
import Foundation
import GRDB
import Testing

/// Large invalidations doom their rows without reading them again (``CacheWriter/stillMatched(_:in:)``):
/// the entries are counted out at once, the bytes as the slices delete the rows, and a rowid
/// whose row changed between the match and the writer is judged as before.
@Suite("Doomed rows: bytes and rowids")
struct DoomedBytesTests {
    @Test("a large invalidation counts its entries out at once and each row's bytes as its slice deletes it: then the totals are the rows left")
    func bytesGoWithTheSlices() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let count = CacheStore.inlineDeleteLimit + 10
        let fixture = try await Self.filled(dir, count: count)
        let store = fixture.store
        for i in 0..<3 { store.store(makeEntry(key: "other\(i)", size: 300)) }
        try await fixture.flush()
        #expect(store.byteCount == count * 100 + 900)
        #expect(try await bounded("invalidate") { try await store.invalidate(.pattern("^k")) } == count)
        #expect(store.entryCount == 3, "counted out at once")
        let database = fixture.database
        try await Self.waitForRows(database, 3)
        // The last slice told the ledger in the transaction that a reader saw committed.
        #expect(store.byteCount == 900)
        #expect(store.entryCount == 3)
        #expect(try await database.pool.read { try Int.fetchOne($0, sql: "SELECT SUM(size) FROM cache_entry") } == 900)
        #expect(!store.writer.ledger.bytesIncludeDoomedRows)
        try await fixture.finish()
    }

    /// A store holding `count` entries `k0`, `k1`… of 100 bytes each, committed.
    static func filled(_ dir: TempDirectory, count: Int) async throws -> StoreFixture {
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        for i in 0..<count { fixture.store.store(makeEntry(key: "k\(i)", size: 100)) }
        try await fixture.flush()
        return fixture
    }

    /// Waits (bounded) until SQLite holds `rows` entries: the background delete is done.
    static func waitForRows(_ database: StorageDatabase, _ rows: Int) async throws {
        try await bounded("background delete") {
            while try await database.pool.read({ try Int.fetchOne($0, sql: "SELECT count(*) FROM cache_entry") }) != rows {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    /// The rows of `^k` as a reader matched them (rowid mark included), deleted by the writer
    /// after `between` ran.
    static func deleteMatchedLater(_ fixture: StoreFixture, between: () async throws -> Void) async throws -> Int {
        let store = fixture.store
        let (matched, _) = try await store.reader.rows(matching: KeyPattern("^k"), within: .seconds(60))
        try await between()
        return try await bounded("delete matched") {
            try await withCheckedThrowingContinuation { continuation in
                store.writer.enqueue(.deleteMatched(matched, continuation))
            }
        }
    }

    @Test("a matched row deleted since the match is passed over; a new key on its reused rowid stays, and is counted")
    func changedSinceTheMatch() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let count = CacheStore.inlineDeleteLimit + 10
        let fixture = try await Self.filled(dir, count: count)
        let store = fixture.store
        let removed = try await Self.deleteMatchedLater(fixture) {
            // k0 (a low rowid) goes; the top row goes and a new key takes its rowid.
            #expect(try await store.invalidate(.pattern("^k0$")) == 1)
            #expect(try await store.invalidate(.pattern("^k\(count - 1)$")) == 1)
            store.store(makeEntry(key: "new", size: 300))
            try await fixture.flush()
        }
        #expect(removed == count - 2)
        #expect(store.entryCount == 1)
        #expect(await store.lookup("new") != nil)
        let database = fixture.database
        #expect(try await database.pool.read { try Int64.fetchOne($0, sql: "SELECT rowid FROM cache_entry WHERE key = 'new'") } == Int64(count))
        try await Self.waitForRows(database, 1)
        #expect(store.byteCount == 300)
        #expect(try await storedKeys(store) == ["new"])
        try await fixture.finish()
    }

    @Test("a matched row stored again since the match (same key, same rowid) goes, as before")
    func storedAgainSinceTheMatch() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let count = CacheStore.inlineDeleteLimit + 10
        let fixture = try await Self.filled(dir, count: count)
        let store = fixture.store
        let removed = try await Self.deleteMatchedLater(fixture) {
            store.store(makeEntry(key: "k7", size: 200, storedAt: Date().timeIntervalSince1970 - 1))
            try await fixture.flush()
        }
        #expect(removed == count)
        #expect(store.entryCount == 0)
        #expect(await store.lookup("k7") == nil)
        let database = fixture.database
        try await Self.waitForRows(database, 0)
        #expect(store.byteCount == 0)
        try await fixture.finish()
    }
}
