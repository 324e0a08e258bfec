import Foundation
import GRDB

/// The cache's log of invalidations acknowledged but not finished: what makes a large
/// invalidation durable (the same idea as the fleet's invalidation log: each has a sequence
/// number, and what is applied is recorded in SQLite beside the cache).
///
/// Up to ``CacheWriter/inlineDeleteLimit`` matches an invalidation deletes its rows in the
/// transaction that acknowledges it and needs no record. Above that, the rows are *doomed*
/// (unservable at once, deleted later in slices); that transaction also writes one row here:
/// the invalidation's selector, the doomed rowids (8 bytes each, one blob: 800 KB and one
/// insert for 100,000 entries), the instant up to which a row counts as invalidated (a row
/// stored again since is kept) and how far the slices got. Each slice's transaction advances
/// `next`; the last one deletes the record. At start-up (``pending(_:)``, read before the
/// daemon serves) every unfinished record dooms its remaining rows again and its slices are
/// queued again, so after `kill -9` or a power cut no such row is served, listed or counted.
enum InvalidationJournal {
    /// One unfinished invalidation.
    struct Record: Sendable {
        var seq: Int64
        var selector: String
        var rowids: [Int64]
        var storedUpTo: Double
        /// Rowids before this index were deleted already.
        var next: Int
    }

    static let createTable = """
        CREATE TABLE cache_invalidation (
          seq INTEGER PRIMARY KEY AUTOINCREMENT,
          selector TEXT NOT NULL,
          stored_up_to REAL NOT NULL,
          rowids BLOB NOT NULL,
          next INTEGER NOT NULL DEFAULT 0
        )
        """

    /// Records a doom inside the transaction that acknowledges it; its sequence number.
    static func record(selector: String, rowids: [Int64], storedUpTo: Double, in db: Database) throws -> Int64 {
        try db.execute(sql: "INSERT INTO cache_invalidation (selector, stored_up_to, rowids) VALUES (?, ?, ?)",
                       arguments: [selector, storedUpTo, encode(rowids)])
        return db.lastInsertedRowID
    }

    /// A slice's transaction: the rowids before `next` are deleted; the record goes with the last slice.
    static func advance(_ seq: Int64, next: Int, of count: Int, in db: Database) throws {
        if next >= count {
            try db.cachedStatement(sql: "DELETE FROM cache_invalidation WHERE seq = ?").execute(arguments: [seq])
        } else {
            try db.cachedStatement(sql: "UPDATE cache_invalidation SET next = ? WHERE seq = ?").execute(arguments: [next, seq])
        }
    }

    /// Every row of the cache went: nothing is left to finish.
    static func clear(in db: Database) throws {
        try db.execute(sql: "DELETE FROM cache_invalidation")
    }

    /// The unfinished invalidations, oldest first.
    static func pending(_ db: Database) throws -> [Record] {
        try Row.fetchAll(db, sql: "SELECT seq, selector, stored_up_to, rowids, next FROM cache_invalidation ORDER BY seq").map { row in
            Record(seq: row["seq"], selector: row["selector"], rowids: decode(row["rowids"] ?? Data()),
                   storedUpTo: row["stored_up_to"], next: row["next"])
        }
    }

    /// Rowids as little-endian 64-bit integers.
    static func encode(_ rowids: [Int64]) -> Data {
        var data = Data(capacity: rowids.count * 8)
        for rowid in rowids { withUnsafeBytes(of: rowid.littleEndian) { data.append(contentsOf: $0) } }
        return data
    }

    static func decode(_ data: Data) -> [Int64] {
        var rowids: [Int64] = []
        rowids.reserveCapacity(data.count / 8)
        data.withUnsafeBytes { bytes in
            var offset = 0
            while offset + 8 <= bytes.count {
                rowids.append(Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Int64.self)))
                offset += 8
            }
        }
        return rowids
    }
}
