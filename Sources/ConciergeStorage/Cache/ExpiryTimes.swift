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
struct ExpiryTimes: Sendable {
    private var times: [Int64: Double] = [:]
    /// The times must be read again from SQLite before they can be trusted to be complete.
    private(set) var needsRebuild = false

    var count: Int { times.count }

    mutating func set(_ rowid: Int64, _ usableUntil: Double) {
        times[rowid] = usableUntil
    }

    mutating func remove(_ rowid: Int64) {
        times[rowid] = nil
    }

    /// The table was emptied.
    mutating func removeAll() {
        times.removeAll()
    }

    /// The rows whose time is `now` or earlier.
    func due(by now: Double) -> [Int64] {
        var due: [Int64] = []
        for (rowid, time) in times where time <= now { due.append(rowid) }
        return due
    }

    /// Every row's time, read again from SQLite.
    mutating func rebuilt(_ rows: [(rowid: Int64, usableUntil: Double)]) {
        times.removeAll(keepingCapacity: true)
        for row in rows { times[row.rowid] = row.usableUntil }
        needsRebuild = false
    }

    /// A batch rolled back and the times could not be read again.
    mutating func lostTrack() {
        needsRebuild = true
    }
}
