@testable import ConciergeStorage
import ConciergeCore
import Testing

/// The writer's ``RowLedger`` (key index, row facts and which keys have tag rows) driven by
/// random sequences of its events, and a plain model of the cache table and its tag table
/// driven by the same events, compared after every step: the totals count the live rows, every
/// live row may be found, the facts answer every question (the sweep's, eviction's, an
/// invalidation's) as the model's rows do, and no deletion leaves tag rows behind.
@Suite("Row ledger against a model of the table")
struct RowLedgerTests {
    @Test("random puts, deletes, sweeps, evictions, invalidations, dooms, soft purges, reads, load slices and roll-backs: ledger and model agree after each step, and a rowid the ledger vouches for since a mark holds the key it held")
    func randomEvents() {
        for seed in UInt64(1)...300 {
            var model = LedgerModel(seed: seed)
            model.run(steps: 400)
            if let failure = model.failure {
                Issue.record("seed \(seed), event \(model.time): \(failure)\n\(model.trace.suffix(40).joined(separator: "\n"))")
                return
            }
        }
    }

    @Test("a deletion drops the tag rows of a key stored with tags, kept by a put without tags, and of rows not loaded yet")
    func tagRowsFollowDeletes() {
        var ledger = RowLedger(index: KeyIndex(loadingUpTo: 1))
        func facts(_ rowid: Int64, tagged: Bool) -> RowFacts.Row {
            RowFacts.Row(rowid: rowid, usableUntil: 100, lastAccess: 0, endpoint: "e", version: 1, userID: nil, tagged: tagged)
        }
        func row(_ rowid: Int64, _ key: String) -> KeyIndex.Row { KeyIndex.Row(rowid: rowid, hash: KeyHash.of(key), size: 10) }
        ledger.beginBatch()
        _ = ledger.putting(KeyHash.of("t"))
        ledger.put(facts(2, tagged: true), size: 10, replacing: nil)
        _ = ledger.putting(KeyHash.of("t"))
        ledger.put(facts(2, tagged: false), size: 10, replacing: row(2, "t"))
        _ = ledger.putting(KeyHash.of("plain"))
        ledger.put(facts(3, tagged: false), size: 10, replacing: nil)
        let deleted = ledger.deleted([.init(row: row(1, "unread"), key: "unread"), .init(row: row(2, "t"), key: "t"),
                                      .init(row: row(3, "plain"), key: "plain")])
        ledger.commitBatch()
        #expect(deleted.untag == ["unread", "t"], "a row not loaded yet may have tag rows; a plain one has none")
        #expect(deleted.live == 3)
    }
}

/// A model of the cache table (rowid → key, size, store time and facts) and of its tag table
/// (the keys with tag rows), with the ledger beside it. Rows are chosen in rowid order, so a
/// seed replays exactly.
struct LedgerModel {
    struct Stored {
        var key: String
        var size: Int
        var storedAt: Int
        var usableUntil: Double
        var lastAccess: Double
        var endpoint: String
        var version: Int
        var user: String?
    }

    var rows: [Int64: Stored] = [:]
    /// Keys with rows in `cache_tag`.
    var tagRows: Set<String> = []
    /// Rows the ledger has facts for: stored since start-up, or read by the loader.
    var hasFacts: Set<Int64> = []
    /// Rows counted out by a doom and not stored again (still in the table).
    var unservable: Set<Int64> = []
    /// Those of them doomed without their size while counted: their bytes are still counted.
    var bytesHeld: Set<Int64> = []
    /// Rowid marks a reader took (``KeyIndex/rowidMark``), each with the rows (rowid → key) its
    /// read may have seen: those committed when it was taken.
    var marks: [(mark: UInt64, seen: [Int64: String])] = []
    /// The rows as the last commit left them.
    var committed: [Int64: String] = [:]
    var dooms: [(rowids: [Int64], token: UInt64, storedUpTo: Int)] = []
    var reads: [UInt64] = []
    var ledger: RowLedger
    var time = 0
    var random: SplitMix
    var failure: String?
    /// The last events, for a failure's message.
    var trace: [String] = []

    static let endpoints = ["a", "b", "c"]
    static let users: [String?] = [nil, "u1", "u2"]

    init(seed: UInt64) {
        random = SplitMix(state: seed)
        let start = Int64(random.next(20)) + 1
        ledger = RowLedger(index: KeyIndex(loadingUpTo: start))
        // The rows present at start-up, unread: keys are unique, some have tag rows.
        for rowid in 1...start {
            let key = "k\(random.next(40) * 1_000 + Int(rowid))"
            rows[rowid] = randomRow(key: key)
            if random.next(3) == 0 { tagRows.insert(key) }
        }
    }

    mutating func randomRow(key: String) -> Stored {
        Stored(key: key, size: random.next(100) + 1, storedAt: time, usableUntil: Double(time + random.next(30)),
               lastAccess: Double(time), endpoint: Self.endpoints[random.next(3)], version: random.next(2) + 1,
               user: Self.users[random.next(3)])
    }

    func indexRow(_ rowid: Int64) -> KeyIndex.Row {
        KeyIndex.Row(rowid: rowid, hash: KeyHash.of(rows[rowid]!.key), size: rows[rowid]!.size)
    }

    func facts(_ rowid: Int64) -> RowFacts.Row {
        let row = rows[rowid]!
        return RowFacts.Row(rowid: rowid, usableUntil: row.usableUntil, lastAccess: row.lastAccess, endpoint: row.endpoint,
                            version: row.version, userID: row.user, tagged: tagRows.contains(row.key))
    }

    mutating func run(steps: Int) {
        committed = rows.mapValues(\.key)
        for _ in 0..<steps where failure == nil {
            let before = (rows, tagRows, hasFacts, unservable, dooms, bytesHeld)
            ledger.beginBatch()
            for _ in 0...random.next(3) where failure == nil { event() }
            if random.next(30) == 0 {
                trace.append("roll back")
                // The transaction failed: SQLite is as before it, and the ledger is read again.
                (rows, tagRows, hasFacts, unservable, dooms, bytesHeld) = before
                hasFacts = Set(rows.keys)
                ledger.rolledBack(recounted: rows.keys.map(indexRow), facts: rows.keys.map(facts))
            } else {
                ledger.commitBatch()
                trace.append("commit")
            }
            committed = rows.mapValues(\.key)
            // A reader takes a mark between batches, or during one (below, in `event()`).
            if random.next(8) == 0 { takeMark() }
            // Between batches, the writer reads a slice.
            if random.next(3) == 0 { loadSlice(Int64(random.next(4) + 1)) }
            check()
        }
        while failure == nil, ledger.nextLoadSlice(8) != nil {
            loadSlice(8)
            check()
        }
        for read in reads { ledger.endRead(read) }
        check()
    }

    /// One event, at a time of its own (a row stored after a doom is stored after its instant).
    mutating func event() {
        time += 1
        switch random.next(12) {
        case 0, 1, 2: put()
        case 3: delete(rows.keys.sorted().filter { _ in random.next(6) == 0 })
        case 4: sweep()
        case 5: evict()
        case 6: invalidate()
        case 7: doom()
        case 8: deleteDoomed()
        case 9: softPurgeAndTouch()
        case 10: if random.next(3) == 0 { takeMark() } else { read() }
        default: if random.next(10) == 0 { deleteAll() }
        }
    }

    mutating func loadSlice(_ count: Int64) {
        guard let slice = ledger.nextLoadSlice(count) else { return }
        let found = rows.keys.sorted().filter { $0 > slice.after && $0 <= slice.upTo }
        trace.append("load \(slice): \(found.sorted())")
        ledger.loaded(found.map(indexRow), facts: found.map(facts), through: slice.upTo)
        hasFacts.formUnion(found)
    }

    mutating func put() {
        let key = random.next(2) == 0 ? rows.keys.sorted().randomElement(using: &random).map { rows[$0]!.key } ?? "k7" : "n\(random.next(1_000_000))"
        let existing = rows.first { $0.value.key == key }?.key
        let mayHave = ledger.putting(KeyHash.of(key))
        if existing != nil && !mayHave { failure = "a key with a row was said to have none" }
        let rowid = existing ?? (rows.keys.max() ?? 0) + 1  // SQLite's choice: may reuse a deleted top rowid
        let old = existing.map(indexRow)
        trace.append("\(time) put \(key) at \(rowid)\(existing == nil ? " (new)" : "")")
        let tagged = random.next(3) == 0
        rows[rowid] = randomRow(key: key)
        // A response may be stored after an invalidation it came before (its doom deletes it).
        rows[rowid]!.storedAt -= random.next(3)
        // As the writer's SQL: a put with tags replaces the key's tag rows, one without leaves them.
        if tagged { tagRows.insert(key) }
        var stored = facts(rowid)
        stored.tagged = tagged
        ledger.put(stored, size: rows[rowid]!.size, replacing: old)
        hasFacts.insert(rowid)
        unservable.remove(rowid)
        bytesHeld.remove(rowid)
    }

    /// Deletes the rows as the writer's SQL does, then tells the ledger; the tag rows it names go.
    mutating func delete(_ rowids: [Int64], gone: [Int64] = []) {
        let deleted = rowids.map { RowLedger.Deleted(row: indexRow($0), key: rows[$0]!.key) }
        let expectedLive = rowids.count { !unservable.contains($0) }
        let answer = ledger.deleted(deleted, gone: gone)
        trace.append("\(time) delete \(rowids.sorted())")
        if answer.live != expectedLive { failure = "deleted \(rowids): \(answer.live) live, the model says \(expectedLive)" }
        forget(rowids, untag: answer.untag)
    }

    mutating func forget(_ rowids: [Int64], untag: [String]) {
        tagRows.subtract(untag)
        for rowid in rowids {
            let key = rows[rowid]!.key
            rows[rowid] = nil
            hasFacts.remove(rowid)
            unservable.remove(rowid)
            bytesHeld.remove(rowid)
            if tagRows.contains(key) { failure = "the tag rows of deleted row \(rowid) (\(key)) were left behind" }
        }
    }

    /// The sweep: the facts' due rows are those of the model's rows with facts.
    mutating func sweep() {
        let now = Double(time)
        let due = Set(ledger.facts.due(by: now))
        let expected = Set(hasFacts.filter { rows[$0]!.usableUntil <= now })
        if due != expected { failure = "due \(due.sorted()), the model says \(expected.sorted())" }
        delete(Array(expected))
    }

    /// Eviction: the facts' oldest rows (by access time, then rowid), and rows with facts gone
    /// from the table (none here: the facts follow the table).
    mutating func evict() {
        let count = random.next(4) + 1
        let oldest = ledger.facts.oldest(count)
        let expected = hasFacts.sorted { (rows[$0]!.lastAccess, $0) < (rows[$1]!.lastAccess, $1) }.prefix(count)
        if oldest != Array(expected) { failure = "oldest \(oldest), the model says \(Array(expected))" }
        delete(Array(expected), gone: [Int64(1_000_000 + random.next(10))])
    }

    /// Invalidation by the rows' endpoint and user, through the facts (and for the rows not
    /// loaded yet, as SQL selects them).
    mutating func invalidate() {
        let endpoints: [String]? = random.next(3) == 0 ? nil : Self.endpoints.filter { _ in random.next(2) == 0 }
        let user = Self.users[random.next(3)] ?? "u1"
        let users: [RowFilter.Users] = [.any, .shared, .sharedAnd(user), .only(user)]
        let filter = RowFilter(endpoints: endpoints, users: users[random.next(4)])
        let selected = Set(ledger.facts.rows(selectedBy: filter))
        let matching = rows.keys.sorted().filter { filter.matches(endpoint: rows[$0]!.endpoint, userID: rows[$0]!.user) }
        let expected = Set(matching.filter(hasFacts.contains))
        if selected != expected { failure = "filter \(filter) selected \(selected.sorted()), the model says \(expected.sorted())" }
        if random.next(2) == 0 {
            let outdated = Set(ledger.facts.outdated(["a": 1, "b": 2]))
            let old = Set(hasFacts.filter { rows[$0]!.endpoint == "c" || rows[$0]!.version != (rows[$0]!.endpoint == "a" ? 1 : 2) })
            if outdated != old { failure = "outdated \(outdated.sorted()), the model says \(old.sorted())" }
        }
        delete(matching)
    }

    mutating func doom() {
        let chosen = rows.keys.sorted().filter { _ in random.next(4) == 0 }
        guard !chosen.isEmpty else { return }
        // The writer's dooms come without sizes: the bytes of the rows counted stay until deleted.
        let sized = random.next(2) == 0
        if !sized { bytesHeld.formUnion(chosen.filter { !unservable.contains($0) && isCounted($0) }) }
        let token = ledger.doomed(chosen.map { sized ? indexRow($0) : KeyIndex.Row(rowid: $0, hash: indexRow($0).hash, size: 0) }, sized: sized)
        unservable.formUnion(chosen)
        dooms.append((chosen, token, time))
        trace.append("\(time) doom \(chosen.sorted()) token \(token)")
    }

    /// A doom's slice: rows stored since the invalidation stay.
    mutating func deleteDoomed() {
        guard !dooms.isEmpty else { return }
        let doom = dooms.removeFirst()
        let gone = doom.rowids.filter { (rows[$0]?.storedAt ?? .max) <= doom.storedUpTo }
        let kept = doom.rowids.filter { rows[$0] != nil && !gone.contains($0) }
        // Each deleted row as the slice's `DELETE … RETURNING key, size` gives it.
        let untag = ledger.deletedDoomed(gone.map { RowLedger.Deleted(row: indexRow($0), key: rows[$0]!.key) },
                                         kept: kept.map(indexRow), slice: doom.rowids, token: doom.token)
        forget(gone, untag: untag)
        trace.append("\(time) doomed slice of token \(doom.token): deleted \(gone.sorted()), kept \(kept.sorted())")
    }

    /// A soft purge marks some rows (SQLite's time changes for every one, the facts' for those
    /// they hold); reads touch others.
    mutating func softPurgeAndTouch() {
        var marked: [(rowid: Int64, usableUntil: Double)] = []
        var touched: [(rowid: Int64, at: Double)] = []
        for rowid in rows.keys.sorted() {
            switch random.next(6) {
            case 0:
                rows[rowid]!.usableUntil = Double(time + random.next(5))
                marked.append((rowid, rows[rowid]!.usableUntil))
            case 1:
                rows[rowid]!.lastAccess = Double(time) + 0.5
                touched.append((rowid, rows[rowid]!.lastAccess))
            default: break
            }
        }
        ledger.markedStale(marked)
        ledger.touched(touched)
    }

    mutating func read() {
        if !reads.isEmpty, random.next(2) == 0 {
            ledger.endRead(reads.remove(at: random.next(reads.count)))
            trace.append("\(time) end a read")
        } else {
            reads.append(ledger.beginRead())
            trace.append("\(time) begin a read")
        }
    }

    mutating func deleteAll() {
        let live = rows.keys.count { !unservable.contains($0) }
        let loading = ledger.index.isLoading
        let removed = ledger.deletedAll(rowsDeleted: rows.count)
        trace.append("\(time) delete all")
        // While loading, the count is SQLite's less the doomed rows (an estimate by design).
        if !loading && removed != live { failure = "deleted all: \(removed), the model says \(live)" }
        (rows, tagRows, hasFacts, unservable, bytesHeld) = ([:], [], [], [], [])
    }

    /// A reader's mark, with the rows it may see: those of the last commit (a batch under way
    /// may commit after the read began).
    mutating func takeMark() {
        marks.append((ledger.index.rowidMark, committed))
        if marks.count > 4 { marks.removeFirst() }
        trace.append("\(time) mark \(ledger.index.rowidMark)")
    }

    /// Whether the ledger's totals hold the row (rows the loader has not read are not counted).
    func isCounted(_ rowid: Int64) -> Bool {
        ledger.index.loading.map { rowid <= $0.through || rowid > $0.ceiling } ?? true
    }

    mutating func check() {
        guard failure == nil else { return }
        var expected = KeyIndex.Totals()
        let loading = ledger.index.loading
        for (rowid, row) in rows {
            if unservable.contains(rowid), bytesHeld.contains(rowid) { expected.bytes += row.size }
            if !unservable.contains(rowid) {
                if loading.map({ rowid <= $0.through || rowid > $0.ceiling }) ?? true {
                    expected.entries += 1
                    expected.bytes += row.size
                }
                if !ledger.index.mayHaveRow(KeyHash.of(row.key)) { failure = "live row \(rowid) not found" }
            }
            if tagRows.contains(row.key) && !ledger.facts.mayHaveTags(rowid) { failure = "row \(rowid) has tag rows the ledger forgot" }
        }
        if ledger.index.totals != expected { failure = "totals \(ledger.index.totals), the model says \(expected)" }
        if ledger.facts.count != hasFacts.count { failure = "facts of \(ledger.facts.count) rows, the model says \(hasFacts.count)" }
        if ledger.index.bytesIncludeDoomedRows != !bytesHeld.isEmpty { failure = "doomed rows' bytes held: \(ledger.index.bytesIncludeDoomedRows), the model says \(bytesHeld.sorted())" }
        // What the writer trusts instead of reading a matched row again (``CacheWriter/stillMatched``).
        for (mark, seen) in marks where ledger.index.noRowidReused(since: mark) && !ledger.facts.needsRebuild {
            for (rowid, key) in seen where ledger.facts.contains(rowid) && rows[rowid]?.key != key {
                failure = "rowid \(rowid) held \(key) at mark \(mark), now \(rows[rowid]?.key ?? "no row"); the ledger says no rowid was reused"
            }
        }
        let keys = Set(rows.values.map(\.key))
        if let orphan = tagRows.first(where: { !keys.contains($0) }) { failure = "tag rows of \(orphan), which has no row" }
    }
}
