import ConciergeCore
import Foundation
import GRDB
import GRDBSQLite
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import GRDBSQLite

/// The two-tier cache: a ``HotTier`` in memory in front of SQLite.
///
/// Reads: the hot tier first (no I/O); on a miss, one cached prepared statement on a WAL
/// reader, and the entry is promoted. Writes never happen on the request path: ``store(_:)``
/// fills the hot tier and queues the row for the single writer loop (``run()``), which
/// commits queued work in one transaction, keeps the total under `maxBytes` (least recently
/// used out) and applies invalidations in the order they were asked for.
public final class CacheStore: Sendable {
    /// Listing row for the admin API; never holds a body.
    public struct EntrySummary: Sendable {
        public var key: String
        public var endpoint: String
        public var userID: String?
        public var size: Int
        public var age: Int
        public var ttl: Int
    }

    enum Operation: Sendable {
        case put(CacheEntry)
        case invalidate(InvalidationCriteria, KeyMatcher?, CheckedContinuation<Int, any Error>)
        case sweep([String: Int], CheckedContinuation<Int, Never>)
        case barrier(CheckedContinuation<Void, Never>)
    }

    struct Totals {
        var entries = 0
        var bytes = 0
    }

    public let database: StorageDatabase
    public let hot: HotTier
    public let maxBytes: Int
    let logger: Logger
    private let pending = Mutex<[Operation]>([])
    private let touched = Mutex<[String: Double]>([:])
    private let totals = Mutex(Totals())
    /// Hashes of every key in SQLite: a lookup whose hash is absent skips the database.
    private let presence = Mutex(Set<UInt64>())
    /// Rows already invalidated but still being deleted in the background (large regex
    /// invalidations): never served, never listed.
    private let doomed = Mutex(Set<Int64>())
    /// Above this many matches a regex invalidation answers once the rows are unreachable
    /// and deletes them in the background, in chunks.
    static let inlineDeleteLimit = 5000
    private let wakeup: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation

    /// Encodes an entry's head as it enters the hot tier (`nil`: hits build their head).
    private let encodeHead: (@Sendable (CacheEntry) -> EncodedHead?)?

    public init(database: StorageDatabase, maxBytes: Int, memoryBytes: Int, logger: Logger,
                encodeHead: (@Sendable (CacheEntry) -> EncodedHead?)? = nil) throws {
        self.database = database
        self.encodeHead = encodeHead
        self.maxBytes = maxBytes
        self.hot = HotTier(capacityBytes: memoryBytes)
        self.logger = logger
        (wakeup, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let initial = try database.pool.read { db -> Totals in
            let row = try Row.fetchOne(db, sql: "SELECT COUNT(*) AS n, COALESCE(SUM(size), 0) AS b FROM cache_entry")!
            return Totals(entries: row["n"], bytes: row["b"])
        }
        totals.withLock { $0 = initial }
        let hashes = try database.pool.read { db -> Set<UInt64> in
            var set = Set<UInt64>(minimumCapacity: initial.entries)
            let statement = try db.makeStatement(sql: "SELECT key FROM cache_entry")
            let raw = statement.sqliteStatement
            while sqlite3_step(raw) == SQLITE_ROW {
                if let text = sqlite3_column_text(raw, 0) {
                    set.insert(KeyHash.of(UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(raw, 0)))))
                }
            }
            sqlite3_reset(raw)
            return set
        }
        presence.withLock { $0 = hashes }
    }

    private func putHot(_ entry: CacheEntry) {
        var entry = entry
        // A body read from the network may be a slice of a larger read buffer; the hot tier
        // keeps its own tight copy so an entry holds only its bytes.
        if entry.body.storageCapacity > entry.body.readableBytes + 64 {
            entry.body = ByteBuffer(bytes: entry.body.readableBytesView)
        }
        if let encodeHead { entry.encodedHead = encodeHead(entry) }
        hot.put(entry)
    }

    // MARK: Reads

    /// The hot-tier entry, without I/O. Callable on an event loop.
    public func hotLookup(_ key: String, now: Double = Date().timeIntervalSince1970) -> CacheEntry? {
        guard let (entry, report) = hot.getReportingAccess(key, now: now) else { return nil }
        if report { touched.withLock { $0[entry.key] = now } }
        return entry
    }

    /// Hot tier, then SQLite (promoting what it finds).
    nonisolated(nonsending) public func lookup(_ key: String) async -> CacheEntry? {
        if let entry = hotLookup(key) { return entry }
        let hash = KeyHash.of(key)
        guard presence.withLock({ $0.contains(hash) }) else { return nil }
        do {
            let entry = try await database.pool.read { db -> CacheEntry? in
                let statement = try db.cachedStatement(sql: """
                    SELECT rowid, key, endpoint, user_id, status, stored_at, ttl, swr, sie, version, headers, body
                    FROM cache_entry WHERE key = ?
                    """)
                guard let row = try Row.fetchOne(statement, arguments: [key]) else { return nil }
                if self.doomed.withLock({ $0.contains(row["rowid"]) }) { return nil }
                return Self.entry(from: row)
            }
            guard let entry else { return nil }
            if Date().timeIntervalSince1970 >= entry.usableUntil { return nil }
            putHot(entry)
            touched.withLock { $0[entry.key] = Date().timeIntervalSince1970 }
            return entry
        } catch {
            logger.error("cache read failed", metadata: ["error": "\(error)"])
            return nil
        }
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

    public var entryCount: Int { totals.withLock { $0.entries } }
    public var byteCount: Int { totals.withLock { $0.bytes } }

    /// A page of entries ordered by key, after `cursor` (exclusive).
    public func entries(pattern: RegexBox?, limit: Int, cursor: String?) async throws -> (entries: [EntrySummary], next: String?) {
        await flush()
        let now = Date().timeIntervalSince1970
        return try await database.pool.read { db in
            var result: [EntrySummary] = []
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
                    if self.doomed.withLock({ $0.contains(row["rowid"]) }) { continue }
                    let storedAt: Double = row["stored_at"], ttl: Double = row["ttl"]
                    result.append(EntrySummary(key: key, endpoint: row["endpoint"], userID: row["user_id"], size: row["size"],
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

    // MARK: Writes

    /// At most this many entries wait for the writer; more are kept in the hot tier only.
    static let maxQueuedPuts = 20_000

    /// Puts the entry in the hot tier at once and queues it for SQLite.
    ///
    /// - Returns: whether the writer queue accepted the entry. It refuses while storage is
    ///   degraded (writes failing) or the queue is full; the entry then lives in the hot
    ///   tier only. An accepted entry is committed within one writer pass unless the disk
    ///   fails meanwhile: accepted means queued, not yet durable.
    @discardableResult
    public func store(_ entry: CacheEntry) -> Bool {
        putHot(entry)
        guard !database.health.isDegraded else { return false }
        let accepted = pending.withLock { ops -> Bool in
            guard ops.count < Self.maxQueuedPuts else { return false }
            ops.append(.put(entry))
            return true
        }
        if accepted { wake.yield() }
        return accepted
    }

    /// While storage is degraded: tries one small write and marks storage healthy again
    /// when it commits. Returns whether storage is healthy afterwards.
    @discardableResult
    public func probe() async -> Bool {
        guard database.health.isDegraded else { return true }
        do {
            try await database.pool.write { db in
                let version = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
                try db.execute(sql: "PRAGMA user_version = \(version)")
            }
            database.health.recordSuccess()
            return true
        } catch {
            database.health.recordFailure("probe", error)
            return false
        }
    }

    /// Removes matching entries from both tiers; returns how many distinct entries went.
    public func invalidate(_ criteria: InvalidationCriteria) async throws -> Int {
        let regex: KeyMatcher?
        if case .pattern(let source) = criteria { regex = try KeyMatcher(source) } else { regex = nil }
        hot.remove(where: criteria, regex: regex)
        return try await withCheckedThrowingContinuation { continuation in
            enqueue(.invalidate(criteria, regex, continuation))
        }
    }

    /// Deletes entries past all their windows and entries whose version is not the
    /// current one for their endpoint (`versions`: endpoint name → version; endpoints not
    /// listed are gone from the config and their entries are deleted too).
    @discardableResult
    public func sweep(currentVersions: [String: Int]) async -> Int {
        await withCheckedContinuation { continuation in
            enqueue(.sweep(currentVersions, continuation))
        }
    }

    /// Returns once everything queued before the call is committed.
    public func flush() async {
        await withCheckedContinuation { continuation in
            enqueue(.barrier(continuation))
        }
    }

    private func enqueue(_ operation: Operation) {
        pending.withLock { $0.append(operation) }
        wake.yield()
    }

    /// The writer loop. Runs until the task is cancelled, then commits what is queued.
    public func run() async {
        for await _ in wakeup {
            await gatherPuts()
            await drain()
            if Task.isCancelled { break }
        }
        await drain()
    }

    /// Ends the writer loop after committing what is queued; eviction in progress stops
    /// after its current slice (it resumes at the next start).
    public func finish() {
        stopping.withLock { $0 = true }
        wake.finish()
    }

    /// Group commit: with only a few puts queued the writer waits this long for more, so one
    /// transaction carries many entries. Each commit rewrites every index page it touches
    /// and appends them to the WAL: a busy run of one-entry transactions costs several times
    /// the writes of the same entries in one. Entries are served from the hot tier meanwhile.
    static let groupCommitDelay = Duration.milliseconds(5)
    static let groupCommitSize = 256

    /// Waits ``groupCommitDelay`` when the queue holds fewer than ``groupCommitSize`` puts and
    /// nothing else: invalidations, sweeps and flushes never wait, nor does a stopping writer.
    private func gatherPuts() async {
        let onlyFewPuts = pending.withLock { ops in
            !ops.isEmpty && ops.count < Self.groupCommitSize && ops.allSatisfy { if case .put = $0 { true } else { false } }
        }
        guard onlyFewPuts, !isStopping else { return }
        try? await Task.sleep(for: Self.groupCommitDelay)
    }

    private let stopping = Mutex(false)
    var isStopping: Bool { stopping.withLock { $0 } }

    /// Commits what is queued, batch after batch. Puts that arrived while a batch committed
    /// are gathered like the first ones (``gatherPuts()``), so a steady stream of misses goes
    /// in transactions of ``groupCommitDelay``'s worth, not in one per commit's duration.
    private func drain() async {
        var committed = false
        while true {
            if committed { await gatherPuts() }
            let batch = pending.withLock { ops -> [Operation] in
                defer { ops.removeAll(keepingCapacity: true) }
                return ops
            }
            if batch.isEmpty {
                // An eviction pass that ran out of time woke the writer to go on.
                if !isStopping, needsEviction { await evict() }
                let written = committedSinceTrim.withLock { n -> Int in
                    defer { if n >= Self.trimAfterOperations { n = 0 } }
                    return n
                }
                if written >= Self.trimAfterOperations { MemoryTrim.returnFreedMemory() }
                return
            }
            committedSinceTrim.withLock { $0 += batch.count }
            await commit(batch)
            committed = true
        }
    }

    /// Runs the cached upsert for one entry through SQLite's C API: its 14 values bound
    /// straight from the entry (the body from its buffer, no `Data` copy), instead of through
    /// `StatementArguments`, which boxes each value and was a third of the writer's time per
    /// entry. The statement comes from and goes back to GRDB's cache reset, as GRDB leaves
    /// it; an error is GRDB's `DatabaseError`, as `execute(arguments:)` throws it.
    private static func upsert(_ e: CacheEntry, lastAccess: Double, with statement: Statement, in db: Database) throws {
        let sql = statement.sqliteStatement
        defer {
            sqlite3_reset(sql)
            sqlite3_clear_bindings(sql)
        }
        func text(_ index: Int32, _ value: String?) {
            guard var value else { return }  // cleared bindings are NULL
            value.withUTF8 { bytes in
                _ = sqlite3_bind_text(sql, index, bytes.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) },
                                      Int32(bytes.count), transient)
            }
        }
        text(1, e.key)
        text(2, e.endpoint)
        text(3, e.userID)
        sqlite3_bind_int64(sql, 4, Int64(e.status))
        sqlite3_bind_double(sql, 5, e.storedAt)
        sqlite3_bind_double(sql, 6, e.ttl)
        sqlite3_bind_double(sql, 7, e.staleWhileRevalidate)
        sqlite3_bind_double(sql, 8, e.staleIfError)
        sqlite3_bind_double(sql, 9, e.usableUntil)
        sqlite3_bind_int64(sql, 10, Int64(e.version))
        sqlite3_bind_int64(sql, 11, Int64(e.size))
        sqlite3_bind_double(sql, 12, lastAccess)
        text(13, JSONValue.serializedPairs(e.headers))
        e.body.withUnsafeReadableBytes { bytes in
            // A zero-length blob, not NULL, for an empty body (as `Data()` bound).
            _ = sqlite3_bind_zeroblob(sql, 14, 0)
            if let base = bytes.baseAddress, bytes.count > 0 { _ = sqlite3_bind_blob(sql, 14, base, Int32(bytes.count), transient) }
        }
        let code = sqlite3_step(sql)
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
                                sql: String(cString: sqlite3_sql(sql)))
        }
    }

    /// SQLite copies what is bound with this destructor (the bytes need not outlive the call).
    private static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    /// This many writes, once the queue is empty, leave freed memory worth giving back.
    static let trimAfterOperations = 1000
    private let committedSinceTrim = Mutex(0)

    private func commit(_ batch: [Operation]) async {
        let touches = touched.withLock { t -> [String: Double] in
            defer { t.removeAll(keepingCapacity: true) }
            return t
        }
        var results: [Result<Int, any Error>] = []
        var removedAfterCommit: [(InvalidationCriteria, KeyMatcher?)] = []
        var delta = Totals()
        let now = Date().timeIntervalSince1970
        var wrote = false
        do {
            (results, delta, wrote) = try await database.pool.write { db -> ([Result<Int, any Error>], Totals, Bool) in
                let changesBefore = db.totalChangesCount
                var results: [Result<Int, any Error>] = []
                var delta = Totals()
                let sizeOf = try db.cachedStatement(sql: "SELECT rowid, size FROM cache_entry WHERE key = ?")
                let upsert = try db.cachedStatement(sql: """
                    INSERT INTO cache_entry (key, endpoint, user_id, status, stored_at, ttl, swr, sie, usable_until, version, size,
                      last_access, headers, body)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(key) DO UPDATE SET endpoint = excluded.endpoint, user_id = excluded.user_id, status = excluded.status,
                      stored_at = excluded.stored_at, ttl = excluded.ttl, swr = excluded.swr, sie = excluded.sie,
                      usable_until = excluded.usable_until, version = excluded.version, size = excluded.size,
                      last_access = excluded.last_access, headers = excluded.headers, body = excluded.body
                    """)
                for op in batch {
                    switch op {
                    case .put(let e):
                        // A key the presence set did not know has no row, unless an invalidation
                        // left rows for the background delete (doomed): then look.
                        let known = !self.presence.withLock { $0.insert(KeyHash.of(e.key)).inserted }
                        let mayHaveRow = known || !self.doomed.withLock { $0.isEmpty }
                        let old = mayHaveRow ? try Row.fetchOne(sizeOf, arguments: [e.key]) : nil
                        if let old, !self.doomed.withLock({ $0.remove(old["rowid"] as Int64) != nil }) {
                            delta.bytes -= old["size"] as Int
                        } else {
                            // New, or replacing a row already counted out by an invalidation.
                            delta.entries += 1
                        }
                        delta.bytes += e.size
                        try Self.upsert(e, lastAccess: now, with: upsert, in: db)
                        if old == nil {
                            // A new row can take the rowid of a deleted row still marked doomed
                            // (SQLite reuses the largest rowid): the new row is not doomed.
                            let rowid = db.lastInsertedRowID
                            self.doomed.withLock { doomed in if !doomed.isEmpty { doomed.remove(rowid) } }
                        }
                        results.append(.success(0))
                    case .invalidate(let criteria, let regex, _):
                        let (n, b) = try self.delete(db, criteria, regex)
                        delta.entries -= n
                        delta.bytes -= b
                        results.append(.success(n))
                    case .sweep(let versions, _):
                        let (n, b) = try self.sweep(db, versions: versions, now: now)
                        delta.entries -= n
                        delta.bytes -= b
                        results.append(.success(n))
                    case .barrier:
                        results.append(.success(0))
                    }
                }
                if !touches.isEmpty {
                    let touch = try db.cachedStatement(sql: "UPDATE cache_entry SET last_access = ? WHERE key = ?")
                    for (key, at) in touches { try touch.execute(arguments: [at, key]) }
                }
                return (results, delta, db.totalChangesCount != changesBefore)
            }
        } catch {
            // Rate-limited there: a full disk fails every batch.
            database.health.recordFailure("cache", error)
            results = batch.map { _ in .failure(error) }
        }
        // A transaction that changed nothing proves nothing about the disk.
        if wrote { database.health.recordSuccess() }
        totals.withLock {
            $0.entries += delta.entries
            $0.bytes += delta.bytes
        }
        if !isStopping, needsEviction { await evict() }
        for (op, result) in zip(batch, results) {
            switch op {
            case .put: break
            case .invalidate(let criteria, let regex, let continuation):
                removedAfterCommit.append((criteria, regex))
                continuation.resume(with: result)
            case .sweep(let versions, let continuation):
                hot.removeAll { entry in entry.usableUntil <= now || versions[entry.endpoint].map { $0 != entry.version } ?? true }
                continuation.resume(returning: (try? result.get()) ?? 0)
            case .barrier(let continuation):
                continuation.resume()
            }
        }
        // A reader may have promoted a row between the first hot-tier removal and the delete.
        for (criteria, regex) in removedAfterCommit { hot.remove(where: criteria, regex: regex) }
    }

    /// Eviction keeps the cached bytes under 80% of `maxBytes`, so that the file with its
    /// SQLite overhead stays under `maxBytes`; it also starts whenever the database file and
    /// its WAL together exceed `maxBytes`.
    var evictionHighWater: Int { maxBytes / 10 * 8 }
    var evictionLowWater: Int { maxBytes / 10 * 7 }
    /// One eviction slice deletes at most this many bytes (or ``evictionSliceRows`` rows) in
    /// one transaction, then gives at most ``vacuumSlicePages`` pages back and truncates the
    /// WAL: no transaction, vacuum or checkpoint grows with the size of the cache.
    static let evictionSliceBytes = 16 << 20
    static let evictionSliceRows = 2000
    static let vacuumSlicePages = 4096
    /// One writer pass spends at most this long evicting, then lets queued writes in.
    static let evictionPassTime = Duration.milliseconds(400)

    var needsEviction: Bool { byteCount > evictionHighWater || database.fileBytes > maxBytes }

    /// Evicts least recently used entries in bounded slices until the cached bytes are under
    /// the low-water mark and the file with its WAL under `maxBytes`. A pass stops after
    /// ``evictionPassTime`` (and at once on shutdown) and wakes the writer to go on later.
    private func evict() async {
        let passEnd = ContinuousClock.now + Self.evictionPassTime
        var removedEntries = 0, removedBytes = 0
        var finished = false
        do {
            // A WAL left large by a burst of writes may be all the excess.
            try await database.pool.writeWithoutTransaction { db in _ = try? db.checkpoint(.truncate) }
            while !isStopping {
                let fileExcess = database.fileBytes - maxBytes / 10 * 9
                let cacheExcess = byteCount - evictionLowWater
                let (freePages, pageSize) = try await database.pool.read { db in
                    (try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0, try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096)
                }
                // Free pages shrink the file without deleting anything.
                let rowsExcess = max(cacheExcess, fileExcess - freePages * pageSize)
                if rowsExcess <= 0 && (fileExcess <= 0 || freePages == 0) {
                    finished = true
                    break
                }
                let (n, b) = rowsExcess > 0 ? try await evictSlice(upTo: min(rowsExcess, Self.evictionSliceBytes)) : (0, 0)
                removedEntries += n
                removedBytes += b
                try await database.pool.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA incremental_vacuum(\(Self.vacuumSlicePages))")
                    _ = try? db.checkpoint(.truncate)
                }
                if n == 0 && rowsExcess > 0 && freePages == 0 {
                    finished = true  // nothing left to evict
                    break
                }
                if ContinuousClock.now >= passEnd { break }
            }
            if removedEntries > 0 {
                logger.debug("evicted least recently used entries", metadata: ["entries": "\(removedEntries)", "bytes": "\(removedBytes)"])
            }
        } catch {
            database.health.recordFailure("eviction", error)
            return
        }
        if !finished && !isStopping { wake.yield() }
    }

    /// Deletes least recently used rows worth about `bytes` in one transaction.
    private func evictSlice(upTo bytes: Int) async throws -> (Int, Int) {
        let (n, b) = try await database.pool.write { db -> (Int, Int) in
            var removedEntries = 0, removedBytes = 0
            let select = try db.cachedStatement(sql: "SELECT key, size FROM cache_entry ORDER BY last_access LIMIT ?")
            let delete = try db.cachedStatement(sql: "DELETE FROM cache_entry WHERE key = ?")
            for row in try Row.fetchAll(select, arguments: [Self.evictionSliceRows]) where removedBytes < bytes {
                let key: String = row["key"], size: Int = row["size"]
                try delete.execute(arguments: [key])
                self.hot.remove(key)
                self.presence.withLock { _ = $0.remove(KeyHash.of(key)) }
                removedEntries += 1
                removedBytes += size
            }
            return (removedEntries, removedBytes)
        }
        totals.withLock {
            $0.entries -= n
            $0.bytes -= b
        }
        return (n, b)
    }

    /// Deletes rows matching a SQL condition; keeps the presence set in step.
    func deleteRows(_ db: Database, where whereClause: String, _ arguments: StatementArguments = []) throws -> (Int, Int) {
        var n = 0, b = 0
        var hashes: [UInt64] = []
        let rows = try Row.fetchCursor(db, sql: "DELETE FROM cache_entry WHERE \(whereClause) RETURNING key, size", arguments: arguments)
        while let row = try rows.next() {
            n += 1
            b += row["size"] as Int
            hashes.append(KeyHash.of(row["key"] as String))
        }
        if !hashes.isEmpty { presence.withLock { set in for h in hashes { set.remove(h) } } }
        return (n, b)
    }

    func delete(_ db: Database, _ criteria: InvalidationCriteria, _ regex: KeyMatcher?) throws -> (Int, Int) {
        switch criteria {
        case .all:
            let row = try Row.fetchOne(db, sql: "SELECT COUNT(*) AS n, COALESCE(SUM(size), 0) AS b FROM cache_entry")!
            try db.execute(sql: "DELETE FROM cache_entry")
            presence.withLock { $0.removeAll() }
            return (row["n"], row["b"])
        case .user(let user):
            return try deleteRows(db, where: "user_id = ?", [user])
        case .endpoints(let names, let scope):
            let marks = Array(repeating: "?", count: max(1, names.count)).joined(separator: ",")
            var arguments = StatementArguments(names.isEmpty ? [""] : names)
            switch scope {
            case .everyone:
                return try deleteRows(db, where: "endpoint IN (\(marks))", arguments)
            case .sharedOnly:
                return try deleteRows(db, where: "endpoint IN (\(marks)) AND user_id IS NULL", arguments)
            case .sharedAnd(let user):
                arguments += [user]
                return try deleteRows(db, where: "endpoint IN (\(marks)) AND (user_id IS NULL OR user_id = ?)", arguments)
            }
        case .pattern:
            guard let regex else { return (0, 0) }
            return try deleteMatching(db, regex)
        }
    }

    /// Regex invalidation: one pass over the key index straight from SQLite's buffers (no
    /// string per key), then deletes by rowid.
    func deleteMatching(_ db: Database, _ regex: KeyMatcher) throws -> (Int, Int) {
        var matched: [(rowid: Int64, size: Int, hash: UInt64)] = []
        let scan = try db.makeStatement(sql: "SELECT rowid, key, size FROM cache_entry")
        let raw = scan.sqliteStatement
        defer { sqlite3_reset(raw) }
        while true {
            let rc = sqlite3_step(raw)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: rc), message: "scan failed") }
            guard let text = sqlite3_column_text(raw, 1) else { continue }
            let matches = text.withMemoryRebound(to: CChar.self, capacity: 1) { regex.matches(cString: $0) }
            if matches {
                let bytes = UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(raw, 1)))
                matched.append((sqlite3_column_int64(raw, 0), Int(sqlite3_column_int64(raw, 2)), KeyHash.of(bytes)))
            }
        }
        guard !matched.isEmpty else { return (0, 0) }
        let bytes = matched.reduce(0) { $0 + $1.size }
        presence.withLock { set in for m in matched { set.remove(m.hash) } }
        if matched.count <= Self.inlineDeleteLimit {
            let delete = try db.cachedStatement(sql: "DELETE FROM cache_entry WHERE rowid = ?")
            for m in matched { try delete.execute(arguments: [m.rowid]) }
        } else {
            // Unreachable now (presence set, doomed set), deleted in the background.
            let rowids = matched.map(\.rowid)
            doomed.withLock { set in for id in rowids { set.insert(id) } }
            let cutoff = Date().timeIntervalSince1970
            Task { await self.deleteInBackground(rowids, storedUpTo: cutoff) }
        }
        return (matched.count, bytes)
    }

    /// Deletes invalidated rows in chunks so cache writes and hits are not held up.
    /// A row whose key was stored again meanwhile is kept: an upsert gives the row a new
    /// `stored_at`, so only rows still stored before the invalidation go.
    private func deleteInBackground(_ rowids: [Int64], storedUpTo cutoff: Double) async {
        var index = 0
        while index < rowids.count {
            let chunk = Array(rowids[index..<min(index + 2000, rowids.count)])
            index += chunk.count
            do {
                try await database.pool.write { db in
                    let delete = try db.cachedStatement(sql: "DELETE FROM cache_entry WHERE rowid = ? AND stored_at <= ?")
                    for id in chunk { try delete.execute(arguments: [id, cutoff]) }
                }
            } catch {
                logger.error("background delete of invalidated entries failed", metadata: ["error": "\(error)"])
            }
        }
        // A reader that opened its snapshot before the last chunk committed may still see
        // those rows: keep them marked a little longer.
        try? await Task.sleep(for: .seconds(2))
        doomed.withLock { set in for id in rowids { set.remove(id) } }
    }

    func sweep(_ db: Database, versions: [String: Int], now: Double) throws -> (Int, Int) {
        var n = 0, b = 0
        func run(_ whereClause: String, _ arguments: StatementArguments) throws {
            let (count, size) = try deleteRows(db, where: whereClause, arguments)
            n += count
            b += size
        }
        try run("usable_until <= ?", [now])
        for (endpoint, version) in versions {
            try run("endpoint = ? AND version != ?", [endpoint, version])
        }
        let names = Array(versions.keys)
        if !names.isEmpty {
            let marks = Array(repeating: "?", count: names.count).joined(separator: ",")
            try run("endpoint NOT IN (\(marks))", StatementArguments(names))
        }
        return (n, b)
    }
}
