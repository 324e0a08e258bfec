import ConciergeCore
import Dispatch
import Foundation
import GRDB
import GRDBSQLite
import Logging
import Synchronization

/// The cache's only writer of SQLite, of the ``RowLedger`` and of the hot tier's removals:
/// everything that changes stored entries is a ``Work`` item, queued by callers and applied by
/// ``run()`` in the order asked, in one transaction per batch (group commit). Each row change
/// is told to the ledger, by its event, inside that transaction; the entries an invalidation
/// selects leave the hot tier once its batch ends, before its caller is answered.
///
/// Its work kinds: puts, invalidations (by the rows' facts, by rows matched off the writer, soft
/// purges), sweeps, the slices of a large invalidation's delete, and barriers. Eviction
/// (``evict()``) runs between batches. How an invalidation finds its rows is its criteria's
/// ``InvalidationCriteria/Selection``.
final class CacheWriter: Sendable {
    enum Work: Sendable {
        case put(CacheEntry)
        case invalidate(InvalidationCriteria, CheckedContinuation<Int, any Error>)
        /// The rows a pattern matched, found by a scan off the writer (``CacheReader/rows(matching:until:)``).
        case deleteMatched(MatchedRows, CheckedContinuation<Int, any Error>)
        case sweep([String: Int], CheckedContinuation<Int, Never>)
        /// One slice of deleting rows a large invalidation doomed; the rest is queued after it.
        case deleteDoomed(DoomedRows)
        /// A soft purge: the rows a scan found (pattern, tags) or the criteria select, marked
        /// stale (fresh until now); the count of entries that were fresh.
        case markStale(MatchedRows?, InvalidationCriteria, CheckedContinuation<Int, any Error>)
        /// Answers once what was queued before it is committed; the keys leave the hot tier then.
        case barrier([String], CheckedContinuation<Void, Never>)
    }

    /// The read side, whose database, hot tier, ledger, access log and clock the writer shares.
    let reader: CacheReader
    /// `storage.max_bytes`: set at start and by a reload (``limit(toBytes:)``), read by eviction.
    private let maxBytesSetting: Atomic<Int>
    var maxBytes: Int { maxBytesSetting.load(ordering: .relaxed) }
    /// The queued work and the writer thread's wait, under one lock.
    let queue = Mutex(Queue())
    /// Ends a wait of the writer thread: signalled once per wait, by whoever ends it
    /// (``Queue/waiting`` says whether one is under way).
    private let signal = DispatchSemaphore(value: 0)
    private let committedSinceTrim = Mutex(0)
    /// Work that the current batch asks for once it commits (dropped if it rolls back).
    private let followUps = Mutex<[Work]>([])
    /// When ``saveAccessTimes(in:now:all:)`` saves next.
    let nextAccessSave = Mutex(0.0)
    /// Callers of ``indexLoaded()`` while the index loads; `nil` once it is loaded (or the writer stopped).
    let loadWaiters: Mutex<[CheckedContinuation<Void, Never>]?>
    /// ``batchStatements(_:)``, once prepared.
    let preparedStatements = StatementSlot()
    /// The rows eviction chose, taken slice by slice (``EvictionChoice``); the writer's thread only.
    let evictionChoice = Mutex(EvictionChoice())
    /// The keys with tag rows while the index loads (``TaggedKeyFilter``); the writer's thread only.
    let loadingTags = Mutex<TaggedKeyFilter?>(nil)

    struct Queue {
        var work: [Work] = []
        var waiting = Waiting.no
        var stopping = false
        /// An eviction pass that ran out of time asks for another pass with nothing queued.
        var passAgain = false
    }

    enum Waiting {
        case no
        /// For any work.
        case idle
        /// For work that must not wait for the group commit (anything but puts, or a full batch of puts).
        case gathering
    }

    init(reader: CacheReader, maxBytes: Int, groupCommitDelay: Duration = CacheWriter.defaultGroupCommitDelay) {
        (self.reader, self.groupCommitDelay) = (reader, groupCommitDelay)
        maxBytesSetting = Atomic(maxBytes)
        loadWaiters = Mutex(reader.ledger.isLoading ? [] : nil)
    }

    var database: StorageDatabase { reader.database }
    var ledger: SharedLedger { reader.ledger }
    /// The ledger's ``RowFacts``, for tests.
    var facts: LedgerFacts { LedgerFacts(ledger: ledger) }
    var accesses: AccessLog { reader.accesses }
    var clock: WallClock { reader.clock }
    var logger: Logger { reader.logger }

    /// At most this many entries wait for the writer; more are kept in the hot tier only.
    static let maxQueuedPuts = 20_000
    /// Above this many matches a pattern invalidation answers once the rows are unreachable
    /// (doomed) and deletes them in slices, between other work.
    static let inlineDeleteLimit = 5000
    /// Group commit: with only a few puts queued the writer waits this long for more, so one
    /// transaction carries many entries. Each commit appends every page it touched to the WAL
    /// (about twelve for a transaction of three entries: the table's, each index's, the
    /// pointer map and the header): a run of small transactions writes several times the
    /// pages of the same entries in one, and the page checksums and index work follow. Entries
    /// are served from the hot tier meanwhile; any other work, or ``groupCommitSize`` puts,
    /// ends the wait at once. What a crash can lose is this window's puts, entries of a
    /// cache, fetched again (a clean stop commits them). With one miss every ~2.5 ms
    /// (sequential requests under callgrind) 5 ms took 2.8 entries per transaction, 20 ms
    /// 4.6–5.4 and 100 ms about 43, where a commit's WAL pages cost a tenth of an entry's
    /// writing instead of a third (each page is checksummed as it is appended); at thousands
    /// of misses a second the batches fill long before any of these. 100 ms was tried and
    /// left: under a moderate load a `kill -9` then loses five times the window's entries
    /// (6.4% of those acknowledged as stored in the crash test, against its 5% bound).
    static let defaultGroupCommitDelay = Duration.milliseconds(20)
    /// ``defaultGroupCommitDelay`` unless a test sets another.
    let groupCommitDelay: Duration
    static let groupCommitSize = 256
    /// This many writes, once the queue is empty, leave freed memory worth giving back.
    static let trimAfterOperations = 1000

    // MARK: - Queue

    /// Queues a put unless storage is degraded or the queue is full.
    func queuePut(_ entry: CacheEntry) -> Bool {
        guard !database.health.isDegraded else { return false }
        let (accepted, wake) = queue.withLock { queue -> (Bool, Bool) in
            guard queue.work.count < Self.maxQueuedPuts else { return (false, false) }
            queue.work.append(.put(entry))
            switch queue.waiting {
            case .idle: break
            case .gathering where queue.work.count >= Self.groupCommitSize: break
            case .gathering, .no: return (true, false)
            }
            queue.waiting = .no
            return (true, true)
        }
        if wake { signal.signal() }
        return accepted
    }

    func enqueue(_ work: Work) {
        let wake = queue.withLock { queue -> Bool in
            queue.work.append(work)
            return Self.endWait(&queue)
        }
        if wake { signal.signal() }
    }

    /// A new `storage.max_bytes` (a reload): the writer's next pass evicts down to it.
    func limit(toBytes bytes: Int) {
        maxBytesSetting.store(bytes, ordering: .relaxed)
        enqueueWake()
    }

    /// Asks for another pass with nothing queued (an eviction pass that ran out of time goes on).
    func enqueueWake() {
        let wake = queue.withLock { queue -> Bool in
            queue.passAgain = true
            return Self.endWait(&queue)
        }
        if wake { signal.signal() }
    }

    /// Whether the caller must signal: a wait was under way, and it ends it.
    private static func endWait(_ queue: inout Queue) -> Bool {
        guard queue.waiting != .no else { return false }
        queue.waiting = .no
        return true
    }

    var isStopping: Bool { queue.withLock { $0.stopping } }

    /// Work items queued and not yet taken (for tests).
    var queuedWork: Int { queue.withLock { $0.work.count } }

    /// Queues `work` once the running batch commits.
    func followUp(_ work: Work) {
        followUps.withLock { $0.append(work) }
    }

    // MARK: - Loop

    /// Runs the writer on a thread of its own until ``finish()`` (or cancellation), then
    /// commits what is queued, large deletes included, so no invalidated row outlives the
    /// writer. A thread, not a task: every batch is SQLite work that blocks anyway, and the
    /// group commit's wait is a timed wait on that thread instead of a sleeping task, so a
    /// batch costs no executor hops.
    func run() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                let thread = Thread { [self] in
                    Self.nameCurrentThread("cache-writer")
                    loop()
                    done.resume()
                }
                thread.start()
            }
        } onCancel: {
            finish()
        }
    }

    /// The name `ps`, `top` and /proc show: Foundation gives it to the kernel when the thread
    /// names itself (a name set before `start()` is not passed on, and the new thread keeps its
    /// creator's, a dispatch worker's).
    private static func nameCurrentThread(_ name: String) {
        Thread.current.name = name
    }

    func finish() {
        let wake = queue.withLock { queue -> Bool in
            queue.stopping = true
            return Self.endWait(&queue)
        }
        if wake { signal.signal() }
    }

    private func loop() {
        loadIndex()
        while waitForWork() {
            gatherPuts()
            drain()
        }
        drain()
        saveReadsAtStop()
        // Finalized with the writer, on its connection: SQLite refuses to close a connection
        // whose statements are still prepared.
        try? database.pool.writeWithoutTransaction { _ in preparedStatements.statements = nil }
    }

    /// Waits until work is queued or another pass was asked for; `false` once the writer stops.
    private func waitForWork() -> Bool {
        let mustWait = queue.withLock { queue -> Bool? in
            if queue.stopping { return nil }
            if !queue.work.isEmpty || queue.passAgain {
                queue.passAgain = false
                return false
            }
            queue.waiting = .idle
            return true
        }
        guard let mustWait else { return false }
        if mustWait { signal.wait() }
        return !isStopping
    }

    /// Waits up to ``groupCommitDelay`` when the queue holds fewer than ``groupCommitSize``
    /// puts and nothing else: invalidations, sweeps and flushes end the wait, and a stopping
    /// writer does not wait.
    private func gatherPuts() {
        let deadline = DispatchTime.now() + groupCommitDelay.inSeconds
        let gathering = queue.withLock { queue -> Bool in
            guard !queue.stopping, !queue.work.isEmpty, queue.work.count < Self.groupCommitSize,
                  queue.work.allSatisfy({ if case .put = $0 { true } else { false } }) else { return false }
            queue.waiting = .gathering
            return true
        }
        guard gathering, signal.wait(timeout: deadline) == .timedOut else { return }
        let signalled = queue.withLock { queue -> Bool in
            guard queue.waiting == .no else {
                queue.waiting = .no
                return false
            }
            return true  // ended as it timed out: its signal is taken here
        }
        if signalled { signal.wait() }
    }

    /// Commits what is queued, batch after batch. Puts that arrived while a batch committed
    /// are gathered like the first ones, so a steady stream of misses goes in transactions of
    /// ``groupCommitDelay``'s worth, not in one per commit's duration.
    func drain() {
        var committed = false
        while true {
            if committed { gatherPuts() }
            let batch = queue.withLock { queue -> [Work] in
                defer { queue.work.removeAll(keepingCapacity: true) }
                return queue.work
            }
            if batch.isEmpty {
                // An eviction pass that ran out of time woke the writer to go on.
                if !isStopping, needsEviction { evict() }
                let written = committedSinceTrim.withLock { n -> Int in
                    defer { if n >= Self.trimAfterOperations { n = 0 } }
                    return n
                }
                if written >= Self.trimAfterOperations { MemoryTrim.returnFreedMemory() }
                return
            }
            committedSinceTrim.withLock { $0 += batch.count }
            guard commit(batch) else {
                // Storage fails (disk full): what must be retried waits, without a wake-up,
                // for the next batch instead of spinning on the failure.
                let retry = batch.filter { if case .deleteDoomed = $0 { true } else { false } }
                queue.withLock { $0.work.insert(contentsOf: retry, at: 0) }
                return
            }
            committed = true
        }
    }

    // MARK: - One batch

    /// Whether the batch committed.
    private func commit(_ batch: [Work]) -> Bool {
        let touches = accesses.take()
        let now = clock.now
        var results: [Result<Int, any Error>] = []
        var wrote = false
        do {
            (results, wrote) = try database.pool.writeWithoutTransaction { db -> ([Result<Int, any Error>], Bool) in
                let statements = try self.batchStatements(db)
                return try Self.inTransaction(db, statements, durable: batch.contains(where: \.acknowledgesInvalidation)) {
                    let changesBefore = db.totalChangesCount
                    self.ledger.update { $0.beginBatch() }
                    let upsert = statements.upsert
                    let results = try batch.map { work in
                        Result<Int, any Error>.success(try self.apply(work, in: db, now: now, upsert: upsert))
                    }
                    try self.recordAccesses(touches, in: db)
                    try self.saveAccessTimes(in: db, now: now)
                    return (results, db.totalChangesCount != changesBefore)
                }
            }
            ledger.update { $0.commitBatch() }
            for work in followUps.withLock({ list in defer { list.removeAll() }; return list }) { enqueue(work) }
        } catch {
            followUps.withLock { $0.removeAll() }
            // Rate-limited there: a full disk fails every batch.
            database.health.recordFailure("cache", error)
            results = batch.map { _ in .failure(error) }
            rollBackIndex()
        }
        // A transaction that changed nothing proves nothing about the disk.
        if wrote { database.health.recordSuccess() }
        if !isStopping, needsEviction { evict() }
        finishAfterCommit(batch, results, now: now)
        return results.allSatisfy { if case .success = $0 { true } else { false } }
    }

    /// Answers the callers of a committed (or failed) batch and queues what follows from it.
    /// What the batch's invalidations select leaves the hot tier first (a reader may have
    /// promoted a row since the invalidation was asked for), so a caller answered finds none of it.
    private func finishAfterCommit(_ batch: [Work], _ results: [Result<Int, any Error>], now: Double) {
        var removed: [InvalidationCriteria] = []
        var removedKeys: [String] = []
        for (work, result) in zip(batch, results) {
            switch work {
            case .put: break
            case .invalidate(let criteria, _):
                removed.append(criteria)
            case .deleteMatched(let matched, _), .markStale(let matched?, _, _):
                removedKeys += matched.keys
                if let criteria = matched.criteria, criteria.selectsByEntry { removed.append(criteria) }
            case .markStale(nil, let criteria, _):
                removed.append(criteria)
            case .barrier(let keys, _):
                removedKeys += keys
            case .sweep(let versions, _):
                reader.hot.removeAll { entry in entry.usableUntil <= now || versions[entry.endpoint].map { $0 != entry.version } ?? true }
            case .deleteDoomed(var rows):
                guard case .success = result else { break }  // retried (``drain()``)
                rows.next += DoomedRows.sliceRows
                if rows.next < rows.rowids.count { enqueue(.deleteDoomed(rows)) }
            }
        }
        for criteria in removed { reader.hot.remove(where: criteria) }
        reader.hot.remove(keys: removedKeys)
        for (work, result) in zip(batch, results) {
            switch work {
            case .put, .deleteDoomed: break
            case .invalidate(_, let continuation), .deleteMatched(_, let continuation), .markStale(_, _, let continuation):
                continuation.resume(with: result)
            case .sweep(_, let continuation):
                continuation.resume(returning: (try? result.get()) ?? 0)
            case .barrier(_, let continuation):
                continuation.resume()
            }
        }
    }

    /// One work item inside the batch's transaction; the count of entries it removed.
    private func apply(_ work: Work, in db: Database, now: Double, upsert: Statement) throws -> Int {
        switch work {
        case .put(let entry):
            try put(entry, in: db, now: now, upsert: upsert)
            return 0
        case .invalidate(let criteria, _):
            return try delete(criteria, in: db, now: now)
        case .deleteMatched(let matched, _):
            return try deleteMatched(matched, in: db, now: now)
        case .sweep(let versions, _):
            return try sweep(db, versions: versions, now: now)
        case .deleteDoomed(let rows):
            try deleteDoomedSlice(rows, in: db)
            return 0
        case .markStale(let matched, let criteria, _):
            return try markStale(matched?.rows, criteria, in: db, now: now)
        case .barrier:
            return 0
        }
    }

    /// After a failed transaction: the ledger as SQLite still has the rows.
    func rollBackIndex() {
        do {
            let (rows, rowFacts) = try database.pool.read { db in try Self.allRows(db) }
            ledger.update { $0.rolledBack(recounted: rows, facts: rowFacts) }
            if !ledger.isLoading { mergeSavedAccessTimes() }
        } catch {
            logger.error("cache index recount failed", metadata: ["error": "\(error)"])
            ledger.update { $0.rolledBack(recounted: [], facts: nil) }
        }
    }

    /// Reads the row facts again from SQLite when a rolled-back batch left them unsure (before
    /// a sweep, an eviction or an invalidation trusts them).
    func rebuildFactsIfNeeded(_ db: Database) throws {
        guard ledger.scanFacts({ $0.needsRebuild }) else { return }
        let (_, rowFacts) = try Self.allRows(db)
        ledger.update { $0.rebuiltFacts(rowFacts) }
        if !ledger.isLoading { try mergeSavedAccessTimes(db) }
    }

    /// Every row's id, key hash and size, and its facts.
    static func allRows(_ db: Database) throws -> ([KeyIndex.Row], [RowFacts.Row]) {
        var rows: [KeyIndex.Row] = []
        var rowFacts: [RowFacts.Row] = []
        try forEachRow(db) { row, time in
            rows.append(row)
            rowFacts.append(time)
        }
        return (rows, rowFacts)
    }
}
