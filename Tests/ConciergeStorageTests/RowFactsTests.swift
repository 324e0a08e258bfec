@testable import ConciergeStorage
import ConciergeCore
import Foundation
import GRDB
import Testing

/// The sweep's expiry times, eviction's access times and the endpoint, version and user that
/// invalidations select by are kept by the writer (``RowFacts``), not by SQLite indexes: every
/// way a row is stored, changed or deleted must reach them.
@Suite("Row facts kept by the writer")
struct RowFactsTests {
    private static let base = "GET http://127.0.0.1:9/api"

    private static func key(_ i: Int) -> String { "\(base)/blob?n=\(i) v=1" }

    /// Waits (at most 10 s) until the writer's queue holds `count` items.
    private static func waitForQueued(_ count: Int, in store: CacheStore) async throws {
        for _ in 0..<1000 where store.writer.queuedWork < count { try await Task.sleep(for: .milliseconds(10)) }
        try #require(store.writer.queuedWork == count)
    }

    /// A store without a memory tier on `path` with `entries` more entries stored now (none
    /// to reopen one), its index loaded.
    private static func filled(_ path: String, entries: Int, clock: ManualClock) async throws -> StoreFixture {
        let fixture = try StoreFixture(path: path, memoryBytes: 0, clock: clock.wallClock)
        for i in 0..<entries { fixture.store.store(makeEntry(key: key(i), endpoint: "blob", storedAt: clock.now)) }
        try await fixture.flush()
        try await bounded("index loaded") { await fixture.store.indexLoaded() }
        return fixture
    }

    private func rowid(of key: String, in fixture: StoreFixture) async throws -> Int64 {
        try #require(try await fixture.database.pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT rowid FROM cache_entry WHERE key = ?", arguments: [key])
        })
    }

    @Test("times by rowid across pages: set, replace, remove, due; an emptied page is given back")
    func pages() {
        var times = RowFacts()
        let rowids: [Int64] = [1, 2, 255, 256, 257, 1_000_000, 1 << 40]
        for (n, rowid) in rowids.enumerated() { times.set(rowid, usableUntil: Double(n * 10), lastAccess: 0, endpoint: "e", version: 1, userID: nil) }
        #expect(times.count == rowids.count)
        times.set(2, usableUntil: 5, lastAccess: 0, endpoint: "e", version: 1, userID: nil)  // replaced, not counted twice
        #expect(times.count == rowids.count)
        #expect(Set(times.due(by: 20)) == [1, 2, 255])
        times.setUsableUntil(2, 50)
        times.setUsableUntil(3, 0)  // no such row: nothing is added
        #expect(Set(times.due(by: 20)) == [1, 255] && times.count == rowids.count)
        times.remove(255)
        times.remove(255)  // absent: nothing changes
        times.remove(77)
        #expect(times.count == rowids.count - 1)
        #expect(Set(times.due(by: .infinity)) == Set(rowids).subtracting([255]))
        for rowid in rowids { times.remove(rowid) }
        #expect(times.count == 0 && times.due(by: .infinity).isEmpty && times.oldest(10).isEmpty)
        times.set(3, usableUntil: 1, lastAccess: 1, endpoint: "e", version: 1, userID: nil)
        times.lostTrack()
        #expect(times.needsRebuild)
        times.rebuilt([RowFacts.Row(rowid: 9, usableUntil: 2, lastAccess: 8, endpoint: "e", version: 1, userID: "u"),
                       RowFacts.Row(rowid: 700, usableUntil: 3, lastAccess: 7, endpoint: "f", version: 2, userID: nil)])
        #expect(!times.needsRebuild && times.count == 2 && Set(times.due(by: 2)) == [9])
        #expect(times.oldest(5) == [700, 9])
        #expect(times.internedCounts == (2, 1))
    }

    @Test("the rows due are those of a model after random sets, expiry changes and removals (pages without a due row are passed over)")
    func dueMatchesModel() {
        var generator = SystemRandomNumberGenerator()
        for round in 0..<10 {
            var facts = RowFacts()
            var model: [Int64: Double] = [:]
            // Few pages, so that rows share them and each page's earliest time moves both ways.
            let span = Int64(RowFacts.pageRows * (1 + round % 3))
            for _ in 0..<1000 {
                let rowid = Int64.random(in: 1...span, using: &generator)
                let time = Double(Int.random(in: 0...100, using: &generator))
                switch Int.random(in: 0..<4, using: &generator) {
                case 0, 1:
                    facts.set(rowid, usableUntil: time, lastAccess: 0, endpoint: "e", version: 1, userID: nil)
                    model[rowid] = time
                case 2:
                    facts.setUsableUntil(rowid, time)
                    if model[rowid] != nil { model[rowid] = time }
                default:
                    facts.remove(rowid)
                    model[rowid] = nil
                }
                let now = Double(Int.random(in: -1...101, using: &generator))
                let expected = Set(model.filter { $0.value <= now }.keys)
                guard Set(facts.due(by: now)) == expected else {
                    Issue.record("round \(round): due by \(now) differs from the model")
                    return
                }
                // Each page's earliest time is exact: a page is walked only when a row is due.
                let page = rowid >> Int64(RowFacts.pageBits)
                let earliest = model.filter { $0.key >> Int64(RowFacts.pageBits) == page }.values.min()
                guard (facts.earliestUsableUntil(page: page) ?? .infinity) == (earliest ?? .infinity) else {
                    Issue.record("round \(round): page \(page)'s earliest time is not its rows' earliest")
                    return
                }
            }
        }
    }

    @Test("a user's and endpoints' rows by scope, old versions and gone endpoints; ids held while rows have them")
    func selection() {
        var facts = RowFacts()
        // rowid: (endpoint, version, user)
        let rows: [Int64: (String, Int, String?)] = [
            1: ("items", 1, nil), 2: ("items", 1, "alice"), 3: ("items", 2, "bob"), 4: ("me", 1, "alice"),
            300: ("me", 1, "bob"), 301: ("orders", 3, nil), 1_000: ("gone", 1, nil),
        ]
        for (rowid, (endpoint, version, user)) in rows.sorted(by: { $0.key < $1.key }) {
            facts.set(rowid, usableUntil: 1e12, lastAccess: 0, endpoint: endpoint, version: version, userID: user)
        }
        func selected(_ criteria: InvalidationCriteria) -> Set<Int64> { Set(facts.rows(of: criteria)) }
        #expect(selected(.user("alice")) == [2, 4])
        #expect(selected(.user("carol")).isEmpty)
        #expect(selected(.endpoints(["items", "orders"], scope: .everyone)) == [1, 2, 3, 301])
        #expect(selected(.endpoints(["items", "me"], scope: .sharedOnly)) == [1])
        #expect(selected(.endpoints(["items", "me"], scope: .sharedAnd("bob"))) == [1, 3, 300])
        #expect(selected(.endpoints(["items"], scope: .sharedAnd("carol"))) == [1])
        #expect(selected(.endpoints([], scope: .everyone)).isEmpty)
        #expect(selected(.all).isEmpty && selected(.pattern("items")).isEmpty)
        // Version 2 of items is current: 1 and 2 are outdated; `gone` is not configured.
        #expect(Set(facts.outdated(["items": 2, "me": 1, "orders": 3])) == [1, 2, 1_000])
        #expect(facts.outdated([:]).isEmpty)
        #expect(facts.internedCounts == (5, 2))
        // A row stored again under another user and endpoint moves; ids no row holds go.
        facts.set(4, usableUntil: 1e12, lastAccess: 0, endpoint: "orders", version: 3, userID: "dave")
        #expect(selected(.user("alice")) == [2] && selected(.user("dave")) == [4])
        facts.remove(1_000)
        facts.remove(2)
        #expect(facts.internedCounts == (4, 2) && selected(.user("alice")).isEmpty)
        // A given-back id is reused for a new value, never confused with the old one.
        facts.set(5, usableUntil: 1e12, lastAccess: 0, endpoint: "new", version: 1, userID: "erin")
        #expect(selected(.endpoints(["gone"], scope: .everyone)).isEmpty)
        #expect(selected(.endpoints(["new"], scope: .everyone)) == [5] && selected(.user("erin")) == [5])
        #expect(Set(facts.outdated(["items": 2, "me": 1, "orders": 3])) == [1, 5])
        facts.removeAll()
        #expect(facts.count == 0 && facts.internedCounts == (0, 0) && selected(.user("bob")).isEmpty)
    }

    @Test("the least recently used first, by rowid where equal, across pages; touches reorder; a limit keeps the oldest")
    func oldestFirst() {
        var times = RowFacts()
        // 2,000 rows over eight pages, accessed in a shuffled order; rows 0..<100 share time 0.
        var order = Array(Int64(1)...2000)
        var generator = SplitMix(state: 7)
        order.shuffle(using: &generator)
        for (n, rowid) in order.enumerated() { times.set(rowid, usableUntil: 1e12, lastAccess: rowid <= 100 ? 0 : Double(n + 1), endpoint: "e", version: 1, userID: nil) }
        // Rows 1...100 first (time 0, by rowid), then the rest in the order they were set.
        let expected: [Int64] = Array(1...100) + order.filter { $0 > 100 }
        #expect(times.oldest(2000) == expected)
        #expect(times.oldest(150) == Array(expected.prefix(150)))
        #expect(times.oldest(1) == [1])
        #expect(times.oldest(0).isEmpty)
        // Reading the three oldest makes them the newest; a removed row is never offered.
        times.touch(1, at: 5000)
        times.touch(2, at: 5001)
        times.touch(3, at: 5002)
        times.touch(4000, at: 0)  // no such row: nothing is added
        times.remove(4)
        #expect(times.count == 1999)
        #expect(Array(times.oldest(3)) == [5, 6, 7])
        #expect(Array(times.oldest(1999).suffix(3)) == [1, 2, 3])
    }

    @Test("the oldest rows come with the access time each had: a row read since is told apart by its time")
    func oldestWithTimes() {
        var times = RowFacts()
        for rowid in Int64(1)...300 { times.set(rowid, usableUntil: 1e12, lastAccess: Double(rowid), endpoint: "e", version: 1, userID: nil) }
        let chosen = times.oldestWithTimes(3)
        #expect(chosen.map(\.rowid) == [1, 2, 3] && chosen.map(\.lastAccess) == [1, 2, 3])
        times.touch(2, at: 1000)
        times.remove(3)
        #expect(chosen.map { times.lastAccess(of: $0.rowid) == $0.lastAccess } == [true, false, false])
        #expect(times.lastAccess(of: 300) == 300 && times.lastAccess(of: 301) == nil)
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
        #expect(reopened.store.writer.facts.withLock { $0.count } == 2)
        #expect(try await bounded("sweep") { await reopened.store.sweep(currentVersions: ["itemList": 1]) } == 1)
        #expect(try await storedKeys(reopened.store) == [fresh])
        #expect(reopened.store.writer.facts.withLock { $0.count } == 1)
        let index = try await reopened.database.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE name = 'cache_entry_usable_until'")
        }
        #expect(index == 0)
        try await reopened.finish()
    }

    @Test("while the loader reads, invalidation and soft purge by endpoint and user also reach the rows it has not read")
    func invalidationWhileLoading() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let count = Int(CacheWriter.loadSliceRows) * 3 + 100
        let now = Date().timeIntervalSince1970
        // From the second slice on: every tenth row of endpoint `late`, every tenth of user `zed`.
        func entry(_ i: Int) -> CacheEntry {
            let late = i > Int(CacheWriter.loadSliceRows) && i % 10 == 0
            let zed = i > Int(CacheWriter.loadSliceRows) && i % 10 == 5
            return makeEntry(key: "k\(i)", endpoint: late ? "late" : "itemList", user: zed ? "zed" : nil, size: 200,
                             storedAt: now, ttl: 600)
        }
        let late = (0..<count).filter { $0 > Int(CacheWriter.loadSliceRows) && $0 % 10 == 0 }.count
        let zed = (0..<count).filter { $0 > Int(CacheWriter.loadSliceRows) && $0 % 10 == 5 }.count
        do {
            let fixture = try StoreFixture(path: path, maxBytes: 512 << 20)
            for i in 0..<count {
                fixture.store.store(entry(i))
                if i % 5_000 == 4_999 { try await fixture.flush() }  // the writer's queue holds 20,000
            }
            try await fixture.flush()
            try await fixture.finish()
        }
        let database = try StorageDatabase(path: path, logger: quietLogger)
        let store = try CacheStore(database: database, maxBytes: 512 << 20, memoryBytes: 1 << 20, logger: quietLogger)
        // Both queued before the writer runs: it takes them after the loader's first slice.
        let invalidated = Task { try await store.invalidate(.endpoints(["late"], scope: .everyone)) }
        try await Self.waitForQueued(1, in: store)
        let purged = Task { try await store.markStale(.user("zed")) }
        try await Self.waitForQueued(2, in: store)
        let writer = Task { await store.run() }
        #expect(try await bounded("invalidate") { try await invalidated.value } == late)
        #expect(try await bounded("purge") { try await purged.value } == zed)
        try await bounded("index loaded") { await store.indexLoaded() }
        // A purged row is fresh until the purge; the others for ten minutes from `now`.
        let purgedBy = Date().timeIntervalSince1970
        let (lateLeft, freshZed) = try await database.pool.read { db in
            (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM cache_entry WHERE endpoint = 'late'") ?? -1,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM cache_entry WHERE user_id = 'zed' AND stored_at + ttl > ?", arguments: [purgedBy]) ?? -1)
        }
        #expect(lateLeft == 0 && freshZed == 0)
        #expect(store.entryCount == count - late)
        #expect(store.writer.facts.withLock { $0.count } == count - late)
        // Loaded: the facts select them now (already purged: none is fresh).
        #expect(try await store.markStale(.user("zed")) == 0)
        #expect(try await store.invalidate(.user("zed")) == zed)
        store.finish()
        try await bounded("writer loop end") { await writer.value }
    }

    @Test("a restart with a smaller max_bytes evicts the oldest rows once the loader has read them all")
    func evictionAfterLoading() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let clock = ManualClock()
        let size = 16 << 10
        do {
            let fixture = try StoreFixture(path: path, maxBytes: 8 << 20, memoryBytes: 4 << 20, clock: clock.wallClock)
            for i in 0..<55 {
                fixture.store.store(makeEntry(key: Self.key(i), endpoint: "blob", size: size, storedAt: clock.now))
                if i % 10 == 9 {
                    try await fixture.flush()
                    clock.advance(by: 1)
                }
            }
            try await fixture.flush()
            try await fixture.finish()
        }
        let reopened = try StoreFixture(path: path, maxBytes: 1 << 20, memoryBytes: 4 << 20, clock: clock.wallClock)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        // Eviction runs as the loader finishes (and after any batch): the barrier is answered after it.
        try await reopened.flush()
        let kept = try await storedKeys(reopened.store)
        #expect(kept.count < 55 && kept.count > 0)
        #expect(!kept.contains(Self.key(0)) && kept.contains(Self.key(54)))
        #expect(reopened.store.byteCount <= (1 << 20) / 10 * 8)
        #expect(reopened.store.writer.facts.withLock { $0.count } == reopened.store.entryCount)
        try await reopened.finish()
    }

    @Test("after a restart eviction keeps the order of reads before it; the last_access index is gone")
    func evictionOrderAfterRestart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        let maxBytes = 1 << 20
        let clock = ManualClock()
        let size = 16 << 10
        do {
            let fixture = try StoreFixture(path: path, maxBytes: maxBytes, memoryBytes: 4 << 20, clock: clock.wallClock)
            for i in 0..<20 { fixture.store.store(makeEntry(key: Self.key(i), endpoint: "blob", size: size, storedAt: clock.now)) }
            try await fixture.flush()
            clock.advance(by: 2)
            // Read the two oldest: their access goes to SQLite with the next batch.
            for i in [0, 1] { #expect(try await bounded("lookup") { await fixture.store.lookup(Self.key(i)) } != nil) }
            try await fixture.flush()
            try await fixture.finish()
        }
        clock.advance(by: 2)
        let reopened = try StoreFixture(path: path, maxBytes: maxBytes, memoryBytes: 4 << 20, clock: clock.wallClock)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        #expect(reopened.store.writer.facts.withLock { $0.oldest(3) } == [3, 4, 5])
        for i in 20..<55 { reopened.store.store(makeEntry(key: Self.key(i), endpoint: "blob", size: size, storedAt: clock.now)) }
        try await reopened.flush()
        try await reopened.flush()
        let kept = try await storedKeys(reopened.store)
        #expect(kept.count < 55)
        #expect(kept.contains(Self.key(0)) && kept.contains(Self.key(1)), "an entry read before the restart was evicted")
        #expect(!kept.contains(Self.key(2)), "the oldest entry never read was kept")
        #expect(reopened.store.writer.facts.withLock { $0.count } == reopened.store.entryCount)
        let index = try await reopened.database.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE name = 'cache_entry_last_access'")
        }
        #expect(index == 0)
        try await reopened.finish()
    }

    @Test("access times are saved by page: what was read since the last save, the page's times in rowid order; a page given back is deleted; read back, the later time wins")
    func accessTimesByPage() {
        var facts = RowFacts()
        for rowid: Int64 in [1, 2, 300] {
            facts.set(rowid, usableUntil: 100, lastAccess: 10, endpoint: "e", version: 1, userID: nil)
        }
        #expect(facts.takeUnsavedAccessPages(10).isEmpty, "stores are saved with their rows")
        facts.touch(2, at: 20)
        facts.touch(300, at: 30)
        facts.touch(999, at: 40)  // no such row
        let saved = facts.takeUnsavedAccessPages(10)
        #expect(saved.map(\.page) == [0, 1])
        let times = try? #require(saved.first?.times)
        #expect(times?.count == RowFacts.pageRows * 8)
        func time(_ bytes: [UInt8]?, _ slot: Int) -> Double? {
            bytes.map { b in b.withUnsafeBytes { Double(bitPattern: UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: slot * 8, as: UInt64.self))) } }
        }
        #expect(time(times, 1) == 10 && time(times, 2) == 20 && time(times, 3)?.isNaN == true)
        #expect(facts.takeUnsavedAccessPages(10).isEmpty, "taken pages are saved")
        // The limit takes the lowest pages first; the rest wait.
        facts.touch(300, at: 31)
        facts.touch(1, at: 11)
        #expect(facts.takeUnsavedAccessPages(1).map(\.page) == [0])
        #expect(facts.unsavedAccessPageCount == 1)
        _ = facts.takeUnsavedAccessPages(10)
        // The page's last row goes: its saved times go too.
        facts.remove(300)
        let gone = facts.takeUnsavedAccessPages(10)
        #expect(gone.count == 1 && gone[0].page == 1 && gone[0].times == nil)

        // Read back into facts loaded from SQLite: the later of the two times, rows only.
        var loaded = RowFacts()
        loaded.set(1, usableUntil: 100, lastAccess: 50, endpoint: "e", version: 1, userID: nil)  // stored again since
        loaded.set(2, usableUntil: 100, lastAccess: 10, endpoint: "e", version: 1, userID: nil)
        let merged = times.map { bytes in bytes.withUnsafeBytes { loaded.merge(savedAccessTimes: $0, page: 0) } }
        #expect(merged == true)
        #expect(loaded.lastAccess(of: 1) == 50 && loaded.lastAccess(of: 2) == 20 && loaded.lastAccess(of: 3) == nil)
        #expect(times.map { bytes in bytes.withUnsafeBytes { loaded.merge(savedAccessTimes: $0, page: 7) } } == false, "no rows on that page")
        loaded.forgetSavedAccessPages([7, 0])
        #expect(loaded.takeUnsavedAccessPages(10).map(\.page) == [7], "a page with rows keeps its saved times")
    }

    @Test("a read of SQLite leaves its row's page alone: the time goes to the page's saved times, read back after a restart")
    func readsSavedByPage() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let (path, clock) = (dir.path("cache.sqlite"), ManualClock())
        let storedAt = clock.now
        let fixture = try await Self.filled(path, entries: 3, clock: clock)
        clock.advance(by: 5)
        #expect(try await bounded("lookup") { await fixture.store.lookup(Self.key(1)) } != nil)
        try await fixture.flush()
        let rowid = try await rowid(of: Self.key(1), in: fixture)
        let (lastAccess, saved) = try await fixture.database.pool.read { db in
            (try Double.fetchOne(db, sql: "SELECT last_access FROM cache_entry WHERE key = ?", arguments: [Self.key(1)]),
             try Data.fetchOne(db, sql: "SELECT times FROM cache_access WHERE page = ?", arguments: [rowid >> Int64(RowFacts.pageBits)]))
        }
        #expect(lastAccess == storedAt, "the row was rewritten for a read")
        let savedTime = saved.map { data in
            data.withUnsafeBytes { Double(bitPattern: UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: Int(rowid & 255) * 8, as: UInt64.self))) }
        }
        #expect(savedTime == storedAt + 5, "the first batch after the read saves its page")
        #expect(fixture.store.writer.facts.withLock { $0.lastAccess(of: rowid) } == storedAt + 5)
        try await fixture.finish()

        let reopened = try await Self.filled(path, entries: 0, clock: clock)
        #expect(reopened.store.writer.facts.withLock { $0.lastAccess(of: rowid) } == storedAt + 5)
        #expect(reopened.store.writer.facts.withLock { $0.oldest(3).last } == rowid, "the row read is the most recent")
        try await reopened.finish()
    }

    @Test("the loader merges saved access times page by page: whole pages with their slice, the last one after it")
    func savedTimesMergedBySlice() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let (path, clock) = (dir.path("cache.sqlite"), ManualClock())
        let storedAt = clock.now
        // Three pages of rowids: 1–255, 256–511 (whole once the loader's slice ends at 600),
        // and 512–600, which the slice leaves partial.
        let fixture = try await Self.filled(path, entries: 600, clock: clock)
        var read: [Int64: Double] = [:]
        for (step, i) in [10, 300, 590].enumerated() {
            clock.advance(by: 5)
            #expect(try await bounded("lookup") { await fixture.store.lookup(Self.key(i)) } != nil)
            read[try await rowid(of: Self.key(i), in: fixture)] = storedAt + 5 * Double(step + 1)
        }
        #expect(Set(read.keys.map { $0 >> Int64(RowFacts.pageBits) }) == [0, 1, 2])
        try await fixture.flush()
        try await fixture.finish()

        let reopened = try await Self.filled(path, entries: 0, clock: clock)
        for (rowid, time) in read {
            #expect(reopened.store.writer.facts.withLock { $0.lastAccess(of: rowid) } == time, "row \(rowid)")
        }
        #expect(Set(reopened.store.writer.facts.withLock { $0.oldest(600).suffix(3) }) == Set(read.keys), "the rows read are the most recent")
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
        #expect(store.writer.facts.withLock { $0.count } == 4)
        // Fresh for ten minutes: nothing is due yet.
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["itemList": 1, "purged": 1, "gone": 1]) } == 0)
        #expect(try await store.markStale(.endpoints(["purged"], scope: .everyone)) == 1)
        #expect(try await store.markStale(.pattern("purged-by-pattern")) == 1)
        #expect(try await store.invalidate(.endpoints(["gone"], scope: .everyone)) == 1)
        #expect(store.writer.facts.withLock { $0.count } == 3)
        // Both purged entries are usable until the purge (no stale windows): due at once.
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["itemList": 1, "purged": 1]) } == 2)
        #expect(try await storedKeys(store) == [kept])
        #expect(store.writer.facts.withLock { $0.count } == 1)
        #expect(try await store.invalidate(.all) == 1)
        #expect(store.writer.facts.withLock { $0.count } == 0)
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
        store.writer.facts.withLock { $0.setUsableUntil(rowid, 0) }
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["itemList": 1]) } == 0)
        #expect(try await storedKeys(store) == [key])
        let now = Date().timeIntervalSince1970
        #expect(store.writer.facts.withLock { $0.due(by: now) }.isEmpty)
        // Unsure after a rolled-back batch: read again from SQLite before the next sweep.
        store.writer.facts.withLock { $0.lostTrack() }
        #expect(try await bounded("sweep") { await store.sweep(currentVersions: ["itemList": 1]) } == 0)
        #expect(store.writer.facts.withLock { ($0.needsRebuild, $0.count) } == (false, 1))
        try await fixture.finish()
    }
}
