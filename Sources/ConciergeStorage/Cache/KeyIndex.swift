/// What the cache knows about its SQLite rows without reading them: which keys may have a
/// row, which rows are invalidated but not deleted yet, and the totals.
///
/// A value with no locks and no I/O, part of the writer's ``RowLedger`` (behind one lock, see
/// ``SharedLedger``): only the ledger's events change it; ``CacheReader`` only asks it questions
/// (and registers its reads). Each
/// mutating method keeps these invariants, which `KeyIndexTests` check without any timing:
/// - ``totals`` counts the *live* rows: present in SQLite and not doomed.
/// - A key whose hash is absent has no live row (a hash present may be stale: that costs one
///   read, never a wrong answer). While the index is *loading* (below) every key may have a row.
/// - A *doomed* row (invalidated, deleted later in slices by the writer) is never served or
///   listed, and is counted out of ``totals``' entries once, at once. Its bytes go at once too
///   when its size was given (``doom(_:sized:)``); a row doomed without its size (the writer
///   dooms matched rows without reading them) keeps its bytes in ``totals`` until the row is
///   deleted (a doomed slice, the sweep, eviction: each reads the size as it deletes), while
///   ``bytesIncludeDoomedRows`` says so. A doomed row stored again (*revived*) counts again at
///   once (its old bytes swapped for its new), but stays unservable until its release.
/// - A new row on a rowid at or below the largest a row ever had (SQLite reuses the top
///   rowids once their rows went) is counted in ``rowidMark``: while it has not changed since a
///   reader took it, a rowid the reader found still holds the same key, if it holds a row.
/// - A doom is released only when no read that began before the release was scheduled is still
///   running: such a read may hold a snapshot from before the delete (or the re-store)
///   committed. Reads register with ``beginRead()`` / ``endRead(_:)``.
///
/// Start-up does not read the rows: the index begins *loading* (``init(loadingUpTo:)``) and the
/// writer reads the rows in slices of rowids between its batches (``loaded(_:through:)``), so
/// the daemon serves at once whatever the size of the cache. Meanwhile a change to a row the
/// loader has not reached yet leaves ``totals`` alone (the loader counts the row as it finds it
/// then), and every lookup may read SQLite.
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
        /// Doomed without its size, still in SQLite: its bytes are still in ``totals``.
        var holdsBytes = false
    }

    /// The rowids the loader has still to read: `through` (exclusive) up to `ceiling`
    /// (inclusive), the largest rowid at start-up; rows stored since start above it are
    /// counted as they are stored.
    struct Loading: Equatable, Sendable {
        var through: Int64
        let ceiling: Int64
    }

    private(set) var totals: Totals
    private var presence: KeyHashSet
    /// `nil` once every row present at start-up was read.
    private(set) var loading: Loading?
    private var doomed: [Int64: Doom] = [:]
    /// The dooms that hold their row's bytes (``Doom/holdsBytes``).
    private var bytesHeld = 0
    private var lastToken: UInt64 = 0
    /// The largest rowid a row had (the loader's ceiling, or a new row's).
    private var highestRowid: Int64 = 0
    /// New rows stored on a rowid at or below ``highestRowid``.
    private var reusedRowids: UInt64 = 0
    /// ``reusedRowids`` when the current batch began; `nil` between batches.
    private var reusedBeforeBatch: UInt64?
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
        presence = KeyHashSet(hashes)
    }

    /// An index that knows nothing yet of the rows with a rowid up to `ceiling` (the largest in
    /// the table; 0 for an empty table, which needs no loading).
    init(loadingUpTo ceiling: Int64) {
        totals = Totals()
        presence = KeyHashSet()
        loading = ceiling > 0 ? Loading(through: 0, ceiling: ceiling) : nil
        highestRowid = ceiling
    }

    var isLoading: Bool { loading != nil }

    // MARK: - Questions (readers)

    /// Whether the key may have a live row: `false` means a lookup can skip SQLite.
    func mayHaveRow(_ hash: UInt64) -> Bool { loading != nil || presence.contains(hash) }

    /// Whether the row must not be served or listed.
    func isDoomed(_ rowid: Int64) -> Bool { !doomed.isEmpty && doomed[rowid] != nil }

    var hasDoomedRows: Bool { !doomed.isEmpty }

    /// Whether ``totals``' bytes still hold those of rows doomed without their size (the
    /// writer's slices count them out as they delete them): the bytes of the live rows are
    /// fewer, by an amount not known until then.
    var bytesIncludeDoomedRows: Bool { bytesHeld > 0 }

    /// Taken by a reader before it reads which rows match an invalidation (``CacheWriter/MatchedRows``):
    /// while ``noRowidReused(since:)`` holds, a rowid it found still holds the key it found there,
    /// unless its row was deleted. A batch under way counts as not committed yet: its new rows
    /// count as after the mark (the reader's snapshot may be from before it).
    var rowidMark: UInt64 { reusedBeforeBatch ?? reusedRowids }

    /// Whether no new row took a rowid a row had before, since `mark` (``rowidMark``).
    func noRowidReused(since mark: UInt64) -> Bool { reusedRowids == mark }

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
        reusedBeforeBatch = reusedRowids
    }

    /// A put of `hash` is about to look for the key's row: whether a row may exist (a known key,
    /// or a doomed row whose key the index no longer knows). The key is known from now on.
    mutating func putting(_ hash: UInt64) -> Bool {
        let known = !presence.insert(hash)
        return known || !doomed.isEmpty || loading != nil
    }

    /// A put stored `size` bytes in row `rowid`, replacing `old` (the key's row before, if any).
    mutating func stored(rowid: Int64, size: Int, replacing old: Row?) {
        let counts = isCounted(old?.rowid ?? rowid)
        if let old {
            if !doomed.isEmpty, let doom = doomed[old.rowid], !doom.revived {
                if counts {
                    totals.entries += 1  // counted out by its invalidation
                    if doom.holdsBytes { totals.bytes -= old.size }
                }
                revive(old.rowid, doom)
            } else if counts {
                totals.bytes -= old.size
            }
        } else {
            if rowid <= highestRowid { reusedRowids += 1 } else { highestRowid = rowid }
            if counts { totals.entries += 1 }
            // SQLite may give a new row the rowid of a deleted one still waiting for release.
            if !doomed.isEmpty, let doom = doomed[rowid], !doom.revived { revive(rowid, doom) }
        }
        if counts { totals.bytes += size }
    }

    /// A row was deleted (sweep, eviction, an invalidation, a doomed slice), with its size.
    /// Returns whether it was a live entry (not one an invalidation already counted out).
    @discardableResult
    mutating func deleted(_ row: Row) -> Bool {
        if !doomed.isEmpty, let doom = doomed[row.rowid] {
            batchReleases.append((row.rowid, doom.token))
            guard doom.revived else {
                // Counted out by its invalidation, but for the bytes of a doom without its size.
                if doom.holdsBytes {
                    journalDoomed()
                    doomed[row.rowid]!.holdsBytes = false
                    bytesHeld -= 1
                    totals.bytes -= row.size
                }
                return false
            }
        }
        if isCounted(row.rowid) {
            totals.entries -= 1
            totals.bytes -= row.size
        }
        presence.remove(row.hash)
        return true
    }

    /// Rows counted out by an invalidation and not stored again, still in SQLite until the
    /// writer's slices delete them.
    var unservableRows: Int { doomed.values.count { !$0.revived } }

    /// Every row was deleted.
    mutating func deletedAll() {
        totals = Totals()
        presence.removeAll()
        loading = nil
        if bytesHeld > 0 {
            journalDoomed()
            for (rowid, doom) in doomed where doom.holdsBytes { doomed[rowid]!.holdsBytes = false }
            bytesHeld = 0
        }
        for (rowid, doom) in doomed { batchReleases.append((rowid, doom.token)) }
    }

    // MARK: - Loading (the writer, between batches)

    /// The next rowids to read, at most `count` of them: `(after, upTo)`; `nil` once loaded.
    func nextLoadSlice(_ count: Int64) -> (after: Int64, upTo: Int64)? {
        loading.map { ($0.through, min($0.ceiling, $0.through + count)) }
    }

    /// The rows SQLite holds with a rowid in the slice ``nextLoadSlice(_:)`` gave, read between
    /// batches (so after every change this index was told of): the live ones count.
    mutating func loaded(_ rows: [Row], through upTo: Int64) {
        guard var loading else { return }
        for row in rows where row.rowid > loading.through && row.rowid <= upTo {
            if !doomed.isEmpty, let doom = doomed[row.rowid], !doom.revived { continue }
            presence.insert(row.hash)
            totals.entries += 1
            totals.bytes += row.size
        }
        loading.through = upTo
        self.loading = loading.through >= loading.ceiling ? nil : loading
    }

    /// Rows invalidated now and deleted later: unservable and counted out at once. Returns the
    /// token that ``deletedDoomed(_:token:)`` names. Rows not `sized` (their size is not known)
    /// keep their bytes in ``totals`` until they are deleted (``deleted(_:)``, which the
    /// writer calls with each row its slices delete, size and all).
    mutating func doom(_ rows: [Row], sized: Bool = true) -> UInt64 {
        journalDoomed()
        lastToken += 1
        for row in rows {
            if let doom = doomed[row.rowid], !doom.revived { continue }
            let counted = isCounted(row.rowid)
            if counted {
                totals.entries -= 1
                if sized { totals.bytes -= row.size }
            }
            presence.remove(row.hash)
            // A revived row held no bytes (``revive(_:_:)``).
            doomed[row.rowid] = Doom(token: lastToken, holdsBytes: counted && !sized)
            if counted && !sized { bytesHeld += 1 }
        }
        return lastToken
    }

    /// A doomed row that the slice of the doom `token` kept, stored again after the invalidation,
    /// which the index was not told of (a restart replaying the journal dooms it again): live
    /// again. Not a row a later invalidation doomed since (another token): that one's slice
    /// decides.
    mutating func keptDoomed(_ row: Row, token: UInt64) {
        guard !doomed.isEmpty, let doom = doomed[row.rowid], !doom.revived, doom.token == token else { return }
        // Counted now if the loader passed it (it left it out); else the loader counts it. A
        // doom without its size kept the row's bytes (the index was told of no change since).
        if isCounted(row.rowid) {
            totals.entries += 1
            if !doom.holdsBytes { totals.bytes += row.size }
        }
        presence.insert(row.hash)
        revive(row.rowid, doom)
    }

    /// The rows of a doom were deleted (those stored again since were kept), each also told
    /// with ``deleted(_:)`` when its doom was without its size; releases the doom's rows.
    mutating func deletedDoomed(_ rowids: [Int64], token: UInt64) {
        for rowid in rowids { batchReleases.append((rowid, token)) }
    }

    /// The batch committed: its releases wait for the reads that began before now.
    mutating func commitBatch() {
        doomedBeforeBatch = nil
        reusedBeforeBatch = nil
        guard !batchReleases.isEmpty else { return }
        epoch += 1
        scheduled.append((epoch, batchReleases))
        batchReleases.removeAll(keepingCapacity: true)
        releaseDue()
    }

    /// The batch rolled back: dooms are as before it; `recounted` holds the rows SQLite keeps.
    mutating func rollBackBatch(recounted rows: [Row]) {
        if let before = doomedBeforeBatch {
            doomed = before
            bytesHeld = doomed.values.count { $0.holdsBytes }
        }
        doomedBeforeBatch = nil
        reusedBeforeBatch = nil
        batchReleases.removeAll(keepingCapacity: true)
        presence.removeAll(keepingCapacity: true)
        totals = Totals()
        loading = nil  // a full recount
        for row in rows {
            highestRowid = max(highestRowid, row.rowid)
            if let doom = doomed[row.rowid], !doom.revived {
                if doom.holdsBytes { totals.bytes += row.size }
                continue
            }
            presence.insert(row.hash)
            totals.entries += 1
            totals.bytes += row.size
        }
    }

    // MARK: - Private

    /// Whether ``totals`` holds the row (or will once stored): `false` only for rows present at
    /// start-up the loader has not read yet, which it counts when it does.
    private func isCounted(_ rowid: Int64) -> Bool {
        guard let loading else { return true }
        return rowid <= loading.through || rowid > loading.ceiling
    }

    private mutating func journalDoomed() {
        if doomedBeforeBatch == nil { doomedBeforeBatch = doomed }
    }

    private mutating func revive(_ rowid: Int64, _ doom: Doom) {
        journalDoomed()
        if doom.holdsBytes { bytesHeld -= 1 }
        doomed[rowid] = Doom(token: doom.token, revived: true)
        batchReleases.append((rowid, doom.token))
    }

    private mutating func releaseDue() {
        guard !scheduled.isEmpty else { return }
        let oldestRead = readers.keys.min() ?? UInt64.max
        while let first = scheduled.first, first.epoch <= oldestRead {
            scheduled.removeFirst()
            for (rowid, token) in first.rows where doomed[rowid]?.token == token {
                // Released once its row is gone or stored again: it holds no bytes by then.
                if doomed[rowid]!.holdsBytes { bytesHeld -= 1 }
                doomed[rowid] = nil
            }
        }
    }
}
