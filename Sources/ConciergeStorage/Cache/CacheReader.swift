import ConciergeCore
import Foundation
import GRDB
import GRDBSQLite
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// The cache's read side: the hot tier first (no I/O), then one cached prepared statement on a
/// WAL reader, promoting what it finds. Never writes SQLite; the accesses it sees go to the
/// writer's ``AccessLog`` (least-recently-used order), and the rows it may serve are the
/// ``RowLedger``'s answer. It never removes entries from the hot tier: the writer does.
final class CacheReader: Sendable {
    let database: StorageDatabase
    let hot: HotTier
    let ledger: SharedLedger
    let accesses: AccessLog
    let clock: WallClock
    let logger: Logger
    /// Ends every scan at once when the daemon stops (``ScanBound``).
    let scanStop = ScanStop()

    init(database: StorageDatabase, hot: HotTier, ledger: SharedLedger, accesses: AccessLog, clock: WallClock, logger: Logger) {
        (self.database, self.hot, self.ledger, self.accesses) = (database, hot, ledger, accesses)
        (self.clock, self.logger) = (clock, logger)
    }

    /// Puts an entry in the hot tier with its own tight copy of the body (a body read from the
    /// network may be a slice of a larger read buffer).
    func putHot(_ entry: CacheEntry, key: HashedKey? = nil) {
        var entry = entry
        if entry.body.storageCapacity > entry.body.readableBytes + 64 {
            entry.body = ByteBuffer(bytes: entry.body.readableBytesView)
        }
        hot.put(entry, key: key ?? HashedKey(entry.key))
    }

    /// The hot-tier entry (with its attachment, if its user gave it one), without I/O.
    /// Callable on an event loop.
    func hotLookup(_ key: HashedKey, now: Double) -> CacheEntry? {
        guard let (found, report) = hot.getReportingAccess(key, now: now) else { return nil }
        if report { accesses.record(found.key, at: now) }
        return found
    }

    /// Hot tier, then SQLite (promoting what it finds).
    nonisolated(nonsending) func lookup(_ key: String, onSQLiteRead: (@Sendable (ContinuousClock.Instant) -> Void)? = nil) async -> CacheEntry? {
        let now = clock.now
        let hashed = HashedKey(key)
        if let entry = hotLookup(hashed, now: now) { return entry }
        guard let began = ledger.beginReadIfPresent(hashed.hash) else { return nil }
        let readStarted = onSQLiteRead == nil ? nil : ContinuousClock.now
        defer { if let onSQLiteRead, let readStarted { onSQLiteRead(readStarted) } }
        var found: (rowid: Int64, entry: CacheEntry)?
        do {
            // One statement is a read transaction of its own: `read` would add a `BEGIN` and
            // a `COMMIT` around it.
            found = try await database.pool.unsafeRead { db -> (Int64, CacheEntry)? in
                try Self.row(keyed: key, with: db.cachedStatement(sql: Self.lookupSQL), in: db)
            }
        } catch {
            logger.error("cache read failed", metadata: ["error": "\(error)"])
        }
        guard ledger.endRead(began, rowid: found?.rowid), let entry = found?.entry else { return nil }
        if now >= entry.usableUntil { return nil }
        putHot(entry)
        accesses.record(entry.key, at: now, rowid: found?.rowid)
        return entry
    }

    static let lookupSQL = "SELECT rowid, key, endpoint, user_id, status, stored_at, ttl, swr, sie, version, headers, body FROM cache_entry WHERE key = ?"

    /// The row of `key` read through SQLite's C API (``lookupSQL``'s columns, by position): the
    /// texts and the body copied once from SQLite's memory, the headers read in place. GRDB's
    /// `Row` copied every column and looked each up by a lowercased name; its JSON went through
    /// Foundation's decoder (together about 150k instructions a read).
    static func row(keyed key: String, with statement: Statement, in db: Database) throws -> (Int64, CacheEntry)? {
        let sql = statement.sqliteStatement
        defer { sqlite3_reset(sql) }  // the key was bound as a copy: nothing dangles
        var key = key
        let code = key.withUTF8 { bytes -> Int32 in
            guard let base = bytes.baseAddress, bytes.count > 0 else { return sqlite3_bind_text(sql, 1, "", 0, nil) }
            // SQLITE_TRANSIENT: SQLite copies the key before this returns.
            return UnsafeRawPointer(base).withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                sqlite3_bind_text(sql, 1, $0, Int32(bytes.count), unsafeBitCast(-1, to: sqlite3_destructor_type.self))
            }
        }
        guard code == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: code), message: "binding the cache key") }
        switch sqlite3_step(sql) {
        case SQLITE_ROW: break
        case SQLITE_DONE: return nil
        case let failed:
            throw DatabaseError(resultCode: ResultCode(rawValue: failed), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
                                sql: lookupSQL)
        }
        func bytes(_ column: Int32) -> UnsafeRawBufferPointer {
            // The pointer first, then the count (SQLite's documented order).
            guard let base = sqlite3_column_blob(sql, column) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
            return UnsafeRawBufferPointer(start: base, count: Int(sqlite3_column_bytes(sql, column)))
        }
        func text(_ column: Int32) -> String { String(decoding: bytes(column), as: UTF8.self) }
        let userID = sqlite3_column_type(sql, 3) == SQLITE_NULL ? nil : text(3)
        let entry = CacheEntry(key: text(1), endpoint: text(2), userID: userID, status: Int(sqlite3_column_int64(sql, 4)),
                               headers: CacheEntry.headers(fromPairs: bytes(10)), body: ByteBuffer(bytes: bytes(11)),
                               storedAt: sqlite3_column_double(sql, 5), ttl: sqlite3_column_double(sql, 6),
                               staleWhileRevalidate: sqlite3_column_double(sql, 7), staleIfError: sqlite3_column_double(sql, 8),
                               version: Int(sqlite3_column_int64(sql, 9)))
        return (sqlite3_column_int64(sql, 0), entry)
    }

    /// A page of entries ordered by key, after `cursor` (exclusive); committed rows only. With a
    /// pattern, rows are read in slices of ``scanSliceRows``, each its own read, until the page
    /// is full, the keys end or `deadline` passes (checked within a slice: ``ScanBound``).
    func entries(pattern: KeyPattern?, limit: Int, cursor: String?,
                 until deadline: ContinuousClock.Instant) async throws -> (entries: [CacheStore.EntrySummary], next: String?) {
        let now = clock.now
        let matcher = pattern?.matcher()
        let bound = ScanBound(deadline: deadline, stop: scanStop)
        var result: [CacheStore.EntrySummary] = []
        var after = cursor ?? ""
        var scanned = 0
        while result.count <= limit {
            try bound.check(scanned: 0)
            let began = ledger.beginRead()
            defer { ledger.endRead(began) }
            let from = after
            let rows = try await database.pool.read { db in
                try Row.fetchAll(db, sql: """
                    SELECT rowid, key, endpoint, user_id, size, stored_at, ttl,
                      (SELECT group_concat(tag, char(31)) FROM cache_tag WHERE cache_tag.key = cache_entry.key) AS tags
                    FROM cache_entry WHERE key > ? ORDER BY key LIMIT ?
                    """, arguments: [from, Self.scanSliceRows])
            }
            if rows.isEmpty { break }
            for row in rows {
                let key: String = row["key"]
                after = key
                if matcher != nil { try bound.check(scanned: scanned) }
                scanned += 1
                if let matcher, try !matcher.matches(key) { continue }
                if ledger.isDoomed(row["rowid"]) { continue }
                let storedAt: Double = row["stored_at"], ttl: Double = row["ttl"]
                let tags = (row["tags"] as String?).map { $0.split(separator: "\u{1F}").map(String.init).sorted() } ?? []
                result.append(CacheStore.EntrySummary(key: key, endpoint: row["endpoint"], userID: row["user_id"], size: row["size"],
                                                      age: max(0, Int(now - storedAt)), ttl: Int((storedAt + ttl - now).rounded(.down)),
                                                      tags: tags))
                if result.count > limit { break }
            }
        }
        if result.count > limit {
            result.removeLast()
            return (result, result.last?.key)
        }
        return (result, nil)
    }

    /// The rows carrying any of the tags, through the tag table's index (a cost per matching
    /// entry, never a scan of every key) and the key column's (each key's rowid: no table page
    /// is read; nor does the writer read the rows again, ``CacheWriter/stillMatched(_:in:)``).
    func rows(taggedWith tags: [String]) async throws -> CacheWriter.MatchedRows {
        guard !tags.isEmpty else { return CacheWriter.MatchedRows(rows: [], keys: []) }
        let marks = Array(repeating: "?", count: tags.count).joined(separator: ",")
        // One tag names each key once (the tag table's primary key is the pair), and each key
        // is one row: no `DISTINCT`, whose temporary b-tree of every match was about 40% of
        // the query's time for 100,000 rows. Several tags may share keys.
        let distinct = tags.count > 1 ? "DISTINCT " : ""
        let rowidMark = ledger.rowidMark
        return try await database.pool.read { db in
            let rows = try Row.fetchCursor(db, sql: """
                SELECT \(distinct)e.rowid, e.key FROM cache_tag t JOIN cache_entry e ON e.key = t.key WHERE t.tag IN (\(marks))
                """, arguments: StatementArguments(tags))
            var matched = CacheWriter.MatchedRows(rows: [], keys: [], rowidMark: rowidMark)
            while let row = try rows.next() {
                let key: String = row[1]
                matched.rows.append(KeyIndex.Row(rowid: row[0], hash: KeyHash.of(key), size: 0))
                matched.keys.append(key)
            }
            return matched
        }
    }

    /// How many rows one read of a pattern scan takes: the writer and other readers run
    /// between slices (SQLite's WAL lets them run during one too).
    static let scanSliceRows = 2_000

    /// The rows whose key the pattern matches, read in slices in key order from the key
    /// column's unique index (which holds each key and its rowid: no table page, no body, is
    /// read), off the writer; the keys are matched on the reader's thread straight from
    /// SQLite's buffers. The rows' sizes are left at 0: the writer counts a row's bytes out as
    /// it deletes the row (``CacheWriter/deleteMatched(_:in:now:)``). `budget` bounds
    /// the time spent scanning (on the reader's thread), not the time a slice waits for a
    /// thread or a reader: a busy machine must not turn a small scan into a refusal.
    /// - Returns: the rows and the time the scan took.
    /// - Throws: ``KeyPatternError`` when a match exceeds a limit or the scan exceeds `budget`.
    func rows(matching pattern: KeyPattern, within budget: Duration) async throws -> (rows: CacheWriter.MatchedRows, spent: Duration) {
        var matched = CacheWriter.MatchedRows(rows: [], keys: [], rowidMark: ledger.rowidMark)
        var after = ""
        var scanned = 0
        var spent = Duration.zero
        while true {
            try Task.checkCancellation()
            if scanStop.isStopped { throw KeyPatternError.cancelled }
            if spent >= budget { throw KeyPatternError.deadlineExceeded(CacheStore.patternScanLimit, keysScanned: scanned) }
            let (from, remaining, stop) = (after, budget - spent, scanStop)
            let (slice, took) = try await database.pool.read { db in
                let started = ContinuousClock.now
                let slice = try Self.matchSlice(db, pattern, after: from, bound: ScanBound(deadline: started + remaining, stop: stop))
                return (slice, ContinuousClock.now - started)
            }
            spent += took
            scanned += slice.scanned
            matched.rows += slice.matched.rows
            matched.keys += slice.matched.keys
            guard let last = slice.lastKey else { return (matched, spent) }
            after = last
        }
    }

    private static func matchSlice(_ db: Database, _ pattern: KeyPattern, after: String, bound: ScanBound) throws
        -> (matched: CacheWriter.MatchedRows, lastKey: String?, scanned: Int) {
        let statement = try db.cachedStatement(sql: "SELECT rowid, key FROM cache_entry WHERE key > ? ORDER BY key LIMIT ?")
        let raw = statement.sqliteStatement
        sqlite3_reset(raw)
        defer { sqlite3_reset(raw) }
        let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)  // SQLITE_TRANSIENT: SQLite copies the bytes
        sqlite3_bind_text(raw, 1, after, -1, transient)
        sqlite3_bind_int64(raw, 2, Int64(scanSliceRows))
        let matcher = pattern.matcher()
        var matched = CacheWriter.MatchedRows(rows: [], keys: [])
        // The cursor: the key of a full slice's last row, copied as it is read (SQLite's buffer
        // goes with the next step); a shorter slice was the last.
        var last: String?
        var scanned = 0
        while true {
            let rc = sqlite3_step(raw)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: rc), message: "pattern scan failed") }
            let rowid = sqlite3_column_int64(raw, 0)
            scanned += 1
            try bound.check(scanned: scanned)
            guard let text = sqlite3_column_text(raw, 1) else { continue }
            let key = UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(raw, 1)))
            if scanned == scanSliceRows { last = String(decoding: key, as: UTF8.self) }
            guard try matcher.matches(key) else { continue }
            matched.rows.append(KeyIndex.Row(rowid: rowid, hash: KeyHash.of(key), size: 0))
            matched.keys.append(String(decoding: key, as: UTF8.self))
        }
        return (matched, last, scanned)
    }
}

/// When entries were last read, gathered by readers and written by the writer with its next
/// batch (the least-recently-used order eviction follows).
final class AccessLog: Sendable {
    /// A key read at `at`; `rowid`: its row, when the read was of SQLite (a hot-tier read
    /// does not know it).
    struct Touch: Sendable, Equatable {
        var at: Double
        var rowid: Int64?
    }

    private let touched = Mutex<[String: Touch]>([:])

    func record(_ key: String, at time: Double, rowid: Int64? = nil) {
        touched.withLock { $0[key] = Touch(at: time, rowid: rowid) }
    }

    /// What was recorded since the last call.
    func take() -> [String: Touch] {
        touched.withLock { t in
            defer { t.removeAll(keepingCapacity: true) }
            return t
        }
    }
}
