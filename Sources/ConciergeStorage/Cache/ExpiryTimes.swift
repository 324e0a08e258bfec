/// When each row stops being usable (its `usable_until`), by rowid: what the sweep deletes.
/// The writer keeps it instead of a SQLite index on `usable_until`, which every stored entry
/// paid for (a sixth of an insert's work in SQLite) to serve one query every 30 seconds.
///
/// Owned by ``CacheWriter``, which tells it every change it makes to a row's `usable_until`
/// (a put, a soft purge) and every row it deletes, and the rows the key index's loader reads
/// at start-up. Rows the loader has not read yet are not in it: the sweep deletes those once
/// they are read (the reader never serves a row past its windows meanwhile). After a batch
/// that rolled back, the writer reads the times again from SQLite (``rebuilt(_:)``), or, if
/// that read failed too, the next sweep does (``needsRebuild``).
///
/// The sweep deletes a row only where SQLite's own `usable_until` says it is due, so a time
/// here that is stale can delay a deletion, never cause a wrong one.
///
/// Rowids come from SQLite in increasing order (a new row takes the largest plus one), so the
/// times are kept in pages of ``pageRows`` consecutive rowids: 8 bytes a row where rows are
/// dense (a dictionary by rowid took 32 to 40), a page given back once its last row goes.
struct ExpiryTimes: Sendable {
    static let pageBits = 8
    static let pageRows = 1 << pageBits

    private struct Page: Sendable {
        /// By rowid within the page; NaN where there is no row.
        var times: [Double]
        var count: Int

        init() {
            times = Array(repeating: .nan, count: ExpiryTimes.pageRows)
            count = 0
        }
    }

    private var pages: [Int64: Page] = [:]
    /// Rows with a time.
    private(set) var count = 0
    /// The times must be read again from SQLite before they can be trusted to be complete.
    private(set) var needsRebuild = false

    private static func place(_ rowid: Int64) -> (page: Int64, slot: Int) {
        (rowid >> Int64(pageBits), Int(rowid & Int64(pageRows - 1)))
    }

    mutating func set(_ rowid: Int64, _ usableUntil: Double) {
        let (page, slot) = Self.place(rowid)
        if pages[page] == nil { pages[page] = Page() }
        if pages[page]!.times[slot].isNaN {
            pages[page]!.count += 1
            count += 1
        }
        pages[page]!.times[slot] = usableUntil
    }

    mutating func remove(_ rowid: Int64) {
        let (page, slot) = Self.place(rowid)
        guard let time = pages[page]?.times[slot], !time.isNaN else { return }
        count -= 1
        if pages[page]!.count == 1 {
            pages[page] = nil
        } else {
            pages[page]!.times[slot] = .nan
            pages[page]!.count -= 1
        }
    }

    /// The table was emptied.
    mutating func removeAll() {
        pages.removeAll()
        count = 0
    }

    /// The rows whose time is `now` or earlier.
    func due(by now: Double) -> [Int64] {
        var due: [Int64] = []
        for (page, entries) in pages {
            for (slot, time) in entries.times.enumerated() where time <= now {  // false for NaN
                due.append(page << Int64(Self.pageBits) | Int64(slot))
            }
        }
        return due
    }

    /// Every row's time, read again from SQLite.
    mutating func rebuilt(_ rows: [(rowid: Int64, usableUntil: Double)]) {
        removeAll()
        for row in rows { set(row.rowid, row.usableUntil) }
        needsRebuild = false
    }

    /// A batch rolled back and the times could not be read again.
    mutating func lostTrack() {
        needsRebuild = true
    }
}
