@testable import ConciergeStorage
import Foundation
import GRDB
import Testing

/// The journal that makes a large invalidation durable: its record is written with the doom,
/// advanced by each slice, gone with the last; a record left by a stop that cut the slices
/// short dooms its rows again before anything is served, and the deletion is finished.
@Suite("Invalidation journal")
struct InvalidationJournalTests {
    static func key(_ i: Int) -> String { "GET https://api.example.com/api/items?j=\(i) v=1" }

    static func fill(_ fixture: StoreFixture, count: Int) async throws {
        for i in 0..<count { fixture.store.store(makeEntry(key: key(i), bodyText: "{}", ttl: 3600)) }
        try await fixture.flush()
    }

    static func journalCount(_ database: StorageDatabase) throws -> Int {
        try database.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM cache_invalidation") ?? -1 }
    }

    @Test("rowids round-trip through the record's blob, 8 bytes each")
    func rowidsRoundTrip() {
        let rowids: [Int64] = [1, 2, 7, 1 << 40, Int64.max]
        #expect(InvalidationJournal.decode(InvalidationJournal.encode(rowids)) == rowids)
        #expect(InvalidationJournal.encode(rowids).count == 40)
    }

    @Test("a pattern invalidation of 6,000 entries leaves no record once its slices are done, and every row is gone")
    func finishedInvalidationLeavesNoRecord() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        try await Self.fill(fixture, count: 6_000)
        let removed = try await fixture.store.invalidate(matching: KeyPattern("j="))
        #expect(removed == 6_000)
        #expect(fixture.store.entryCount == 0)
        try await fixture.finish()  // the writer finishes the slices before it stops
        #expect(try Self.journalCount(fixture.database) == 0)
        #expect(try await fixture.database.pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM cache_entry") } == 0)
    }

    @Test("a record a crash left: its rows are neither served, listed nor counted from start-up on, then deleted; a row stored again after it is kept")
    func unfinishedRecordIsReplayedAtStart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let storedUpTo: Double
        do {
            let fixture = try StoreFixture(path: path)
            try await Self.fill(fixture, count: 6_000)
            try await fixture.finish()
            // As the doom's transaction writes it, the slices never run (the process died).
            storedUpTo = Date().timeIntervalSince1970
            try await fixture.database.pool.write { db in
                let rowids = try Int64.fetchAll(db, sql: "SELECT rowid FROM cache_entry ORDER BY rowid")
                _ = try InvalidationJournal.record(selector: #"{"pattern":"j="}"#, rowids: rowids, storedUpTo: storedUpTo, in: db)
                // Stored again after the invalidation: kept.
                try db.execute(sql: "UPDATE cache_entry SET stored_at = ? WHERE key = ?", arguments: [storedUpTo + 1, Self.key(5)])
            }
            try fixture.database.pool.close()
        }
        let fixture = try StoreFixture(path: path)
        let store = fixture.store
        // At once, before the replay's slices or the loader ran.
        #expect(await store.lookup(Self.key(0)) == nil)
        #expect(await store.lookup(Self.key(5999)) == nil)
        // (A listing commits what is queued first: the replay's slices, which keep the row stored again.)
        #expect(try await storedKeys(store).isSubset(of: [Self.key(5)]))
        await store.indexLoaded()
        try await fixture.flush()
        let remaining = try await fixture.database.pool.read { db in try String.fetchAll(db, sql: "SELECT key FROM cache_entry") }
        #expect(remaining == [Self.key(5)])
        #expect(try Self.journalCount(fixture.database) == 0)
        #expect(await store.lookup(Self.key(5)) != nil, "the row stored again after the invalidation is served")
        try await fixture.finish()
    }

    @Test("a record whose slices had gone half-way goes on from there")
    func halfFinishedRecordGoesOn() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        do {
            let fixture = try StoreFixture(path: path)
            try await Self.fill(fixture, count: 6_000)
            try await fixture.finish()
            try await fixture.database.pool.write { db in
                let rowids = try Int64.fetchAll(db, sql: "SELECT rowid FROM cache_entry ORDER BY rowid")
                let seq = try InvalidationJournal.record(selector: #"{"tags":["t"]}"#, rowids: rowids, storedUpTo: Date().timeIntervalSince1970, in: db)
                // The first slice committed: its rows are gone and the record says so.
                try db.execute(sql: "DELETE FROM cache_entry WHERE rowid <= ?", arguments: [rowids[1_999]])
                try InvalidationJournal.advance(seq, next: 2_000, of: rowids.count, in: db)
            }
            try fixture.database.pool.close()
        }
        let fixture = try StoreFixture(path: path)
        #expect(await fixture.store.lookup(Self.key(4_000)) == nil)
        await fixture.store.indexLoaded()
        #expect(fixture.store.entryCount == 0)
        try await fixture.finish()
        #expect(try await fixture.database.pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM cache_entry") } == 0)
        #expect(try Self.journalCount(fixture.database) == 0)
    }
}
