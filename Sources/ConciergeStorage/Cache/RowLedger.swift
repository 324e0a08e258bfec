import Synchronization

/// The cache table's rows as the writer knows them without reading SQLite: the ``KeyIndex``
/// (which keys may have a row, the doomed rows, the totals, the start-up load) and the
/// ``RowFacts`` (each row's times, endpoint, version, user, and whether its key has tag rows).
///
/// One value, changed only by its events, one function each: a put (``putting(_:)`` before the
/// upsert looks for the key's row, ``put(_:size:replacing:)`` after it), a deletion
/// (``deleted(_:gone:)``: the sweep, eviction, an invalidation's rows), a doom (``doomed(_:)``)
/// and a doomed slice deleted (``deletedDoomed(_:kept:slice:token:)``), every row deleted
/// (``deletedAll(rowsDeleted:)``), a soft purge (``markedStale(_:)``), reads (``touched(_:)``),
/// a slice loaded at start-up (``loaded(_:facts:through:)``), and a batch's end (commit or
/// roll-back). Each event keeps the index and the facts in step, and a deletion answers which
/// keys' tag rows go with it, so no delete path drops a row from one and not the other.
///
/// ``CacheWriter`` owns it (through ``SharedLedger``) and applies each event inside the
/// transaction that makes the change; `RowLedgerTests` drive it with random events against a
/// plain model of the table.
struct RowLedger: Sendable {
    /// A row just deleted: its index row and its key (for the key's tag rows).
    struct Deleted: Sendable {
        var row: KeyIndex.Row
        var key: String
    }

    private(set) var index: KeyIndex
    /// Changed by the events (and by tests, through ``CacheWriter/facts``).
    fileprivate(set) var facts = RowFacts()

    init(index: KeyIndex) {
        self.index = index
    }

    // MARK: - A batch

    /// Starts a batch: its changes are committed or rolled back together with SQLite's.
    mutating func beginBatch() { index.beginBatch() }

    /// The batch committed: its releases wait for the reads that began before now.
    mutating func commitBatch() { index.commitBatch() }

    /// The batch rolled back: the rows as SQLite still has them (`facts` `nil`: they could not be
    /// read, and are read again before they are trusted, ``RowFacts/needsRebuild``).
    mutating func rolledBack(recounted rows: [KeyIndex.Row], facts rowFacts: [RowFacts.Row]?) {
        index.rollBackBatch(recounted: rows)
        if let rowFacts { facts.rebuilt(rowFacts) } else { facts.lostTrack() }
    }

    /// The facts read again from SQLite after they lost track.
    mutating func rebuiltFacts(_ rows: [RowFacts.Row]) { facts.rebuilt(rows) }

    // MARK: - Events

    /// A put of `hash` is about to look for the key's row: whether a row may exist.
    mutating func putting(_ hash: UInt64) -> Bool { index.putting(hash) }

    /// A put stored the row `stored` (its facts) of `size` bytes, replacing `old` (the key's row
    /// before, if any). The row may have tag rows if the entry has tags or the row it replaced
    /// may have (a put without tags leaves the key's tag rows as they were).
    mutating func put(_ stored: RowFacts.Row, size: Int, replacing old: KeyIndex.Row?) {
        var stored = stored
        if !stored.tagged, let old { stored.tagged = facts.mayHaveTags(old.rowid) }
        index.stored(rowid: stored.rowid, size: size, replacing: old)
        facts.set(stored)
    }

    /// Rows were deleted (and `gone`: rows with facts found no longer in the table). Returns how
    /// many of them were live entries (not counted out by an invalidation already), and the
    /// keys whose tag rows must go in the same transaction.
    mutating func deleted(_ rows: [Deleted], gone: [Int64] = []) -> (live: Int, untag: [String]) {
        var live = 0
        var untag: [String] = []
        for deleted in rows {
            if facts.mayHaveTags(deleted.row.rowid) { untag.append(deleted.key) }
            facts.remove(deleted.row.rowid)
            if index.deleted(deleted.row) { live += 1 }
        }
        for rowid in gone { facts.remove(rowid) }
        return (live, untag)
    }

    /// Every row was deleted (`rowsDeleted`, SQLite's count); how many live entries went. While
    /// the index loads, its totals lack the rows it has not read: SQLite's count, less the rows
    /// invalidated already.
    mutating func deletedAll(rowsDeleted: Int) -> Int {
        let removed = index.isLoading ? max(0, rowsDeleted - index.unservableRows) : index.totals.entries
        index.deletedAll()
        facts.removeAll()
        return removed
    }

    /// Rows invalidated now and deleted later in slices: unservable and counted out at once (their
    /// facts stay until they are deleted); rows not `sized` keep their bytes in the totals until
    /// then (``KeyIndex/doom(_:sized:)``). Returns the token ``deletedDoomed(_:kept:slice:token:)`` names.
    mutating func doomed(_ rows: [KeyIndex.Row], sized: Bool = true) -> UInt64 { index.doom(rows, sized: sized) }

    /// A slice of a doom's rows went (`deleted`, each with its key hash and size as the delete
    /// returned them: the bytes of a doom without sizes go now, and a row stored again since
    /// the doom, yet before its instant, goes like any deleted row); `kept` were stored again
    /// since the invalidation and stay. Returns the keys whose tag rows go too.
    mutating func deletedDoomed(_ deleted: [Deleted], kept: [KeyIndex.Row], slice: [Int64], token: UInt64) -> [String] {
        var untag: [String] = []
        for row in deleted {
            if facts.mayHaveTags(row.row.rowid) { untag.append(row.key) }
            facts.remove(row.row.rowid)
            index.deleted(row.row)
        }
        for row in kept { index.keptDoomed(row, token: token) }
        index.deletedDoomed(slice, token: token)
        return untag
    }

    /// A soft purge marked rows stale (each with its new `usable_until`), or the sweep found
    /// SQLite's time for a row differs from the facts'.
    mutating func markedStale(_ rows: [(rowid: Int64, usableUntil: Double)]) {
        for row in rows { facts.setUsableUntil(row.rowid, row.usableUntil) }
    }

    /// Rows read by lookups, each at its time (the eviction order).
    mutating func touched(_ rows: [(rowid: Int64, at: Double)]) {
        for row in rows { facts.touch(row.rowid, at: row.at) }
    }

    /// Pages of access times to save (``RowFacts/takeUnsavedAccessPages(_:)``).
    mutating func takeUnsavedAccessPages(_ limit: Int) -> [(page: Int64, times: [UInt8]?)] {
        facts.takeUnsavedAccessPages(limit)
    }

    /// A saved page of access times read back; `false` when the page has no row left.
    mutating func mergeSavedAccessTimes(_ bytes: UnsafeRawBufferPointer, page: Int64) -> Bool {
        facts.merge(savedAccessTimes: bytes, page: page)
    }

    /// Saved pages with no row left: deleted at the next save.
    mutating func forgetSavedAccessPages(_ pages: [Int64]) { facts.forgetSavedAccessPages(pages) }

    /// The next rowids the loader reads, at most `count`; `nil` once every row present at
    /// start-up is loaded.
    func nextLoadSlice(_ count: Int64) -> (after: Int64, upTo: Int64)? { index.nextLoadSlice(count) }

    /// The rows SQLite holds in the slice ``nextLoadSlice(_:)`` gave, with their facts.
    mutating func loaded(_ rows: [KeyIndex.Row], facts rowFacts: [RowFacts.Row], through upTo: Int64) {
        index.loaded(rows, through: upTo)
        for row in rowFacts { facts.set(row) }
    }
}

/// The writer's ``RowLedger`` behind one lock, shared with the readers.
///
/// - Important: only ``CacheWriter`` calls ``update(_:)``; readers ask the questions, and
///   register their reads of SQLite (which hold the release of a doom).
final class SharedLedger: Sendable {
    private let ledger: Mutex<RowLedger>

    init(_ ledger: RowLedger) {
        self.ledger = Mutex(ledger)
    }

    var totals: KeyIndex.Totals { ledger.withLock { $0.index.totals } }

    var isLoading: Bool { ledger.withLock { $0.index.isLoading } }

    /// Whether the totals' bytes still hold those of doomed rows (``KeyIndex/bytesIncludeDoomedRows``).
    var bytesIncludeDoomedRows: Bool { ledger.withLock { $0.index.bytesIncludeDoomedRows } }

    /// Taken before reading the rows an invalidation matches (``KeyIndex/rowidMark``).
    var rowidMark: UInt64 { ledger.withLock { $0.index.rowidMark } }

    /// The rowids the loader has still to read (after `through`, up to `ceiling`); `nil` once
    /// every row present at start-up was read.
    var unreadRows: KeyIndex.Loading? { ledger.withLock { $0.index.loading } }

    /// Whether SQLite may hold a live row for the key; if so, registers a read (end it with
    /// ``endRead(_:rowid:)``).
    func beginReadIfPresent(_ hash: UInt64) -> UInt64? {
        ledger.withLock { $0.index.mayHaveRow(hash) ? $0.beginRead() : nil }
    }

    func beginRead() -> UInt64 { ledger.withLock { $0.beginRead() } }

    /// Whether SQLite may hold a live row for the key (``KeyIndex/mayHaveRow(_:)``).
    func mayHaveRow(_ hash: UInt64) -> Bool { ledger.withLock { $0.index.mayHaveRow(hash) } }

    /// Ends a read; whether `rowid` (the row it found, if any) may be served.
    @discardableResult
    func endRead(_ began: UInt64, rowid: Int64? = nil) -> Bool {
        ledger.withLock { ledger in
            defer { ledger.endRead(began) }
            return rowid.map { !ledger.index.isDoomed($0) } ?? true
        }
    }

    /// Rows not to list or serve (checked inside a read).
    func isDoomed(_ rowid: Int64) -> Bool { ledger.withLock { $0.index.isDoomed(rowid) } }

    /// An event (the writer only).
    func update<R>(_ body: (inout RowLedger) throws -> R) rethrows -> R {
        try ledger.withLock { try body(&$0) }
    }

    /// A question to the facts that goes through every row (the sweep's, eviction's, an
    /// invalidation's), asked of a copy taken under the lock, so readers never wait for it. The
    /// writer alone changes the facts, and only after the copy is gone: no row is copied.
    func scanFacts<R>(_ body: (RowFacts) throws -> R) rethrows -> R {
        let facts = ledger.withLock { $0.facts }
        return try body(facts)
    }
}

extension RowLedger {
    /// A read of SQLite is about to start (``KeyIndex/beginRead()``): it holds back the release
    /// of the dooms scheduled from now on until ``endRead(_:)``.
    mutating func beginRead() -> UInt64 { index.beginRead() }

    mutating func endRead(_ began: UInt64) { index.endRead(began) }
}

/// The ledger's facts as tests read (and spoil) them: `store.writer.facts.withLock { … }`.
struct LedgerFacts: Sendable {
    let ledger: SharedLedger

    func withLock<R>(_ body: (inout RowFacts) throws -> R) rethrows -> R {
        try ledger.update { try body(&$0.facts) }
    }
}
