import ConciergeCore
import Foundation
import GRDB
import Synchronization

/// What the writer does with the reads the ``AccessLog`` saw: the eviction order in the facts,
/// saved by page of rowids for a restart (`cache_access`), read back after the loader.
extension CacheWriter {
    /// The access log's reads since the last batch, in the eviction order (``RowFacts``), and
    /// for a restart saved by page of rowids (``saveAccessTimes(in:now:all:)``). While the
    /// index loads they are written to each row's `last_access` instead, which the loader
    /// reads for the rows it has not reached.
    ///
    /// A read of SQLite names its row; a hot-tier read is looked up by key (the hot tier
    /// reports a key's reads once a second at most). A rowid that another row took in between
    /// (SQLite reuses only the largest) makes that row look read: the eviction order is all it
    /// changes.
    func recordAccesses(_ touches: [String: AccessLog.Touch], in db: Database) throws {
        guard !touches.isEmpty else { return }
        var touched: [(rowid: Int64, at: Double)] = []
        touched.reserveCapacity(touches.count)
        if ledger.isLoading {
            let touch = try db.cachedStatement(sql: "UPDATE cache_entry SET last_access = ? WHERE key = ? RETURNING rowid")
            for (key, read) in touches {
                if let rowid = try Int64.fetchOne(touch, arguments: [read.at, key]) { touched.append((rowid, read.at)) }
            }
        } else {
            let find = try db.cachedStatement(sql: "SELECT rowid FROM cache_entry WHERE key = ?")
            for (key, read) in touches {
                if let rowid = try read.rowid ?? Int64.fetchOne(find, arguments: [key]) { touched.append((rowid, read.at)) }
            }
        }
        // A batch that rolls back reads the facts again from SQLite (``rollBackIndex()``).
        ledger.update { $0.touched(touched) }
    }

    /// How often pages of access times are saved, and how many pages a batch saves at most
    /// (2 KiB each: about 20 ms of writing).
    static let accessSaveInterval = 30.0
    static let accessSavePages = 1024

    /// Saves the access times of pages read since they were last saved (`cache_access`: one
    /// row of 256 times per page of rowids), at most every ``accessSaveInterval`` seconds
    /// (``accessSavePages`` a batch) and all of them as the writer stops. A read rewrites no
    /// page of `cache_entry` (a random one for each read of a large cache, 4 KiB of WAL each);
    /// what is written is bounded by the pages read, 2 KiB for 256 rows, whatever the rate of
    /// reads. A `kill -9` loses the reads since the last save: eviction may then take those
    /// entries earlier.
    func saveAccessTimes(in db: Database, now: Double, all: Bool = false) throws {
        guard !ledger.isLoading, all || now >= nextAccessSave.withLock({ $0 }) else { return }
        let pages = ledger.update { $0.takeUnsavedAccessPages(all ? Int.max : Self.accessSavePages) }
        guard !pages.isEmpty else { return }
        // The first reads after a quiet spell are saved at once; then every interval, the next
        // batch going on while pages are left.
        if pages.count < Self.accessSavePages || all { nextAccessSave.withLock { $0 = now + Self.accessSaveInterval } }
        let save = try db.cachedStatement(sql: "INSERT OR REPLACE INTO cache_access (page, times) VALUES (?, ?)")
        let drop = try db.cachedStatement(sql: "DELETE FROM cache_access WHERE page = ?")
        for (page, times) in pages {
            if let times {
                try save.execute(arguments: [page, Data(times)])
            } else {
                try drop.execute(arguments: [page])
            }
        }
    }

    /// The reads since the last batch and every page of access times not saved yet, as the
    /// writer stops (after its last batch).
    func saveReadsAtStop() {
        let touches = accesses.take()
        guard !touches.isEmpty || ledger.update({ $0.facts.unsavedAccessPageCount }) > 0 else { return }
        do {
            try database.pool.writeWithoutTransaction { db in
                try Self.inTransaction(db, try batchStatements(db)) {
                    try recordAccesses(touches, in: db)
                    try saveAccessTimes(in: db, now: clock.now, all: true)
                }
            }
        } catch {
            logger.error("cache: saving the access times at stop failed", metadata: ["error": "\(error)"])
        }
    }

    /// The saved access times of `pages` read into the facts (by the loader, a slice at a
    /// time, or after a rebuild of the facts): a page with no row left has its saved times
    /// deleted at the next save. `false` when they could not be read (logged).
    @discardableResult
    func mergeSavedAccessTimes(pages: Range<Int64> = 0..<Int64.max) -> Bool {
        do {
            try database.pool.read { db in try mergeSavedAccessTimes(db, pages: pages) }
            return true
        } catch {
            logger.error("cache: reading the saved access times failed", metadata: ["error": "\(error)"])
            return false
        }
    }

    /// ``mergeSavedAccessTimes(pages:)`` on a connection the caller holds.
    func mergeSavedAccessTimes(_ db: Database, pages: Range<Int64> = 0..<Int64.max) throws {
        let select = try db.cachedStatement(sql: "SELECT page, times FROM cache_access WHERE page >= ? AND page < ?")
        let rows = try Row.fetchCursor(select, arguments: [pages.lowerBound, pages.upperBound])
        var gone: [Int64] = []
        var read: [(Int64, Data)] = []
        while let row = try rows.next() {
            read.append((row[0], row[1]))
            if read.count == 512 {
                gone += merge(read)
                read.removeAll(keepingCapacity: true)
            }
        }
        gone += merge(read)
        if !gone.isEmpty { ledger.update { $0.forgetSavedAccessPages(gone) } }
        func merge(_ read: [(Int64, Data)]) -> [Int64] {
            ledger.update { ledger in
                read.compactMap { page, times in
                    times.withUnsafeBytes { ledger.mergeSavedAccessTimes($0, page: page) } ? nil : page
                }
            }
        }
    }
}
