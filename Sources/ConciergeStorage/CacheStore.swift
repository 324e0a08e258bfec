import ConciergeCore
import Foundation
import GRDB
import Logging
import NIOCore

/// The two-tier cache: a ``HotTier`` in memory in front of SQLite, with one reader side and
/// one writer.
///
/// Reads (``CacheReader``): the hot tier first (no I/O); on a miss, one cached prepared
/// statement on a WAL reader, and the entry is promoted. Writes never happen on the request
/// path: ``store(_:)`` fills the hot tier and queues the row for the single writer
/// (``CacheWriter``, run by ``run()``), which commits queued work in one transaction, keeps the
/// total under `maxBytes` (least recently used out) and applies invalidations in the order
/// they were asked for. What the two sides share about the rows is the writer's ``RowLedger``;
/// the hot tier loses what an invalidation selects when the writer's batch ends, never before
/// the work is queued (this object finds rows, the writer removes them).
public final class CacheStore: Sendable {
    /// Listing row for the admin API; never holds a body.
    public struct EntrySummary: Sendable {
        public var key: String
        public var endpoint: String
        public var userID: String?
        public var size: Int
        public var age: Int
        public var ttl: Int
        public var tags: [String] = []
    }

    public let database: StorageDatabase
    public let hot: HotTier
    /// `storage.max_bytes`, the bound eviction keeps the file under (``limit(toBytes:)`` changes it).
    public var maxBytes: Int { writer.maxBytes }
    let reader: CacheReader
    let writer: CacheWriter

    /// Above this many matches a pattern invalidation answers once the rows are unreachable
    /// and the writer deletes them in slices.
    static var inlineDeleteLimit: Int { CacheWriter.inlineDeleteLimit }

    /// Whether the store's user keeps attachments with its hot entries (``attach(_:to:)``): the
    /// daemon does (a hit's encoded head); a store without them answers hits without.
    public let keepsAttachments: Bool

    /// `keepsAttachments`: the user attaches bytes to hot entries (and the tier counts what each
    /// entry's allocations take too); `clock` is the time entries are stored and judged by.
    public convenience init(database: StorageDatabase, maxBytes: Int, memoryBytes: Int, logger: Logger,
                            keepsAttachments: Bool = false, clock: WallClock = .system) throws {
        try self.init(database: database, maxBytes: maxBytes, memoryBytes: memoryBytes, logger: logger, keepsAttachments: keepsAttachments,
                      clock: clock, groupCommitDelay: CacheWriter.defaultGroupCommitDelay)
    }

    /// - Parameter groupCommitDelay: how long a few queued puts wait for more (tests make it long).
    init(database: StorageDatabase, maxBytes: Int, memoryBytes: Int, logger: Logger,
         keepsAttachments: Bool, clock: WallClock, groupCommitDelay: Duration) throws {
        self.database = database
        self.keepsAttachments = keepsAttachments
        // The daemon's tier (it keeps attachments) counts what each entry's allocations take too.
        hot = HotTier(capacityBytes: memoryBytes, entryOverhead: keepsAttachments ? HotTier.allocationOverhead : 0)
        // The rows are read by the writer as it starts, between its batches (``KeyIndex``):
        // start-up takes the same time with a million entries as with none.
        // Invalidations a stop cut short are read too: their rows are doomed before anything is
        // served, and their deletion goes on first (``InvalidationJournal``).
        let (ceiling, unfinished) = try database.pool.read { db in
            (try Int64.fetchOne(db, sql: "SELECT MAX(rowid) FROM cache_entry") ?? 0, try InvalidationJournal.pending(db))
        }
        let ledger = SharedLedger(RowLedger(index: KeyIndex(loadingUpTo: ceiling)))
        reader = CacheReader(database: database, hot: hot, ledger: ledger, accesses: AccessLog(), clock: clock,
                             logger: logger)
        writer = CacheWriter(reader: reader, maxBytes: maxBytes, groupCommitDelay: groupCommitDelay)
        writer.replayJournal(unfinished, ceiling: ceiling)
    }

    // MARK: Reads

    /// The hot-tier entry, without I/O. Callable on an event loop.
    public func hotLookup(_ key: HashedKey, now: Double) -> CacheEntry? {
        reader.hotLookup(key, now: now)
    }

    public func hotLookup(_ key: String) -> CacheEntry? {
        reader.hotLookup(HashedKey(key), now: reader.clock.now)
    }

    /// Keeps `attachment` with `entry` in the hot tier, if the tier still holds that entry
    /// (``HotTier/attach(_:to:)``); nothing when the store does not ``keepsAttachments``.
    public func attach(_ attachment: CacheEntry.Attachment, to entry: CacheEntry) {
        guard keepsAttachments else { return }
        hot.attach(attachment, to: entry)
    }

    /// Whether SQLite may hold a live row for `key` (the key index does not rule it out; while
    /// the index loads, any key may have one). Without I/O: with an empty hot tier, `false` is
    /// a miss known on the event loop.
    public func mayHaveRow(_ key: HashedKey) -> Bool {
        reader.ledger.mayHaveRow(key.hash)
    }

    /// Hot tier, then SQLite (promoting what it finds).
    /// - Parameter onSQLiteRead: called with the instant the read began when the entry was
    ///   looked for in SQLite (not in the hot tier): a traced request's span.
    nonisolated(nonsending) public func lookup(_ key: String, onSQLiteRead: (@Sendable (ContinuousClock.Instant) -> Void)? = nil) async -> CacheEntry? {
        await reader.lookup(key, onSQLiteRead: onSQLiteRead)
    }

    /// The clock entries are stored and judged by.
    public var clock: WallClock { reader.clock }

    /// The entries and bytes stored; while the writer still reads the rows present at start-up
    /// (``isIndexLoading``), those read so far.
    public var entryCount: Int { reader.ledger.totals.entries }
    public var byteCount: Int { reader.ledger.totals.bytes }
    /// Whether the writer still reads the rows present at start-up (about a second per million).
    public var isIndexLoading: Bool { reader.ledger.isLoading }

    /// Returns once the writer (``run()``) has read the rows present at start-up: at once when
    /// there were none, and when the writer stopped before it was done.
    public func indexLoaded() async {
        await writer.indexLoaded()
    }

    /// A page of entries ordered by key, after `cursor` (exclusive), once what is queued is committed.
    /// - Throws: ``KeyPatternError`` when the pattern exceeds a limit or ``patternScanLimit``.
    public func entries(pattern: KeyPattern?, limit: Int, cursor: String?) async throws -> (entries: [EntrySummary], next: String?) {
        await flush()
        return try await reader.entries(pattern: pattern, limit: limit, cursor: cursor, until: .now + Self.patternScanLimit)
    }

    /// How long one pattern scan (an invalidation or a page of entries) may take.
    public static let patternScanLimit = Duration.seconds(10)

    /// Ends every scan under way (pattern invalidations, listings) at once with
    /// ``KeyPatternError/cancelled`` and refuses new ones: the daemon's graceful shutdown
    /// waits for no scan.
    public func stopScans() {
        reader.scanStop.stop()
    }

    // MARK: Writes

    /// Puts the entry in the hot tier at once and queues it for SQLite.
    ///
    /// - Returns: whether the writer queue accepted the entry. It refuses while storage is
    ///   degraded (writes failing) or the queue is full; the entry then lives in the hot
    ///   tier only. An accepted entry is committed within one writer pass unless the disk
    ///   fails meanwhile: accepted means queued, not yet durable.
    /// - Parameter key: the entry's key hashed already, if the caller has it.
    @discardableResult
    public func store(_ entry: CacheEntry, key: HashedKey? = nil) -> Bool {
        reader.putHot(entry, key: key)
        return writer.queuePut(entry)
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
    /// - Throws: ``KeyPatternError`` for a pattern that is invalid, exceeds a limit on some key
    ///   or ``patternScanLimit``: nothing is removed then.
    public func invalidate(_ criteria: InvalidationCriteria) async throws -> Int {
        if case .soft(let inner) = criteria { return try await markStale(inner) }
        switch criteria.selection {
        case .keys(let source):
            return try await invalidate(matching: KeyPattern(source))
        case .tags(let tags):
            // What is queued first (it is older than this call), then the tag index.
            await flush()
            var matched = try await reader.rows(taggedWith: tags)
            matched.criteria = criteria
            return try await perform { .deleteMatched(matched, $0) }
        case .all, .rows:
            return try await perform { .invalidate(criteria, $0) }
        }
    }

    /// A soft purge: the selected entries are marked stale (fresh until now) instead of removed,
    /// then served only as their stale windows (or validators) allow; returns how many were
    /// fresh. The hot tier drops them, so a hit reads the marked row.
    public func markStale(_ criteria: InvalidationCriteria) async throws -> Int {
        if case .soft(let inner) = criteria { return try await markStale(inner) }
        var matched: CacheWriter.MatchedRows? = nil
        switch criteria.selection {
        case .keys(let source):
            let pattern = try KeyPattern(source)
            await flush()
            matched = try await rows(matching: pattern, within: Self.patternScanLimit)
        case .tags(let tags):
            await flush()
            matched = try await reader.rows(taggedWith: tags)
        case .all, .rows:
            break
        }
        matched?.criteria = criteria
        return try await perform { .markStale(matched, criteria, $0) }
    }

    /// Pattern invalidation, matched off the writer: what is queued is committed first (it is
    /// older than this call), then the keys are scanned in slices through the read pool and
    /// the hot tier, and the writer deletes the rows found. The writer, hits, `/health` and
    /// shutdown never wait for the scan; a scan that exceeds a limit removes nothing.
    public func invalidate(matching pattern: KeyPattern, within limit: Duration = patternScanLimit) async throws -> Int {
        await flush()
        var matched = try await rows(matching: pattern, within: limit)
        matched.criteria = .pattern(pattern.source)
        return try await perform { .deleteMatched(matched, $0) }
    }

    /// The rows whose key the pattern matches, and the hot tier's keys it matches (which the
    /// tier loses once the writer's batch ends), within `limit` together.
    private func rows(matching pattern: KeyPattern, within limit: Duration) async throws -> CacheWriter.MatchedRows {
        let (found, spent) = try await reader.rows(matching: pattern, within: limit)
        var matched = found
        // The hot tier's keys get what the scan left of the limit.
        matched.keys += try hot.keys(matching: pattern, until: .now + (limit - spent))
        return matched
    }

    /// Queues work that answers with a count of entries, and waits for the answer.
    private func perform(_ work: (CheckedContinuation<Int, any Error>) -> CacheWriter.Work) async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            writer.enqueue(work(continuation))
        }
    }

    /// Deletes entries past all their windows and entries whose version is not the current
    /// one for their endpoint (`versions`: endpoint name → version; endpoints not listed are
    /// gone from the config and their entries are deleted too).
    @discardableResult
    public func sweep(currentVersions: [String: Int]) async -> Int {
        await withCheckedContinuation { continuation in
            writer.enqueue(.sweep(currentVersions, continuation))
        }
    }

    /// A new `storage.max_bytes` (a reload): when the cache is above it, the writer evicts the
    /// least recently used entries down to it at its next pass, as it does when entries come in.
    public func limit(toBytes bytes: Int) {
        writer.limit(toBytes: bytes)
    }

    /// Returns once everything queued before the call is committed, and `droppingFromMemory`
    /// (keys) left the hot tier then.
    public func flush(droppingFromMemory keys: [String] = []) async {
        await withCheckedContinuation { continuation in
            writer.enqueue(.barrier(keys, continuation))
        }
    }

    /// The writer loop. Runs until ``finish()`` or cancellation, then commits what is queued.
    public func run() async {
        await writer.run()
    }

    /// Ends the writer loop after committing what is queued; eviction in progress stops
    /// after its current slice (it resumes at the next start).
    public func finish() {
        writer.finish()
    }
}
