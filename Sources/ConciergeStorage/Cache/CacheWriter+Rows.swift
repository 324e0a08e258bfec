import ConciergeCore
import Foundation
import GRDB
import GRDBSQLite

/// The writer's SQL: each function changes rows inside the batch's transaction and tells the
/// ``RowLedger`` what it changed, by one event.
extension CacheWriter {
    static let upsertSQL = """
        INSERT INTO cache_entry (key, endpoint, user_id, status, stored_at, ttl, swr, sie, usable_until, version, size,
          last_access, headers, body)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT(key) DO UPDATE SET endpoint = excluded.endpoint, user_id = excluded.user_id, status = excluded.status,
          stored_at = excluded.stored_at, ttl = excluded.ttl, swr = excluded.swr, sie = excluded.sie,
          usable_until = excluded.usable_until, version = excluded.version, size = excluded.size,
          last_access = excluded.last_access, headers = excluded.headers, body = excluded.body
        """

    func put(_ entry: CacheEntry, in db: Database, now: Double, upsert: Statement) throws {
        let hash = KeyHash.of(entry.key)
        var old: KeyIndex.Row?
        if ledger.update({ $0.putting(hash) }) {
            let sizeOf = try db.cachedStatement(sql: "SELECT rowid, size FROM cache_entry WHERE key = ?")
            if let row = try Row.fetchOne(sizeOf, arguments: [entry.key]) {
                old = KeyIndex.Row(rowid: row["rowid"], hash: hash, size: row["size"])
            }
        }
        let size = entry.size  // a walk over the header list: once
        try Self.upsert(entry, size: size, lastAccess: now, with: upsert, in: db)
        // SQLite's own call: GRDB's `lastInsertedRowID` checks the dispatch queue first (a
        // `DispatchQueue.getSpecific`, about 200 instructions an entry).
        let rowid = old?.rowid ?? sqlite3_last_insert_rowid(db.sqliteConnection)
        if !entry.tags.isEmpty {
            try db.cachedStatement(sql: "DELETE FROM cache_tag WHERE key = ?").execute(arguments: [entry.key])
            let tag = try db.cachedStatement(sql: "INSERT OR IGNORE INTO cache_tag (tag, key) VALUES (?, ?)")
            for name in entry.tags { try tag.execute(arguments: [name, entry.key]) }
            // A row the loader has not read yet learns of its tags from the filter.
            loadingTags.withLock { $0?.insert(hash) }  // nil once the index is loaded
        }
        let stored = RowFacts.Row(rowid: rowid, usableUntil: entry.usableUntil, lastAccess: now, endpoint: entry.endpoint,
                                  version: entry.version, userID: entry.userID, tagged: !entry.tags.isEmpty)
        ledger.update { $0.put(stored, size: size, replacing: old) }
    }

    /// Runs the cached upsert for one entry through SQLite's C API: its 14 values bound
    /// straight from the entry, instead of through `StatementArguments`, which boxes each
    /// value and was a third of the writer's time per entry. Every text and the body are bound
    /// in place (`SQLITE_STATIC`, no copy into SQLite's own buffer) and the statement is
    /// stepped inside the closures that lend their bytes; the bindings are stale after that,
    /// and no step reads them again: every parameter is bound on every call, `NULL` too, before
    /// the next step (so the last entry's values need no `sqlite3_clear_bindings`, which cost
    /// 1.2k instructions an entry). The statement comes from and goes back to GRDB's cache
    /// reset, as GRDB leaves it; an error is GRDB's `DatabaseError`, as `execute(arguments:)`
    /// throws it.
    static func upsert(_ e: CacheEntry, size: Int, lastAccess: Double, with statement: Statement, in db: Database) throws {
        let sql = statement.sqliteStatement
        defer { sqlite3_reset(sql) }
        sqlite3_bind_int64(sql, 4, Int64(e.status))
        sqlite3_bind_double(sql, 5, e.storedAt)
        sqlite3_bind_double(sql, 6, e.ttl)
        sqlite3_bind_double(sql, 7, e.staleWhileRevalidate)
        sqlite3_bind_double(sql, 8, e.staleIfError)
        sqlite3_bind_double(sql, 9, e.usableUntil)
        sqlite3_bind_int64(sql, 10, Int64(e.version))
        sqlite3_bind_int64(sql, 11, Int64(size))
        sqlite3_bind_double(sql, 12, lastAccess)
        let headers = JSONValue.serializedPairBytes(e.headers)
        let code = lending(e.key) { key in
            bindLent(sql, 1, key)
            return lending(e.endpoint) { endpoint in
                bindLent(sql, 2, endpoint)
                return lending(e.userID) { userID in
                    bindLent(sql, 3, userID)
                    return headers.withUnsafeBufferPointer { headerBytes in
                        bindLent(sql, 13, headerBytes)  // never empty (at least `[]`)
                        return e.body.withUnsafeReadableBytes { bytes -> Int32 in
                            if let base = bytes.baseAddress, bytes.count > 0 {
                                _ = sqlite3_bind_blob(sql, 14, base, Int32(bytes.count), lent)
                            } else {
                                // A zero-length blob, not NULL, for an empty body (as `Data()` bound).
                                _ = sqlite3_bind_zeroblob(sql, 14, 0)
                            }
                            return sqlite3_step(sql)
                        }
                    }
                }
            }
        }
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
                                sql: String(cString: sqlite3_sql(sql)))
        }
    }

    /// A text's UTF-8 bytes lent to `body` (`nil` for no text).
    private static func lending<R>(_ text: String?, _ body: (UnsafeBufferPointer<UInt8>?) -> R) -> R {
        guard var text else { return body(nil) }
        return text.withUTF8 { body($0) }
    }

    /// Binds lent bytes as text in place (`NULL` for none); an empty text is bound as one,
    /// never as `NULL` (its buffer may have no address).
    private static func bindLent(_ sql: OpaquePointer?, _ index: Int32, _ bytes: UnsafeBufferPointer<UInt8>?) {
        guard let bytes else {
            sqlite3_bind_null(sql, index)
            return
        }
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            _ = sqlite3_bind_text(sql, index, "", 0, transient)
            return
        }
        _ = sqlite3_bind_text(sql, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self), Int32(bytes.count), lent)
    }

    /// SQLite copies what is bound with this destructor (the bytes need not outlive the call).
    static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)
    /// SQLite uses what is bound with this destructor in place: the bytes must stay valid
    /// while the statement is stepped (`SQLITE_STATIC`).
    private static let lent: sqlite3_destructor_type? = nil

    /// Deletes rows matching a SQL condition; returns how many live entries went.
    func deleteRows(_ db: Database, where whereClause: String, _ arguments: StatementArguments = []) throws -> Int {
        let rows = try Row.fetchCursor(db, sql: "DELETE FROM cache_entry WHERE \(whereClause) RETURNING rowid, key, size",
                                       arguments: arguments)
        var deleted: [RowLedger.Deleted] = []
        while let row = try rows.next() {
            let key: String = row["key"]
            deleted.append(RowLedger.Deleted(row: KeyIndex.Row(rowid: row["rowid"], hash: KeyHash.of(key), size: row["size"]), key: key))
        }
        return try forget(deleted, in: db)
    }

    /// Rows just deleted (and `gone`: rows with facts no longer in the table), told to the
    /// ledger, whose answer says which keys' tag rows go too, in this transaction; how many of
    /// them were live entries.
    func forget(_ deleted: [RowLedger.Deleted], gone: [Int64] = [], in db: Database) throws -> Int {
        let (live, untag) = ledger.update { $0.deleted(deleted, gone: gone) }
        try dropTags(of: untag, in: db)
        return live
    }

    func delete(_ criteria: InvalidationCriteria, in db: Database, now: Double) throws -> Int {
        switch criteria.selection {
        case .all:
            try db.execute(sql: "DELETE FROM cache_entry")
            // SQLite's count: the whole table goes without visiting rows.
            let rowsDeleted = db.changesCount
            try db.execute(sql: "DELETE FROM cache_tag")
            try db.execute(sql: "DELETE FROM cache_access")
            try InvalidationJournal.clear(in: db)
            return ledger.update { $0.deletedAll(rowsDeleted: rowsDeleted) }
        case .rows(let filter):
            try rebuildFactsIfNeeded(db)
            var n = try deleteRows(ledger.scanFacts { $0.rows(selectedBy: filter) }, in: db)
            // Rows the key index's loader has not read yet have no facts: SQL selects those.
            if let unread = ledger.unreadRows {
                let selection = filter.sql
                n += try deleteRows(db, where: "rowid > ? AND rowid <= ? AND (\(selection.condition))",
                                    [unread.through, unread.ceiling] + selection.arguments)
            }
            return n
        case .keys, .tags:
            // Matched off the writer (a scan, the tag index), then deleted as
            // ``Work/deleteMatched(_:_:)``.
            return 0
        }
    }

    /// Deletes rows by rowid (those still in the table); how many live entries went.
    func deleteRows(_ rowids: [Int64], in db: Database) throws -> Int {
        guard !rowids.isEmpty else { return 0 }
        let delete = try db.cachedStatement(sql: Self.deleteByRowidSQL)
        var deleted: [RowLedger.Deleted] = []
        for rowid in rowids {
            if let row = try Self.deleteRow(rowid, delete) { deleted.append(row) }
        }
        return try forget(deleted, in: db)
    }

    static let deleteByRowidSQL = "DELETE FROM cache_entry WHERE rowid = ? RETURNING key, size"

    /// Runs a `DELETE … WHERE rowid = ? … RETURNING key, size` for `rowid` (and the statement's
    /// further `arguments`): the row's key and its index row, `nil` when no row went.
    static func deleteRow(_ rowid: Int64, _ delete: Statement, _ arguments: StatementArguments = []) throws -> RowLedger.Deleted? {
        guard let row = try Row.fetchOne(delete, arguments: [rowid] + arguments) else { return nil }
        let key: String = row["key"]
        return RowLedger.Deleted(row: KeyIndex.Row(rowid: rowid, hash: KeyHash.of(key), size: row["size"]), key: key)
    }

    /// The tag rows of deleted entries, dropped in the transaction that deletes them (one probe
    /// of the tag table's key index each, for the keys the ledger says may have some).
    func dropTags(of keys: [String], in db: Database) throws {
        guard !keys.isEmpty else { return }
        let drop = try db.cachedStatement(sql: "DELETE FROM cache_tag WHERE key = ?")
        for key in keys { try drop.execute(arguments: [key]) }
    }

    /// A soft purge: the selected entries that are fresh become fresh until `now` only, and
    /// usable as long as their stale windows allow from now. The rows stay (the key index is
    /// unchanged); a reader takes them, marked, from SQLite.
    func markStale(_ rows: [KeyIndex.Row]?, _ criteria: InvalidationCriteria, in db: Database, now: Double) throws -> Int {
        let set = "SET ttl = ?1 - stored_at, usable_until = ?1 + MAX(swr, sie)"
        // Each marked row's new `usable_until` goes to the row facts.
        var marked: [(rowid: Int64, usableUntil: Double)] = []
        // Rows found by a scan or the tag index come as `rows`; a user's or endpoints' rows
        // are the facts' (and, while the key index loads, SQL's over the rows it has not read).
        var rowids = rows.map { $0.map(\.rowid) } ?? []
        var update: (sql: String, arguments: StatementArguments)?
        if rows == nil {
            switch criteria.selection {
            case .all:
                update = ("UPDATE cache_entry \(set) WHERE stored_at + ttl > ?1", [now])
            case .rows(let filter):
                try rebuildFactsIfNeeded(db)
                rowids = ledger.scanFacts { $0.rows(selectedBy: filter) }
                if let unread = ledger.unreadRows {
                    // The selection's own `?` take the numbers after ?3.
                    let selection = filter.sql
                    update = ("UPDATE cache_entry \(set) WHERE stored_at + ttl > ?1 AND rowid > ?2 AND rowid <= ?3 AND (\(selection.condition))",
                              [now, unread.through, unread.ceiling] + selection.arguments)
                }
            case .keys, .tags:
                return 0
            }
        }
        if !rowids.isEmpty {
            let mark = try db.cachedStatement(sql: "UPDATE cache_entry \(set) WHERE rowid = ?2 AND stored_at + ttl > ?1 RETURNING usable_until")
            for rowid in rowids where !ledger.isDoomed(rowid) {
                if let usableUntil = try Double.fetchOne(mark, arguments: [now, rowid]) { marked.append((rowid, usableUntil)) }
            }
        }
        if let update {
            let changed = try Row.fetchCursor(db, sql: update.sql + " RETURNING rowid, usable_until", arguments: update.arguments)
            while let row = try changed.next() { marked.append((row[0], row[1])) }
        }
        ledger.update { $0.markedStale(marked) }
        return marked.count
    }

    /// Deletes the rows past all their windows that ``RowFacts`` holds (all but those the key
    /// index's loader has not read yet, at start-up), each only if SQLite's own `usable_until`
    /// says so; a time found stale is replaced by SQLite's. The times are read again first when
    /// a rolled-back batch left them unsure.
    func deleteExpired(_ db: Database, now: Double) throws -> Int {
        try rebuildFactsIfNeeded(db)
        let due = ledger.scanFacts { $0.due(by: now) }
        guard !due.isEmpty else { return 0 }
        let delete = try db.cachedStatement(sql: "DELETE FROM cache_entry WHERE rowid = ? AND usable_until <= ? RETURNING key, size")
        let check = try db.cachedStatement(sql: "SELECT usable_until FROM cache_entry WHERE rowid = ?")
        var deleted: [RowLedger.Deleted] = []
        // Not due after all (SQLite's time stands), or no longer in the table.
        var later: [(rowid: Int64, usableUntil: Double)] = []
        var gone: [Int64] = []
        for rowid in due {
            if let row = try Self.deleteRow(rowid, delete, [now]) {
                deleted.append(row)
            } else if let usableUntil = try Double.fetchOne(check, arguments: [rowid]) {
                later.append((rowid, usableUntil))
            } else {
                gone.append(rowid)
            }
        }
        ledger.update { $0.markedStale(later) }
        return try forget(deleted, gone: gone, in: db)
    }

    /// Deletes entries past all their windows and entries whose version is not the current
    /// one for their endpoint (endpoints not in `versions` are gone from the config). Rows the
    /// key index's loader has not read yet are swept once read, by a later sweep.
    func sweep(_ db: Database, versions: [String: Int], now: Double) throws -> Int {
        let n = try deleteExpired(db, now: now)
        return try n + deleteRows(ledger.scanFacts { $0.outdated(versions) }, in: db)
    }
}
