/// What the writer knows of every row without asking SQLite, by rowid: when it stops being
/// usable (`usable_until`, what the sweep deletes), when it was last stored or read
/// (`last_access`, the order eviction deletes in), its endpoint, version and user (what
/// invalidation by endpoint or user, and the sweep of outdated versions, select), and whether
/// its key may have rows in `cache_tag` (a deletion drops those; untagged rows need no look). The writer
/// keeps them instead of three SQLite indexes on those columns, which every stored entry paid
/// for (together about half of an insert's work in SQLite) to serve a sweep every 30 seconds,
/// eviction once the cache is full and the rare invalidation by endpoint or user. The columns
/// stay, written as before, so a restart reads the facts back.
///
/// Part of the writer's ``RowLedger``, which tells it every change made to a row (a put, a soft
/// purge, the access log's touches) and every row deleted, and the rows the key index's
/// loader reads at start-up. Rows the loader has not read yet are not in it: invalidations
/// select those with SQL over the rowids still unread; the sweep deletes them once they are
/// read (the reader never serves a row past its windows meanwhile), and eviction waits for the
/// loader. After a batch that rolled back, the writer reads the facts again from SQLite
/// (``rebuilt(_:)``), or, if that read failed too, the next sweep, eviction or invalidation
/// does (``needsRebuild``).
///
/// The sweep deletes a row only where SQLite's own `usable_until` says it is due, so a time
/// here that is stale can delay a deletion, never cause a wrong one; a stale access time can
/// only change which old entry eviction takes first.
///
/// Rowids come from SQLite in increasing order (a new row takes the largest plus one), so the
/// facts are kept in pages of ``pageRows`` consecutive rowids: 24 bytes a row where rows are
/// dense, a page given back once its last row goes. Endpoints with their version, and users,
/// are kept once each (``Interned``), as long as a row has them.
struct RowFacts: Sendable {
    static let pageBits = 8
    static let pageRows = 1 << pageBits

    /// One row's facts, as the loader and a rebuild read them from SQLite.
    struct Row: Sendable, Equatable {
        var rowid: Int64
        var usableUntil: Double
        var lastAccess: Double
        var endpoint: String
        var version: Int
        var userID: String?
        /// Whether the row's key may have rows in `cache_tag`.
        var tagged = false
    }

    /// An endpoint with the configuration version its entry was stored under.
    struct Group: Hashable, Sendable {
        var endpoint: String
        var version: Int
    }

    private struct Page: Sendable {
        /// By rowid within the page; NaN where there is no row.
        var usableUntil: [Double]
        var lastAccess: [Double]
        /// The row's ``Group`` in ``groups``; 0 where there is no row.
        var group: [UInt32]
        /// The row's user in ``users``; 0 for a shared entry (and where there is no row).
        var user: [UInt32]
        /// Whether the row's key may have tag rows.
        var tagged: [Bool]
        var count: Int
        /// The earliest `usableUntil` of the page's rows (+∞ for none), kept exact: the sweep
        /// passes over a page none of whose rows is due (``due(by:)``), so its work follows the
        /// pages with rows due, not the size of the cache.
        private(set) var earliestUsableUntil = Double.infinity

        init() {
            usableUntil = Array(repeating: .nan, count: RowFacts.pageRows)
            lastAccess = Array(repeating: .nan, count: RowFacts.pageRows)
            group = Array(repeating: 0, count: RowFacts.pageRows)
            user = Array(repeating: 0, count: RowFacts.pageRows)
            tagged = Array(repeating: false, count: RowFacts.pageRows)
            count = 0
        }

        /// Fills `slot`; the group and user it held before, `nil` if it was empty.
        mutating func fill(_ slot: Int, _ usableUntil: Double, _ lastAccess: Double, _ group: UInt32, _ user: UInt32, _ tagged: Bool)
            -> (group: UInt32, user: UInt32)? {
            let before = self.group[slot] == 0 ? nil : (self.group[slot], self.user[slot])
            if before == nil { count += 1 }
            setUsableUntil(slot, usableUntil)
            self.lastAccess[slot] = lastAccess
            (self.group[slot], self.user[slot], self.tagged[slot]) = (group, user, tagged)
            return before
        }

        mutating func clear(_ slot: Int) {
            setUsableUntil(slot, .nan)
            (lastAccess[slot], group[slot], user[slot], tagged[slot]) = (.nan, 0, 0, false)
            count -= 1
        }

        /// A slot's `usableUntil` (NaN for no row), with ``earliestUsableUntil`` kept: a walk of
        /// the page only when the slot held the earliest time and its new one is later.
        mutating func setUsableUntil(_ slot: Int, _ time: Double) {
            let old = usableUntil[slot]
            usableUntil[slot] = time
            if time < earliestUsableUntil {
                earliestUsableUntil = time
            } else if old == earliestUsableUntil, time != old {
                earliestUsableUntil = usableUntil.reduce(.infinity) { $1 < $0 ? $1 : $0 }  // NaN (no row) is never less
            }
        }
    }

    private var pages: [Int64: Page] = [:]
    /// Pages whose access times changed since they were last saved (``takeUnsavedAccessPages(_:)``),
    /// and pages given back since (their saved times go too).
    private var unsavedAccessPages = Set<Int64>()
    private var groups = Interned<Group>()
    private var users = Interned<String>()
    /// Rows with facts.
    private(set) var count = 0
    /// The facts must be read again from SQLite before they can be trusted to be complete.
    private(set) var needsRebuild = false

    private static func place(_ rowid: Int64) -> (page: Int64, slot: Int) {
        (rowid >> Int64(pageBits), Int(rowid & Int64(pageRows - 1)))
    }

    private static func rowid(page: Int64, slot: Int) -> Int64 {
        page << Int64(pageBits) | Int64(slot)
    }

    /// A row stored (or replaced), or read from SQLite.
    mutating func set(_ rowid: Int64, usableUntil: Double, lastAccess: Double, endpoint: String, version: Int, userID: String?,
                      tagged: Bool = false) {
        // Kept before the row's old ones are let go: a row stored again under the same
        // endpoint keeps its ids.
        let group = groups.retain(Group(endpoint: endpoint, version: version))
        let user = userID.map { users.retain($0) } ?? 0
        let (page, slot) = Self.place(rowid)
        if let before = pages[page, default: Page()].fill(slot, usableUntil, lastAccess, group, user, tagged) {
            release(before)
        } else {
            count += 1
        }
    }

    /// ``set(_:usableUntil:lastAccess:endpoint:version:userID:tagged:)`` for a row read from SQLite.
    mutating func set(_ row: Row) {
        set(row.rowid, usableUntil: row.usableUntil, lastAccess: row.lastAccess, endpoint: row.endpoint,
            version: row.version, userID: row.userID, tagged: row.tagged)
    }

    /// Whether the row's key may have tag rows: `true` for a row without facts (not read yet,
    /// or the facts lost track), which a deletion must look up.
    func mayHaveTags(_ rowid: Int64) -> Bool {
        let (page, slot) = Self.place(rowid)
        guard let entries = pages[page], entries.group[slot] != 0 else { return true }
        return entries.tagged[slot]
    }

    private mutating func release(_ ids: (group: UInt32, user: UInt32)) {
        groups.release(ids.group)
        if ids.user != 0 { users.release(ids.user) }
    }

    /// A kept row's new `usable_until` (a soft purge, or SQLite's time where it differed);
    /// nothing for a row without facts.
    mutating func setUsableUntil(_ rowid: Int64, _ usableUntil: Double) {
        let (page, slot) = Self.place(rowid)
        guard let group = pages[page]?.group[slot], group != 0 else { return }
        pages[page]!.setUsableUntil(slot, usableUntil)
    }

    /// A kept row was read at `time`; nothing for a row without facts.
    mutating func touch(_ rowid: Int64, at time: Double) {
        let (page, slot) = Self.place(rowid)
        guard let group = pages[page]?.group[slot], group != 0 else { return }
        pages[page]!.lastAccess[slot] = time
        unsavedAccessPages.insert(page)
    }

    mutating func remove(_ rowid: Int64) {
        let (page, slot) = Self.place(rowid)
        guard let entries = pages[page], entries.group[slot] != 0 else { return }
        release((entries.group[slot], entries.user[slot]))
        count -= 1
        if entries.count == 1 {
            pages[page] = nil
            unsavedAccessPages.insert(page)
        } else {
            pages[page]!.clear(slot)
        }
    }

    /// The table was emptied (its saved access times with it), or is read again.
    mutating func removeAll() {
        unsavedAccessPages.removeAll()
        pages.removeAll()
        groups = Interned()
        users = Interned()
        count = 0
    }

    // MARK: Access times saved by page

    /// Up to `limit` pages whose reads are not saved yet (the lowest first), each with the
    /// bytes to save: its rows' access times (``accessTimes(_:)``), or `nil` for a page given
    /// back, whose saved times go.
    mutating func takeUnsavedAccessPages(_ limit: Int) -> [(page: Int64, times: [UInt8]?)] {
        guard !unsavedAccessPages.isEmpty else { return [] }
        let taken = Array(unsavedAccessPages.sorted().prefix(limit))
        unsavedAccessPages.subtract(taken)
        return taken.map { ($0, pages[$0].map(Self.accessTimes)) }
    }

    /// Pages whose reads are not saved yet.
    var unsavedAccessPageCount: Int { unsavedAccessPages.count }

    /// Saved pages that have no row: their saved times are deleted at the next save.
    mutating func forgetSavedAccessPages(_ gone: [Int64]) {
        for page in gone where pages[page] == nil { unsavedAccessPages.insert(page) }
    }

    /// A page's access times as saved: ``pageRows`` little-endian `Double`s by slot, NaN where
    /// there is no row.
    private static func accessTimes(_ page: Page) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(pageRows * 8)
        for time in page.lastAccess { withUnsafeBytes(of: time.bitPattern.littleEndian) { bytes.append(contentsOf: $0) } }
        return bytes
    }

    /// Saved access times read back: each row of the page with facts takes the later of its
    /// own time and the saved one (a row stored after the save has its own, later time; a
    /// saved time of a row gone since is never newer than what took its rowid). Whether the
    /// page still has rows (else its saved times are of no use).
    @discardableResult
    mutating func merge(savedAccessTimes bytes: UnsafeRawBufferPointer, page: Int64) -> Bool {
        guard pages[page] != nil else { return false }
        let slots = min(Self.pageRows, bytes.count / 8)
        for slot in 0..<slots where pages[page]!.group[slot] != 0 {
            let saved = Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: slot * 8, as: UInt64.self)))
            if saved > pages[page]!.lastAccess[slot] { pages[page]!.lastAccess[slot] = saved }  // false for NaN
        }
        return true
    }

    /// The earliest `usable_until` of a page's rows (+∞ for none, `nil` for a page not kept).
    func earliestUsableUntil(page: Int64) -> Double? { pages[page]?.earliestUsableUntil }

    /// The rows whose `usable_until` is `now` or earlier, from the pages with such a row only.
    func due(by now: Double) -> [Int64] {
        var due: [Int64] = []
        for (page, entries) in pages where entries.earliestUsableUntil <= now {
            for (slot, time) in entries.usableUntil.enumerated() where time <= now {  // false for NaN
                due.append(Self.rowid(page: page, slot: slot))
            }
        }
        return due
    }

    /// The `limit` least recently used rows, the oldest first (by rowid where times are equal,
    /// as SQLite's index on `last_access` ordered them): one pass over the rows, keeping the
    /// oldest seen so far in a heap whose top is the newest of them.
    func oldest(_ limit: Int) -> [Int64] {
        oldestWithTimes(limit).map(\.rowid)
    }

    /// ``oldest(_:)`` with each row's access time, so that a row read after it was chosen can
    /// be told apart (``lastAccess(of:)``).
    func oldestWithTimes(_ limit: Int) -> [(rowid: Int64, lastAccess: Double)] {
        guard limit > 0 else { return [] }
        var heap = NewestOnTop(capacity: limit)
        for (page, entries) in pages {
            for slot in 0..<Self.pageRows where entries.group[slot] != 0 {
                heap.offer(entries.lastAccess[slot], Self.rowid(page: page, slot: slot))
            }
        }
        return heap.sortedOldestFirst()
    }

    /// Whether the row has facts: for a rowid the loader has read (or above its ceiling), and
    /// while ``needsRebuild`` is `false`, whether SQLite holds the row.
    func contains(_ rowid: Int64) -> Bool {
        let (page, slot) = Self.place(rowid)
        guard let entries = pages[page] else { return false }
        return entries.group[slot] != 0
    }

    /// The row's last access; `nil` for a row without facts.
    func lastAccess(of rowid: Int64) -> Double? {
        let (page, slot) = Self.place(rowid)
        guard let entries = pages[page], entries.group[slot] != 0 else { return nil }
        return entries.lastAccess[slot]
    }

    /// The rows criteria select by their facts (``InvalidationCriteria/Selection/rows(_:)``;
    /// none for other kinds).
    func rows(of criteria: InvalidationCriteria) -> [Int64] {
        guard case .rows(let filter) = criteria.selection else { return [] }
        return rows(selectedBy: filter)
    }

    /// The rows whose endpoint and user the filter selects: the filter is asked once per
    /// endpoint and user the rows hold, not once per row.
    func rows(selectedBy filter: RowFilter) -> [Int64] {
        let names = filter.endpoints.map(Set.init)
        let selected = names.map { names in groups.flags { names.contains($0.endpoint) } }
        switch filter.users {
        case .any:
            guard let selected else { return rows { _, _ in true } }
            return rows { group, _ in selected[Int(group)] }
        case .shared:
            return rows { group, user in user == 0 && selected?[Int(group)] ?? true }
        case .sharedAnd(let name):
            let id = users.id(of: name) ?? 0
            return rows { group, user in (user == 0 || user == id) && selected?[Int(group)] ?? true }
        case .only(let name):
            guard let id = users.id(of: name) else { return [] }
            return rows { group, user in user == id && selected?[Int(group)] ?? true }
        }
    }

    /// The rows stored under an endpoint's older version, or of an endpoint `versions` does
    /// not name (gone from the configuration); none for no versions at all.
    func outdated(_ versions: [String: Int]) -> [Int64] {
        guard !versions.isEmpty else { return [] }
        let selected = groups.flags { versions[$0.endpoint] != $0.version }
        guard selected.contains(true) else { return [] }  // the usual sweep: no row is walked
        return rows { group, _ in selected[Int(group)] }
    }

    private func rows(_ selected: (_ group: UInt32, _ user: UInt32) -> Bool) -> [Int64] {
        var rows: [Int64] = []
        for (page, entries) in pages {
            for slot in 0..<Self.pageRows where entries.group[slot] != 0 && selected(entries.group[slot], entries.user[slot]) {
                rows.append(Self.rowid(page: page, slot: slot))
            }
        }
        return rows
    }

    /// Distinct endpoints with their version, and users, of the rows (for tests).
    var internedCounts: (groups: Int, users: Int) { (groups.count, users.count) }

    /// Every row's facts, read again from SQLite.
    mutating func rebuilt(_ rows: [Row]) {
        removeAll()
        for row in rows { set(row) }
        needsRebuild = false
    }

    /// A batch rolled back and the facts could not be read again.
    mutating func lostTrack() {
        needsRebuild = true
    }
}

/// Values kept once each, by a small id (never 0), while rows hold them: each row's hold is
/// counted, and an id whose last hold goes is given back and reused.
struct Interned<Value: Hashable & Sendable>: Sendable {
    private var ids: [Value: UInt32] = [:]
    /// By id; `nil` for id 0 and for ids given back.
    private var values: [Value?] = [nil]
    private var holds: [Int] = [0]
    private var free: [UInt32] = []
    /// The value retained last: puts of one endpoint in a row find it without hashing.
    private var last: (value: Value, id: UInt32)?

    var count: Int { ids.count }

    /// The value's id, with one more hold on it.
    mutating func retain(_ value: Value) -> UInt32 {
        if let last, last.value == value {
            holds[Int(last.id)] += 1
            return last.id
        }
        let id: UInt32
        if let known = ids[value] {
            id = known
        } else if let reused = free.popLast() {
            id = reused
            values[Int(id)] = value
            ids[value] = id
        } else {
            id = UInt32(values.count)
            values.append(value)
            holds.append(0)
            ids[value] = id
        }
        holds[Int(id)] += 1
        last = (value, id)
        return id
    }

    mutating func release(_ id: UInt32) {
        holds[Int(id)] -= 1
        guard holds[Int(id)] == 0 else { return }
        if let value = values[Int(id)] { ids[value] = nil }
        values[Int(id)] = nil
        free.append(id)
        if last?.id == id { last = nil }
    }

    func id(of value: Value) -> UInt32? { ids[value] }

    /// By id, whether its value is selected (false for id 0 and ids given back).
    func flags(_ selected: (Value) -> Bool) -> [Bool] {
        values.map { $0.map(selected) ?? false }
    }
}

/// At most `capacity` (time, rowid) pairs, the smallest seen: a binary max-heap, so the
/// newest of those kept is the one an older offer replaces.
private struct NewestOnTop {
    private var items: [(time: Double, rowid: Int64)] = []
    private let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        items.reserveCapacity(capacity)
    }

    private static func newer(_ a: (time: Double, rowid: Int64), _ b: (time: Double, rowid: Int64)) -> Bool {
        a.time != b.time ? a.time > b.time : a.rowid > b.rowid
    }

    mutating func offer(_ time: Double, _ rowid: Int64) {
        let item = (time: time, rowid: rowid)
        if items.count < capacity {
            items.append(item)
            var child = items.count - 1
            while child > 0 {
                let parent = (child - 1) / 2
                guard Self.newer(items[child], items[parent]) else { break }
                items.swapAt(child, parent)
                child = parent
            }
        } else if Self.newer(items[0], item) {
            items[0] = item
            var parent = 0
            while true {
                let left = 2 * parent + 1
                guard left < items.count else { break }
                var newest = left
                if left + 1 < items.count, Self.newer(items[left + 1], items[left]) { newest = left + 1 }
                guard Self.newer(items[newest], items[parent]) else { break }
                items.swapAt(newest, parent)
                parent = newest
            }
        }
    }

    func sortedOldestFirst() -> [(rowid: Int64, lastAccess: Double)] {
        items.sorted { Self.newer($1, $0) }.map { ($0.rowid, $0.time) }
    }
}
