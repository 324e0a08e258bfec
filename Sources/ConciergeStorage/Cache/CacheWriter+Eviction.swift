import ConciergeCore
import Foundation
import GRDB

/// Eviction keeps the cached bytes under 80% of `maxBytes`, so that the file with its SQLite
/// overhead stays under `maxBytes`; it also starts whenever the database file and its WAL
/// together exceed `maxBytes`. It runs on the writer, between batches.
extension CacheWriter {
    var evictionHighWater: Int { maxBytes / 10 * 8 }
    var evictionLowWater: Int { maxBytes / 10 * 7 }
    /// One eviction slice deletes at most this many bytes (or ``evictionSliceRows`` rows) in
    /// one transaction, then gives at most ``vacuumSlicePages`` pages back and truncates the
    /// WAL: no transaction, vacuum or checkpoint grows with the size of the cache.
    static var evictionSliceBytes: Int { 16 << 20 }
    static var evictionSliceRows: Int { 2000 }
    static var vacuumSlicePages: Int { 4096 }
    /// One writer pass spends at most this long evicting, then lets queued writes in.
    static var evictionPassTime: Duration { .milliseconds(400) }

    /// Not while the key index loads: the rows it has not read have no access time yet (the
    /// loader evicts once it is done).
    var needsEviction: Bool {
        !ledger.isLoading && (ledger.totals.bytes > evictionHighWater || database.fileBytes > maxBytes)
    }

    /// Evicts least recently used entries in bounded slices until the cached bytes are under
    /// the low-water mark and the file with its WAL under `maxBytes`. A pass stops after
    /// ``evictionPassTime`` (and at once on shutdown) and wakes the writer to go on later.
    func evict() {
        let passEnd = ContinuousClock.now + Self.evictionPassTime
        var removedEntries = 0
        var finished = false
        do {
            // A WAL left large by a burst of writes may be all the excess.
            database.pool.writeWithoutTransaction { db in _ = try? db.checkpoint(.truncate) }
            while !isStopping {
                let fileExcess = database.fileBytes - maxBytes / 10 * 9
                let cacheExcess = ledger.totals.bytes - evictionLowWater
                let (freePages, pageSize) = try database.pool.read { db in
                    (try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0, try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096)
                }
                // Free pages shrink the file without deleting anything.
                let rowsExcess = max(cacheExcess, fileExcess - freePages * pageSize)
                if rowsExcess <= 0 && (fileExcess <= 0 || freePages == 0) {
                    finished = true
                    break
                }
                let (n, dropped) = rowsExcess > 0 ? try evictSlice(upTo: min(rowsExcess, Self.evictionSliceBytes)) : (0, 0)
                removedEntries += n
                try database.pool.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA incremental_vacuum(\(Self.vacuumSlicePages))")
                    _ = try? db.checkpoint(.truncate)
                }
                if n == 0 && dropped == 0 && rowsExcess > 0 && freePages == 0 {
                    finished = true  // nothing left to evict
                    break
                }
                if ContinuousClock.now >= passEnd { break }
            }
            if removedEntries > 0 {
                logger.debug("evicted least recently used entries", metadata: ["entries": "\(removedEntries)"])
            }
        } catch {
            database.health.recordFailure("eviction", error)
            return
        }
        if !finished && !isStopping { enqueueWake() }
    }

    /// Deletes least recently used rows worth about `bytes` in one transaction: how many went,
    /// and how many times were dropped for rows no longer in the table. The order is the
    /// writer's (``RowFacts/oldest(_:)``, one pass over the rows' access times). The ledger is
    /// told in the transaction, as a batch of its own (read again from SQLite if it fails), and
    /// the evicted entries leave the hot tier once it commits.
    private func evictSlice(upTo bytes: Int) throws -> (evicted: Int, dropped: Int) {
        let (evicted, gone): ([RowLedger.Deleted], [Int64])
        do {
            (evicted, gone) = try database.pool.write { db -> ([RowLedger.Deleted], [Int64]) in
                try self.rebuildFactsIfNeeded(db)
                var evicted: [RowLedger.Deleted] = []
                var gone: [Int64] = []
                var removedBytes = 0
                let delete = try db.cachedStatement(sql: Self.deleteByRowidSQL)
                for rowid in self.ledger.scanFacts({ $0.oldest(Self.evictionSliceRows) }) where removedBytes < bytes {
                    guard let row = try Self.deleteRow(rowid, delete) else {
                        gone.append(rowid)
                        continue
                    }
                    evicted.append(row)
                    removedBytes += row.row.size
                }
                self.ledger.update { $0.beginBatch() }
                _ = try self.forget(evicted, gone: gone, in: db)
                return (evicted, gone)
            }
            ledger.update { $0.commitBatch() }
        } catch {
            rollBackIndex()
            throw error
        }
        reader.hot.remove(keys: evicted.map(\.key))
        return (evicted.count, gone.count)
    }
}
