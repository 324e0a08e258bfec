import ConciergeCore
import Foundation
import GRDB
import GRDBSQLite

/// Invalidations by matched rows (a pattern, tags) and the large ones among them: doomed at
/// once, recorded in the ``InvalidationJournal`` in the same transaction, deleted in slices,
/// replayed at start-up when a crash cut the slices short.
extension CacheWriter.Work {
    /// Whether a caller is told of the invalidation once this work commits: its batch commits
    /// with a sync of the log (``CacheWriter/inTransaction(_:_:durable:_:)``).
    var acknowledgesInvalidation: Bool {
        switch self {
        case .invalidate, .deleteMatched, .markStale: true
        case .put, .sweep, .deleteDoomed, .barrier: false
        }
    }
}

extension CacheWriter {
    /// Rows doomed by one invalidation, deleted by the writer in slices of ``sliceRows``.
    struct DoomedRows: Sendable {
        var rowids: [Int64]
        var next = 0
        var token: UInt64
        /// A row stored again after this instant is kept (an upsert gives it a new `stored_at`).
        var storedUpTo: Double
        /// Its record in the ``InvalidationJournal``.
        var seq: Int64
        static let sliceRows = 2000
    }

    /// Rows a pattern scan, the tag index or URL keys matched: the writer deletes those still
    /// there under the same key. `keys` leave the hot tier once the work's batch ends (the rows'
    /// keys, and those only the hot tier holds), with the entries `criteria` select there
    /// (``InvalidationCriteria/selectsByEntry``); the criteria's JSON goes in a journal record.
    struct MatchedRows: Sendable {
        /// Each row's rowid and key hash; its size is 0 (a scan reads keys from the key
        /// column's index only, and the writer does not read the rows again for their sizes).
        var rows: [KeyIndex.Row]
        var keys: [String]
        var criteria: InvalidationCriteria? = nil
        /// The ledger's ``SharedLedger/rowidMark`` taken before the rows were read; `nil`:
        /// unknown, and the writer reads every row again (``stillMatched(_:in:)``).
        var rowidMark: UInt64? = nil
    }

    /// Pattern or tag invalidation, once the rows were found off the writer: those still holding
    /// the key they were matched under (``stillMatched(_:in:)``) go. Up to ``inlineDeleteLimit``
    /// are deleted at once; more are doomed (unservable and counted out now, their bytes as the
    /// slices delete them), recorded in the journal in this transaction, and deleted in slices
    /// by later work.
    func deleteMatched(_ matchedRows: MatchedRows, in db: Database, now: Double) throws -> Int {
        let matched = try stillMatched(matchedRows, in: db)
        guard !matched.isEmpty else { return 0 }
        if matched.count <= Self.inlineDeleteLimit {
            let delete = try db.cachedStatement(sql: Self.deleteByRowidSQL)
            var deleted: [RowLedger.Deleted] = []
            for row in matched {
                if let gone = try Self.deleteRow(row.rowid, delete) { deleted.append(gone) }
            }
            _ = try forget(deleted, in: db)
        } else {
            let rowids = matched.map(\.rowid)
            let seq = try InvalidationJournal.record(selector: matchedRows.criteria?.json ?? "", rowids: rowids, storedUpTo: now, in: db)
            // Without sizes: each row's bytes go as its slice deletes it (`RETURNING size`).
            let token = ledger.update { $0.doomed(matched, sized: false) }
            followUp(.deleteDoomed(DoomedRows(rowids: rowids, token: token, storedUpTo: now, seq: seq)))
        }
        return matched.count
    }

    /// The matched rows not doomed already that still hold the key they were matched under.
    /// The ledger answers without SQLite for most: while no new row took an old rowid since the
    /// rows were read (``KeyIndex/noRowidReused(since:)``), a rowid still holds the key it held
    /// then, if the row facts say it holds a row at all. The others (no facts: deleted since,
    /// or not loaded yet; a rowid reused; facts to be read again) are read again by rowid, a
    /// point read each straight from SQLite's buffers, and kept if the key's hash is the same.
    func stillMatched(_ matchedRows: MatchedRows, in db: Database) throws -> [KeyIndex.Row] {
        var matched: [KeyIndex.Row] = []
        var unsure: [KeyIndex.Row] = []
        matched.reserveCapacity(matchedRows.rows.count)
        let chunkRows = 4096  // readers wait for the lock at most one chunk's lookups
        var start = 0
        while start < matchedRows.rows.count {
            let end = min(start + chunkRows, matchedRows.rows.count)
            ledger.update { ledger in
                let settled = !ledger.facts.needsRebuild && matchedRows.rowidMark.map { ledger.index.noRowidReused(since: $0) } ?? false
                for candidate in matchedRows.rows[start..<end] where !ledger.index.isDoomed(candidate.rowid) {
                    if settled && ledger.facts.contains(candidate.rowid) { matched.append(candidate) } else { unsure.append(candidate) }
                }
            }
            start = end
        }
        guard !unsure.isEmpty else { return matched }
        let check = try db.cachedStatement(sql: "SELECT key FROM cache_entry WHERE rowid = ?")
        let raw = check.sqliteStatement
        defer { sqlite3_reset(raw) }
        for candidate in unsure {
            sqlite3_reset(raw)
            sqlite3_bind_int64(raw, 1, candidate.rowid)
            let rc = sqlite3_step(raw)
            if rc == SQLITE_DONE { continue }  // deleted since the scan
            guard rc == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: rc), message: "row check failed") }
            guard let text = sqlite3_column_text(raw, 0) else { continue }
            let key = UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(raw, 0)))
            if KeyHash.of(key) == candidate.hash { matched.append(candidate) }
        }
        return matched
    }

    /// One slice of a doomed deletion; rows stored again since the invalidation are kept. The
    /// journal record advances in the same transaction (and goes with the last slice).
    func deleteDoomedSlice(_ rows: DoomedRows, in db: Database) throws {
        let end = min(rows.next + DoomedRows.sliceRows, rows.rowids.count)
        let slice = Array(rows.rowids[rows.next..<end])
        // The size: the doom left the row's bytes in the totals (``KeyIndex/doom(_:sized:)``).
        let delete = try db.cachedStatement(sql: "DELETE FROM cache_entry WHERE rowid = ? AND stored_at <= ? RETURNING key, size")
        let kept = try db.cachedStatement(sql: "SELECT key, size FROM cache_entry WHERE rowid = ?")
        var deleted: [RowLedger.Deleted] = []
        var stayed: [KeyIndex.Row] = []
        for rowid in slice {
            if let row = try Self.deleteRow(rowid, delete, [rows.storedUpTo]) {
                deleted.append(row)
            } else if let row = try Row.fetchOne(kept, arguments: [rowid]) {
                let key: String = row["key"]
                stayed.append(KeyIndex.Row(rowid: rowid, hash: KeyHash.of(key), size: row["size"]))
            }
        }
        let untag = ledger.update { $0.deletedDoomed(deleted, kept: stayed, slice: slice, token: rows.token) }
        try dropTags(of: untag, in: db)
        try InvalidationJournal.advance(rows.seq, next: end, of: rows.rowids.count, in: db)
    }

    /// At start-up, before anything is served: every invalidation the journal holds unfinished
    /// dooms its remaining rows again (the index is loading, so they are not counted yet and the
    /// loader leaves them out), and its slices are queued first, to run between the loader's.
    /// Rowids above `ceiling` (the largest in the table) have no row to doom.
    func replayJournal(_ records: [InvalidationJournal.Record], ceiling: Int64) {
        for record in records {
            let next = min(record.next, record.rowids.count)
            let remaining = record.rowids[next...].filter { $0 <= ceiling }
            let token = ledger.update { $0.doomed(remaining.map { KeyIndex.Row(rowid: $0, hash: 0, size: 0) }, sized: false) }
            // The record's own list, so each slice's `next` means what the record's does.
            enqueue(.deleteDoomed(DoomedRows(rowids: record.rowids, next: next, token: token, storedUpTo: record.storedUpTo,
                                             seq: record.seq)))
        }
        if !records.isEmpty {
            logger.info("cache: finishing invalidations a stop cut short",
                        metadata: ["invalidations": "\(records.count)", "entries": "\(records.reduce(0) { $0 + $1.rowids.count - $1.next })"])
        }
    }
}
