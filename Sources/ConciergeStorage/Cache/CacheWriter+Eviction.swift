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
    /// One pass over the row facts chooses at most this many rows (``EvictionChoice``).
    static var evictionChoiceRows: Int { 1 << 18 }
    static var vacuumSlicePages: Int { 4096 }
    /// One writer pass spends at most this long evicting, then lets queued writes in.
    static var evictionPassTime: Duration { .milliseconds(400) }

    /// Not while the key index loads: the rows it has not read have no access time yet (the
    /// loader evicts once it is done). Nor for the cached bytes while they still hold those of
    /// doomed rows (``KeyIndex/bytesIncludeDoomedRows``): the live entries' bytes are fewer, by
    /// what the doomed slices queued next count out as they delete; the file's size still
    /// starts eviction meanwhile.
    var needsEviction: Bool {
        !ledger.isLoading && (cachedBytesToEvict > evictionHighWater || database.fileBytes > maxBytes)
    }

    /// The cached bytes eviction goes by: 0 while they hold doomed rows' (``needsEviction``).
    private var cachedBytesToEvict: Int {
        ledger.bytesIncludeDoomedRows ? 0 : ledger.totals.bytes
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
                let cacheExcess = cachedBytesToEvict - evictionLowWater
                let (freePages, pageSize) = try database.pool.read { db in
                    (try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0, try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096)
                }
                // Free pages shrink the file without deleting anything.
                let rowsExcess = max(cacheExcess, fileExcess - freePages * pageSize)
                if rowsExcess <= 0 && (fileExcess <= 0 || freePages == 0) {
                    finished = true
                    break
                }
                let (n, dropped) = rowsExcess > 0 ? try evictSlice(upTo: min(rowsExcess, Self.evictionSliceBytes), excess: rowsExcess) : (0, 0)
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
            if finished { evictionChoice.withLock { $0 = EvictionChoice() } }
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
    /// writer's (``EvictionChoice``: one pass over the rows' access times for all of `excess`).
    /// The ledger is told in the transaction, as a batch of its own (read again from SQLite if
    /// it fails), and the evicted entries leave the hot tier once it commits.
    private func evictSlice(upTo bytes: Int, excess: Int) throws -> (evicted: Int, dropped: Int) {
        let candidates = evictionCandidates(excess: excess)
        let (evicted, gone, unused): ([RowLedger.Deleted], [Int64], Int?)
        do {
            (evicted, gone, unused) = try database.pool.write { db -> ([RowLedger.Deleted], [Int64], Int?) in
                try self.rebuildFactsIfNeeded(db)
                var evicted: [RowLedger.Deleted] = []
                var gone: [Int64] = []
                var removedBytes = 0
                var unused: Int?
                let delete = try db.cachedStatement(sql: Self.deleteByRowidSQL)
                for (position, rowid) in candidates {
                    guard removedBytes < bytes else {
                        unused = position
                        break
                    }
                    guard let row = try Self.deleteRow(rowid, delete) else {
                        gone.append(rowid)
                        continue
                    }
                    evicted.append(row)
                    removedBytes += row.row.size
                }
                self.ledger.update { $0.beginBatch() }
                _ = try self.forget(evicted, gone: gone, in: db)
                return (evicted, gone, unused)
            }
            ledger.update { $0.commitBatch() }
        } catch {
            evictionChoice.withLock { $0 = EvictionChoice() }
            rollBackIndex()
            throw error
        }
        // The rows this slice did not need come first in the next one.
        if let unused { evictionChoice.withLock { $0.next = min($0.next, unused) } }
        reader.hot.remove(keys: evicted.map(\.key))
        return (evicted.count, gone.count)
    }

    /// Up to ``evictionSliceRows`` rows of the choice with their places in it, chosen again once
    /// it is used up. A row read (or gone) since it was chosen is passed over: it is no longer
    /// among the oldest, and the next choice judges it again.
    private func evictionCandidates(excess: Int) -> [(position: Int, rowid: Int64)] {
        evictionChoice.withLock { choice in
            var picked: [(position: Int, rowid: Int64)] = []
            var chosenNow = false
            while picked.count < Self.evictionSliceRows {
                if choice.next >= choice.rows.count {
                    guard !chosenNow, picked.isEmpty else { break }
                    let totals = ledger.totals
                    let average = max(1, totals.bytes / max(1, totals.entries))
                    let wanted = min(max(Self.evictionSliceRows, excess / average / 4 * 5), Self.evictionChoiceRows)
                    choice = EvictionChoice(rows: ledger.scanFacts { $0.oldestWithTimes(wanted) })
                    chosenNow = true
                    if choice.rows.isEmpty { break }
                }
                let end = min(choice.next + Self.evictionSliceRows - picked.count, choice.rows.count)
                ledger.scanFacts { facts in
                    for position in choice.next..<end where facts.lastAccess(of: choice.rows[position].rowid) == choice.rows[position].lastAccess {
                        picked.append((position, choice.rows[position].rowid))
                    }
                }
                choice.next = end
            }
            return picked
        }
    }
}

/// The least recently used rows one pass over the row facts chose, oldest first, with the
/// access time each had then; eviction deletes them slice by slice (``CacheWriter/evictSlice``).
/// One pass over every row costs about as much as deleting a slice (58 ms over 8.8 M rows), so
/// a pass chooses enough rows for the whole excess (up to ``CacheWriter/evictionChoiceRows``),
/// not one slice's worth.
struct EvictionChoice: Sendable {
    var rows: [(rowid: Int64, lastAccess: Double)] = []
    /// The first row no slice has taken yet.
    var next = 0
}
