import Synchronization

/// What the cache knows about its SQLite rows without reading them: which keys may have a
/// row, which rows are invalidated but not deleted yet, and the totals.
///
/// A value with no locks and no I/O: ``CacheWriter`` owns it (behind one lock, see
/// ``SharedKeyIndex``) and is its only writer; ``CacheReader`` only asks it questions. Each
/// mutating method keeps these invariants, which `KeyIndexTests` check without any timing:
/// - ``totals`` counts the *live* rows: present in SQLite and not doomed.
/// - A key whose hash is absent has no live row (a hash present may be stale: that costs one
///   read, never a wrong answer).
/// - A *doomed* row (invalidated, deleted later in slices by the writer) is never served or
///   listed, and is counted out of ``totals`` once. A doomed row stored again (*revived*)
///   counts again at once, but stays unservable until its release.
/// - A doom is released only when no read that began before the release was scheduled is still
///   running: such a read may hold a snapshot from before the delete (or the re-store)
///   committed. Reads register with ``beginRead()`` / ``endRead(_:)``.
struct KeyIndex: Sendable {
    struct Totals: Equatable, Sendable {
        var entries = 0
        var bytes = 0
    }

    /// A row as the index sees it.
    struct Row: Sendable {
        var rowid: Int64
        var hash: UInt64
        var size: Int
    }

    private struct Doom: Sendable {
        /// The invalidation that doomed the row: a release names it, so a later doom of the same
        /// row is never released by an earlier one's.
        var token: UInt64
        /// Stored again since: counted in ``totals``, not servable until released.
        var revived = false
    }

    private(set) var totals: Totals
    private var presence: Set<UInt64>
    private var doomed: [Int64: Doom] = [:]
    private var lastToken: UInt64 = 0
    /// Releases waiting in the current batch, scheduled when it commits.
    private var batchReleases: [(rowid: Int64, token: UInt64)] = []
    /// The doom map as it was before the current batch touched it (a rollback restores it).
    private var doomedBeforeBatch: [Int64: Doom]?
    private var epoch: UInt64 = 0
    /// Reads in flight, by the epoch they began in.
    private var readers: [UInt64: Int] = [:]
    /// Releases scheduled after a commit, each waiting for the reads older than its epoch.
    private var scheduled: [(epoch: UInt64, rows: [(rowid: Int64, token: UInt64)])] = []

    init(totals: Totals = Totals(), hashes: Set<UInt64> = []) {
        self.totals = totals
        presence = hashes
    }

    // MARK: - Questions (readers)

    /// Whether the key may have a live row: `false` means a lookup can skip SQLite.
    func mayHaveRow(_ hash: UInt64) -> Bool { presence.contains(hash) }

    /// Whether the row must not be served or listed.
    func isDoomed(_ rowid: Int64) -> Bool { !doomed.isEmpty && doomed[rowid] != nil }

    var hasDoomedRows: Bool { !doomed.isEmpty }

    /// Registers a read of SQLite about to start; pass the result to ``endRead(_:)``.
    mutating func beginRead() -> UInt64 {
        readers[epoch, default: 0] += 1
        return epoch
    }

    mutating func endRead(_ began: UInt64) {
        if let n = readers[began], n > 1 { readers[began] = n - 1 } else { readers[began] = nil }
        releaseDue()
    }

    // MARK: - Changes (the writer, inside its transaction)

    /// Starts a batch: its changes are committed or rolled back together with SQLite's.
    mutating func beginBatch() {
        batchReleases.removeAll(keepingCapacity: true)
        doomedBeforeBatch = nil
    }

    /// A put of `hash` is about to look for the key's row: whether a row may exist (a known key,
    /// or a doomed row whose key the index no longer knows). The key is known from now on.
    mutating func putting(_ hash: UInt64) -> Bool {
        let known = !presence.insert(hash).inserted
        return known || !doomed.isEmpty
    }

    /// A put stored `size` bytes in row `rowid`, replacing `old` (the key's row before, if any).
    mutating func stored(rowid: Int64, size: Int, replacing old: Row?) {
        if let old {
            if !doomed.isEmpty, let doom = doomed[old.rowid], !doom.revived {
                totals.entries += 1  // counted out by its invalidation
                revive(old.rowid, doom)
            } else {
                totals.bytes -= old.size
            }
        } else {
            totals.entries += 1
            // SQLite may give a new row the rowid of a deleted one still waiting for release.
            if !doomed.isEmpty, let doom = doomed[rowid], !doom.revived { revive(rowid, doom) }
        }
        totals.bytes += size
    }

    /// A row was deleted (sweep, eviction, invalidation by endpoint or user).
    mutating func deleted(_ row: Row) {
        if !doomed.isEmpty, let doom = doomed[row.rowid] {
            batchReleases.append((row.rowid, doom.token))
            guard doom.revived else { return }  // already counted out
        }
        totals.entries -= 1
        totals.bytes -= row.size
        presence.remove(row.hash)
    }

    /// Every row was deleted.
    mutating func deletedAll() {
        totals = Totals()
        presence.removeAll()
        for (rowid, doom) in doomed { batchReleases.append((rowid, doom.token)) }
    }

    /// Rows invalidated now and deleted later: unservable and counted out at once. Returns the
    /// token that ``deletedDoomed(_:token:)`` names.
    mutating func doom(_ rows: [Row]) -> UInt64 {
        journalDoomed()
        lastToken += 1
        for row in rows {
            if let doom = doomed[row.rowid], !doom.revived { continue }
            totals.entries -= 1
            totals.bytes -= row.size
            presence.remove(row.hash)
            doomed[row.rowid] = Doom(token: lastToken)
        }
        return lastToken
    }

    /// The rows of a doom were deleted (those stored again since were kept).
    mutating func deletedDoomed(_ rowids: [Int64], token: UInt64) {
        for rowid in rowids { batchReleases.append((rowid, token)) }
    }

    /// The batch committed: its releases wait for the reads that began before now.
    mutating func commitBatch() {
        doomedBeforeBatch = nil
        guard !batchReleases.isEmpty else { return }
        epoch += 1
        scheduled.append((epoch, batchReleases))
        batchReleases.removeAll(keepingCapacity: true)
        releaseDue()
    }

    /// The batch rolled back: dooms are as before it; `recounted` holds the rows SQLite keeps.
    mutating func rollBackBatch(recounted rows: [Row]) {
        if let before = doomedBeforeBatch { doomed = before }
        doomedBeforeBatch = nil
        batchReleases.removeAll(keepingCapacity: true)
        presence.removeAll(keepingCapacity: true)
        totals = Totals()
        for row in rows where doomed[row.rowid].map({ $0.revived }) ?? true {
            presence.insert(row.hash)
            totals.entries += 1
            totals.bytes += row.size
        }
    }

    // MARK: - Private

    private mutating func journalDoomed() {
        if doomedBeforeBatch == nil { doomedBeforeBatch = doomed }
    }

    private mutating func revive(_ rowid: Int64, _ doom: Doom) {
        journalDoomed()
        doomed[rowid] = Doom(token: doom.token, revived: true)
        batchReleases.append((rowid, doom.token))
    }

    private mutating func releaseDue() {
        guard !scheduled.isEmpty else { return }
        let oldestRead = readers.keys.min() ?? UInt64.max
        while let first = scheduled.first, first.epoch <= oldestRead {
            scheduled.removeFirst()
            for (rowid, token) in first.rows where doomed[rowid]?.token == token {
                doomed[rowid] = nil
            }
        }
    }
}

/// The writer's ``KeyIndex`` behind one lock, shared with the readers.
///
/// - Important: only ``CacheWriter`` calls ``update(_:)``; readers use the questions.
final class SharedKeyIndex: Sendable {
    private let index: Mutex<KeyIndex>

    init(_ index: KeyIndex) {
        self.index = Mutex(index)
    }

    var totals: KeyIndex.Totals { index.withLock { $0.totals } }

    /// Whether SQLite may hold a live row for the key; if so, registers a read (end it with
    /// ``endRead(_:rowid:)``).
    func beginReadIfPresent(_ hash: UInt64) -> UInt64? {
        index.withLock { $0.mayHaveRow(hash) ? $0.beginRead() : nil }
    }

    func beginRead() -> UInt64 { index.withLock { $0.beginRead() } }

    /// Ends a read; whether `rowid` (the row it found, if any) may be served.
    @discardableResult
    func endRead(_ began: UInt64, rowid: Int64? = nil) -> Bool {
        index.withLock { index in
            defer { index.endRead(began) }
            return rowid.map { !index.isDoomed($0) } ?? true
        }
    }

    /// Rows not to list (checked inside a listing's read).
    func isDoomed(_ rowid: Int64) -> Bool { index.withLock { $0.isDoomed(rowid) } }

    func update<R>(_ body: (inout KeyIndex) throws -> R) rethrows -> R {
        try index.withLock { try body(&$0) }
    }
}
