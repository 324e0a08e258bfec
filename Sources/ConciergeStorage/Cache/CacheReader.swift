import ConciergeCore
import Foundation
import GRDB
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// The cache's read side: the hot tier first (no I/O), then one cached prepared statement on a
/// WAL reader, promoting what it finds. Never writes SQLite; the accesses it sees go to the
/// writer's ``AccessLog`` (least-recently-used order), and the rows it may serve are the
/// ``KeyIndex``'s answer.
final class CacheReader: Sendable {
    let database: StorageDatabase
    let hot: HotTier
    let index: SharedKeyIndex
    let accesses: AccessLog
    let clock: WallClock
    let logger: Logger
    /// Encodes an entry's head as it enters the hot tier (`nil`: hits build their head).
    private let encodeHead: (@Sendable (CacheEntry) -> EncodedHead?)?

    init(database: StorageDatabase, hot: HotTier, index: SharedKeyIndex, accesses: AccessLog, clock: WallClock,
         logger: Logger, encodeHead: (@Sendable (CacheEntry) -> EncodedHead?)?) {
        (self.database, self.hot, self.index, self.accesses) = (database, hot, index, accesses)
        (self.clock, self.logger, self.encodeHead) = (clock, logger, encodeHead)
    }

    /// Puts an entry in the hot tier with its own tight copy of the body (a body read from the
    /// network may be a slice of a larger read buffer) and its encoded head.
    func putHot(_ entry: CacheEntry) {
        var entry = entry
        if entry.body.storageCapacity > entry.body.readableBytes + 64 {
            entry.body = ByteBuffer(bytes: entry.body.readableBytesView)
        }
        if let encodeHead { entry.encodedHead = encodeHead(entry) }
        hot.put(entry)
    }

    /// The hot-tier entry, without I/O. Callable on an event loop.
    func hotLookup(_ key: String, now: Double) -> CacheEntry? {
        guard let (entry, report) = hot.getReportingAccess(key, now: now) else { return nil }
        if report { accesses.record(entry.key, at: now) }
        return entry
    }

    /// Hot tier, then SQLite (promoting what it finds).
    nonisolated(nonsending) func lookup(_ key: String) async -> CacheEntry? {
        let now = clock.now
        if let entry = hotLookup(key, now: now) { return entry }
        guard let began = index.beginReadIfPresent(KeyHash.of(key)) else { return nil }
        var found: (rowid: Int64, entry: CacheEntry)?
        do {
            found = try await database.pool.read { db -> (Int64, CacheEntry)? in
                let statement = try db.cachedStatement(sql: """
                    SELECT rowid, key, endpoint, user_id, status, stored_at, ttl, swr, sie, version, headers, body
                    FROM cache_entry WHERE key = ?
                    """)
                guard let row = try Row.fetchOne(statement, arguments: [key]) else { return nil }
                return (row["rowid"], Self.entry(from: row))
            }
        } catch {
            logger.error("cache read failed", metadata: ["error": "\(error)"])
        }
        guard index.endRead(began, rowid: found?.rowid), let entry = found?.entry else { return nil }
        if now >= entry.usableUntil { return nil }
        putHot(entry)
        accesses.record(entry.key, at: now)
        return entry
    }

    static func entry(from row: Row) -> CacheEntry {
        let headerText: String = row["headers"]
        // Written by the writer as a JSON list of [name, value] pairs.
        var pairs: [[String]] = []
        if case .array(let items)? = JSONValue.parse(headerText) {
            pairs = items.map { item in
                if case .array(let parts) = item { return parts.compactMap(\.stringValue) }
                return []
            }
        }
        let body: Data = row["body"] ?? Data()
        return CacheEntry(key: row["key"], endpoint: row["endpoint"], userID: row["user_id"], status: row["status"],
                          headers: HTTPHeaders(pairs.compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil }),
                          body: ByteBuffer(bytes: body), storedAt: row["stored_at"], ttl: row["ttl"],
                          staleWhileRevalidate: row["swr"], staleIfError: row["sie"], version: row["version"])
    }

    /// A page of entries ordered by key, after `cursor` (exclusive); committed rows only.
    func entries(pattern: RegexBox?, limit: Int, cursor: String?) async throws -> (entries: [CacheStore.EntrySummary], next: String?) {
        let now = clock.now
        let began = index.beginRead()
        defer { index.endRead(began) }
        return try await database.pool.read { db in
            var result: [CacheStore.EntrySummary] = []
            let statement = try db.cachedStatement(sql: """
                SELECT rowid, key, endpoint, user_id, size, stored_at, ttl FROM cache_entry WHERE key > ? ORDER BY key LIMIT ?
                """)
            var after = cursor ?? ""
            while result.count <= limit {
                let rows = try Row.fetchAll(statement, arguments: [after, 1000])
                if rows.isEmpty { break }
                for row in rows {
                    let key: String = row["key"]
                    after = key
                    if let pattern, !pattern.firstMatch(in: key) { continue }
                    if self.index.isDoomed(row["rowid"]) { continue }
                    let storedAt: Double = row["stored_at"], ttl: Double = row["ttl"]
                    result.append(CacheStore.EntrySummary(key: key, endpoint: row["endpoint"], userID: row["user_id"], size: row["size"],
                                                          age: max(0, Int(now - storedAt)), ttl: Int((storedAt + ttl - now).rounded(.down))))
                    if result.count > limit { break }
                }
            }
            if result.count > limit {
                result.removeLast()
                return (result, result.last?.key)
            }
            return (result, nil)
        }
    }
}

/// When entries were last read, gathered by readers and written by the writer with its next
/// batch (the least-recently-used order eviction follows).
final class AccessLog: Sendable {
    private let touched = Mutex<[String: Double]>([:])

    func record(_ key: String, at time: Double) {
        touched.withLock { $0[key] = time }
    }

    /// What was recorded since the last call.
    func take() -> [String: Double] {
        touched.withLock { t in
            defer { t.removeAll(keepingCapacity: true) }
            return t
        }
    }
}
