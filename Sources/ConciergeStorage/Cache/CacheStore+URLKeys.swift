import ConciergeCore
import GRDB

/// Invalidation by URL, for `mode: http` (an unsafe request invalidates what its target and
/// `Location` stored, RFC 9111 §4.4): a URL's entries are the one under its key and those
/// under keys that extend it with a space (`… v=1 vary=…`, `… v=1 headers=…`). SQLite's
/// unique index on `cache_entry.key` finds them by a range of that index, so the cost is a
/// lookup per URL and a row per entry removed, whatever the size of the cache; the index is
/// the table's own, so it is complete after a restart.
extension CacheStore {
    /// Removes the entries of each URL key (``UnkeyedRequestFields/urlKey(of:)``) from both
    /// tiers; returns how many rows went. `hotKeys`: keys extending those URL keys that only the
    /// hot tier may hold (stored while storage refused writes).
    ///
    /// The hot tier loses the keys first (as what is queued before this call commits, which the
    /// writer does), so an error of SQLite leaves no entry of these URLs in memory.
    /// - Throws: the storage error that kept the rows from being read or deleted.
    public func invalidate(urlKeys: [String], hotKeys: [String] = []) async throws -> Int {
        // What is queued first (it is older than this call), then the key index.
        await flush(droppingFromMemory: urlKeys + hotKeys)
        let matched = try await reader.rows(underURLKeys: urlKeys)
        guard !matched.rows.isEmpty else { return 0 }
        return try await withCheckedThrowingContinuation { continuation in
            writer.enqueue(.deleteMatched(matched, continuation))
        }
    }
}

extension CacheReader {
    /// The rows stored under each URL key or a key extending it, read through the key
    /// column's unique index: `key = ?` and the range `[urlKey + " ", urlKey + "!")`, which holds
    /// exactly the keys that begin with the URL key and a space (keys compare byte by byte).
    func rows(underURLKeys urlKeys: [String]) async throws -> CacheWriter.MatchedRows {
        guard !urlKeys.isEmpty else { return CacheWriter.MatchedRows(rows: [], keys: []) }
        let rowidMark = ledger.rowidMark
        return try await database.pool.read { db in
            let statement = try db.cachedStatement(sql: """
                SELECT rowid, key FROM cache_entry WHERE key = ?
                UNION ALL
                SELECT rowid, key FROM cache_entry WHERE key >= ? AND key < ?
                """)
            var matched = CacheWriter.MatchedRows(rows: [], keys: [], rowidMark: rowidMark)
            for urlKey in urlKeys {
                let rows = try Row.fetchCursor(statement, arguments: [urlKey, urlKey + " ", urlKey + "!"])
                while let row = try rows.next() {
                    let key: String = row["key"]
                    matched.rows.append(KeyIndex.Row(rowid: row["rowid"], hash: KeyHash.of(key), size: 0))
                    matched.keys.append(key)
                }
            }
            return matched
        }
    }
}
