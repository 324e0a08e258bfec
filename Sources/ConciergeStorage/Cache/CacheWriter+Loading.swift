import ConciergeCore
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The writer reads the rows present at start-up into the ``RowLedger`` (its ``KeyIndex`` and
/// its ``RowFacts``), a slice of rowids at a time between its batches.
extension CacheWriter {
    // MARK: - Loading the index

    /// Rows read per slice while the index loads: about 10 ms of reading each, so queued work
    /// waits at most that long for the writer.
    static let loadSliceRows: Int64 = 8192

    /// Reads the rows present at start-up into the key index, a slice of rowids at a time, with
    /// the work queued meanwhile committed between slices. Until it is done, lookups read
    /// SQLite for every key and the totals count the rows read so far.
    func loadIndex() {
        guard let ceiling = ledger.unreadRows?.ceiling else { return }
        let began = ContinuousClock.now
        var failures = 0
        // Which keys have tags: the tag table's keys read once, not probed for each row.
        let tagsKnown = readTaggedKeys(upTo: ceiling)
        let sql = tagsKnown ? Self.untaggedRowColumns : Self.rowColumns
        // The saved access times of the pages below this are merged into the facts.
        var mergedPages: Int64 = 0
        while !isStopping, let slice = ledger.update({ $0.nextLoadSlice(Self.loadSliceRows) }) {
            do {
                // Between batches: no write is in flight, so the slice is as the index was told.
                let (rows, read) = try database.pool.read { db in try Self.rows(db, sql: sql, after: slice.after, upTo: slice.upTo) }
                var rowFacts = read
                if tagsKnown {
                    loadingTags.withLock { filter in
                        guard let filter else { return }
                        for i in rowFacts.indices { rowFacts[i].tagged = filter.mayContain(rows[i].hash) }
                    }
                }
                ledger.update { $0.loaded(rows, facts: rowFacts, through: slice.upTo) }
                // The pages of rowids this slice completed get their saved access times now,
                // a slice's worth at a time (32 pages, 64 KiB), not the whole table at the end
                // (78 MB at ten million rows, which held the writer for as long).
                let whole = (slice.upTo + 1) >> Int64(RowFacts.pageBits)
                if whole > mergedPages, mergeSavedAccessTimes(pages: mergedPages..<whole) { mergedPages = whole }
            } catch {
                failures += 1
                if failures == 1 { logger.error("cache index: reading the rows failed; retrying", metadata: ["error": "\(error)"]) }
                Thread.sleep(forTimeInterval: 0.1)
            }
            if queue.withLock({ !$0.work.isEmpty }) { drain() }
        }
        // Before anyone is told: eviction and the callers of `indexLoaded()` see the reads.
        // Left: the page the last slice ended in, and pages of rows stored since start-up.
        if !ledger.isLoading { mergeSavedAccessTimes(pages: mergedPages..<Int64.max) }
        loadingTags.withLock { $0 = nil }
        for waiter in loadWaiters.withLock({ waiters in defer { waiters = nil }; return waiters ?? [] }) { waiter.resume() }
        if !ledger.isLoading {
            let totals = ledger.totals
            logger.info("cache index loaded", metadata: ["entries": "\(totals.entries)", "bytes": "\(totals.bytes)",
                                                         "seconds": "\(ContinuousClock.now - began)"])
            // Eviction waited for every row's access time.
            if !isStopping, needsEviction { evict() }
        }
    }

    /// Reads the key of every tag row into ``loadingTags``, in slices of the tag table's key
    /// index with the work queued meanwhile committed between them (its puts with tags add
    /// their keys too). `false` if the table could not be read: each row's tags are then
    /// probed as it is loaded.
    private func readTaggedKeys(upTo ceiling: Int64) -> Bool {
        loadingTags.withLock { $0 = TaggedKeyFilter(keys: Int(ceiling)) }
        var after: String? = ""
        while !isStopping, let from = after {
            do {
                after = try database.pool.read { db in
                    let statement = try db.cachedStatement(sql: "SELECT key FROM cache_tag WHERE key > ? ORDER BY key LIMIT ?")
                    let raw = statement.sqliteStatement
                    defer { sqlite3_reset(raw) }
                    _ = from.withCString { sqlite3_bind_text(raw, 1, $0, -1, Self.transient) }  // SQLite copies the key
                    sqlite3_bind_int64(raw, 2, Self.loadSliceRows)
                    var last: String?
                    var read = 0
                    loadingTags.withLock { filter in
                        while sqlite3_step(raw) == SQLITE_ROW, let text = sqlite3_column_text(raw, 0) {
                            let key = UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(raw, 0)))
                            filter?.insert(KeyHash.of(key))
                            read += 1
                            if read == Self.loadSliceRows { last = String(decoding: key, as: UTF8.self) }
                        }
                    }
                    return last
                }
            } catch {
                logger.error("cache index: reading the tag table failed; probing it per row", metadata: ["error": "\(error)"])
                loadingTags.withLock { $0 = nil }
                return false
            }
            if queue.withLock({ !$0.work.isEmpty }) { drain() }
        }
        return true
    }

    /// Returns once the rows present at start-up are in the index (or the writer stopped first).
    func indexLoaded() async {
        await withCheckedContinuation { continuation in
            let waiting = loadWaiters.withLock { waiters -> Bool in
                guard waiters != nil else { return false }
                waiters?.append(continuation)
                return true
            }
            if !waiting { continuation.resume() }
        }
    }

    /// The rows with a rowid in `after + 1 ... upTo` (a range of the table's b-tree), and their facts.
    static func rows(_ db: Database, sql: String = rowColumns, after: Int64, upTo: Int64) throws -> ([KeyIndex.Row], [RowFacts.Row]) {
        var rows: [KeyIndex.Row] = []
        var rowFacts: [RowFacts.Row] = []
        rows.reserveCapacity(Int(min(upTo - after, loadSliceRows)))
        rowFacts.reserveCapacity(Int(min(upTo - after, loadSliceRows)))
        try forEachRow(db, sql: "\(sql) WHERE rowid > ? AND rowid <= ?",
                       bounds: [after, upTo]) { row, time in
            rows.append(row)
            rowFacts.append(time)
        }
        return (rows, rowFacts)
    }

    /// Each row's id, key hash and size, and its facts, straight from SQLite's buffers (no
    /// string per key); whether the key has tag rows is a probe of the tag table's key index.
    static let rowColumns = """
        SELECT rowid, key, size, usable_until, last_access, endpoint, version, user_id,
          EXISTS (SELECT 1 FROM cache_tag WHERE cache_tag.key = cache_entry.key) FROM cache_entry
        """

    /// ``rowColumns`` for a table whose keys have no tag rows.
    static let untaggedRowColumns = """
        SELECT rowid, key, size, usable_until, last_access, endpoint, version, user_id, 0 FROM cache_entry
        """

    static func forEachRow(_ db: Database, sql: String = rowColumns,
                           bounds: [Int64] = [], _ body: (KeyIndex.Row, RowFacts.Row) -> Void) throws {
        let statement = try db.makeStatement(sql: sql)
        let raw = statement.sqliteStatement
        for (n, bound) in bounds.enumerated() { sqlite3_bind_int64(raw, Int32(n + 1), bound) }
        defer { sqlite3_reset(raw) }
        while sqlite3_step(raw) == SQLITE_ROW {
            guard let text = sqlite3_column_text(raw, 1) else { continue }
            let hash = KeyHash.of(UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(raw, 1))))
            let rowid = sqlite3_column_int64(raw, 0)
            body(KeyIndex.Row(rowid: rowid, hash: hash, size: Int(sqlite3_column_int64(raw, 2))),
                 RowFacts.Row(rowid: rowid, usableUntil: sqlite3_column_double(raw, 3), lastAccess: sqlite3_column_double(raw, 4),
                              endpoint: Self.text(raw, 5) ?? "", version: Int(sqlite3_column_int64(raw, 6)), userID: Self.text(raw, 7),
                              tagged: sqlite3_column_int64(raw, 8) != 0))
        }
    }

    /// A text column as a `String`; `nil` for `NULL`.
    private static func text(_ raw: OpaquePointer?, _ column: Int32) -> String? {
        guard let text = sqlite3_column_text(raw, column) else { return nil }
        return String(decoding: UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(raw, column))), as: UTF8.self)
    }
}
