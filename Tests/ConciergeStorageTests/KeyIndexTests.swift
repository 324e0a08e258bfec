@testable import ConciergeStorage
import ConciergeCore
import Testing

/// ``KeyIndex``'s invariants, step by step, with no database and no clock: totals count live
/// rows once, doomed rows are unservable until every read older than their release has ended.
@Suite("KeyIndex")
struct KeyIndexTests {
    static func row(_ id: Int64, size: Int = 100) -> KeyIndex.Row { KeyIndex.Row(rowid: id, hash: UInt64(id) * 7919, size: size) }

    /// An index after storing rows 1...n, each in its own committed batch.
    static func indexWith(_ n: Int64, size: Int = 100) -> KeyIndex {
        var index = KeyIndex()
        for id in 1...n {
            index.beginBatch()
            let mayHaveRow = index.putting(row(id).hash)
            #expect(!mayHaveRow, "a new key needs no row lookup")
            index.stored(rowid: id, size: size, replacing: nil)
            index.commitBatch()
        }
        return index
    }

    @Test("puts count new rows once; a replacement counts its new size only")
    func putsCount() {
        var index = Self.indexWith(2)
        #expect(index.totals == .init(entries: 2, bytes: 200))
        index.beginBatch()
        let known = index.putting(Self.row(1).hash)
        #expect(known, "a known key looks for its row")
        index.stored(rowid: 1, size: 300, replacing: Self.row(1))
        index.commitBatch()
        #expect(index.totals == .init(entries: 2, bytes: 400))
    }

    @Test("a deleted row leaves the totals and the presence set")
    func deletes() {
        var index = Self.indexWith(3)
        index.beginBatch()
        index.deleted(Self.row(2))
        index.commitBatch()
        #expect(index.totals == .init(entries: 2, bytes: 200))
        #expect(!index.mayHaveRow(Self.row(2).hash))
        #expect(index.mayHaveRow(Self.row(1).hash))
    }

    @Test("a doomed row is counted out at once and never twice, whatever deletes it later")
    func doomCountsOnce() {
        var index = Self.indexWith(3)
        index.beginBatch()
        let token = index.doom([Self.row(1), Self.row(2)])
        _ = index.doom([Self.row(1)])  // a second pattern over the same row
        index.commitBatch()
        #expect(index.totals == .init(entries: 1, bytes: 100))
        #expect(index.isDoomed(1) && index.isDoomed(2))
        index.beginBatch()
        index.deleted(Self.row(1))  // swept or evicted before its slice ran
        index.deletedAll()
        index.deletedDoomed([1, 2], token: token)
        index.commitBatch()
        #expect(index.totals == .init(entries: 0, bytes: 0))
        #expect(!index.hasDoomedRows)
    }

    @Test("a doom is released only when every read begun before the delete committed has ended")
    func releaseWaitsForOlderReads() {
        var index = Self.indexWith(1)
        index.beginBatch()
        let token = index.doom([Self.row(1)])
        index.commitBatch()
        let older = index.beginRead()
        index.beginBatch()
        index.deletedDoomed([1], token: token)
        index.commitBatch()
        let newer = index.beginRead()
        #expect(index.isDoomed(1), "a read that may see the row from before the delete is still running")
        index.endRead(newer)
        #expect(index.isDoomed(1))
        index.endRead(older)
        #expect(!index.isDoomed(1))
    }

    @Test("a doomed row stored again counts again at once and is released by its doom's token only")
    func revivedRow() {
        var index = Self.indexWith(1)
        index.beginBatch()
        let first = index.doom([Self.row(1)])
        index.commitBatch()
        index.beginBatch()
        let mayHold = index.putting(Self.row(1).hash)
        #expect(mayHold, "a doomed row may hold the key")
        index.stored(rowid: 1, size: 250, replacing: Self.row(1))
        index.commitBatch()
        #expect(index.totals == .init(entries: 1, bytes: 250))
        #expect(!index.isDoomed(1), "released after the re-store committed, no read in flight")
        // Doomed again by a later invalidation: the first doom's late release keeps it doomed.
        index.beginBatch()
        let second = index.doom([KeyIndex.Row(rowid: 1, hash: Self.row(1).hash, size: 250)])
        index.commitBatch()
        index.beginBatch()
        index.deletedDoomed([1], token: first)
        index.commitBatch()
        #expect(index.isDoomed(1))
        index.beginBatch()
        index.deletedDoomed([1], token: second)
        index.commitBatch()
        #expect(!index.isDoomed(1))
        #expect(index.totals == .init(entries: 0, bytes: 0))
    }

    @Test("a new row on the rowid of a deleted doomed row is counted, and deleting it later counts it out")
    func reusedRowid() {
        var index = Self.indexWith(1)
        index.beginBatch()
        _ = index.doom([Self.row(1)])
        index.commitBatch()
        let reading = index.beginRead()  // holds the doom
        index.beginBatch()
        _ = index.putting(99)
        index.stored(rowid: 1, size: 40, replacing: nil)
        index.commitBatch()
        #expect(index.totals == .init(entries: 1, bytes: 40))
        index.beginBatch()
        index.deleted(KeyIndex.Row(rowid: 1, hash: 99, size: 40))
        index.commitBatch()
        #expect(index.totals == .init(entries: 0, bytes: 0))
        index.endRead(reading)
        #expect(!index.hasDoomedRows)
    }

    @Test("a rolled-back batch restores the dooms and recounts from what SQLite kept")
    func rollback() {
        var index = Self.indexWith(3)
        index.beginBatch()
        _ = index.doom([Self.row(1)])
        index.deleted(Self.row(2))
        index.rollBackBatch(recounted: [Self.row(1), Self.row(2), Self.row(3)])
        #expect(!index.isDoomed(1))
        #expect(index.totals == .init(entries: 3, bytes: 300))
        #expect(index.mayHaveRow(Self.row(2).hash))
    }

    @Test("a doom without sizes counts the entries out at once and each row's bytes as it is deleted or stored again")
    func unsizedDoom() {
        var index = Self.indexWith(3)
        index.beginBatch()
        let token = index.doom([Self.row(1, size: 0), Self.row(2, size: 0)], sized: false)
        index.commitBatch()
        #expect(index.totals == .init(entries: 1, bytes: 300), "the bytes stay until the rows go")
        #expect(index.bytesIncludeDoomedRows)
        #expect(!index.mayHaveRow(Self.row(1).hash))
        index.beginBatch()
        let live = index.deleted(Self.row(1))  // the slice's delete returns the size
        index.commitBatch()
        #expect(!live, "counted out already")
        #expect(index.totals == .init(entries: 1, bytes: 200))
        index.beginBatch()
        _ = index.putting(Self.row(2).hash)
        index.stored(rowid: 2, size: 250, replacing: Self.row(2))  // the put reads the old size
        index.deletedDoomed([1, 2], token: token)
        index.commitBatch()
        #expect(index.totals == .init(entries: 2, bytes: 350))
        #expect(!index.bytesIncludeDoomedRows)
        #expect(!index.hasDoomedRows)
    }

    @Test("a rolled-back batch keeps a doom's bytes in the totals until a committed delete takes them")
    func unsizedDoomRollback() {
        var index = Self.indexWith(3)
        index.beginBatch()
        _ = index.doom([Self.row(1, size: 0)], sized: false)
        index.commitBatch()
        index.beginBatch()
        index.deleted(Self.row(1))
        #expect(index.totals == .init(entries: 2, bytes: 200))
        index.rollBackBatch(recounted: [Self.row(1), Self.row(2), Self.row(3)])
        #expect(index.totals == .init(entries: 2, bytes: 300))
        #expect(index.bytesIncludeDoomedRows && index.isDoomed(1))
        index.beginBatch()
        index.deletedAll()
        index.commitBatch()
        #expect(index.totals == .init(entries: 0, bytes: 0))
        #expect(!index.bytesIncludeDoomedRows)
    }

    @Test("the rowid mark changes when a new row takes a rowid a row had, counting a batch under way as after the mark")
    func rowidMark() {
        var index = Self.indexWith(3)
        let first = index.rowidMark
        index.beginBatch()
        _ = index.putting(Self.row(4).hash)
        index.stored(rowid: 4, size: 100, replacing: nil)  // above every rowid so far
        index.commitBatch()
        #expect(index.noRowidReused(since: first))
        index.beginBatch()
        index.deleted(Self.row(4))
        _ = index.putting(99)
        index.stored(rowid: 4, size: 10, replacing: nil)  // SQLite's largest plus one: 4 again
        let during = index.rowidMark  // a read may begin before this batch commits
        index.commitBatch()
        #expect(!index.noRowidReused(since: first))
        #expect(!index.noRowidReused(since: during))
        let after = index.rowidMark
        #expect(index.noRowidReused(since: after))
        var loading = KeyIndex(loadingUpTo: 5)
        let start = loading.rowidMark
        loading.beginBatch()
        loading.stored(rowid: 5, size: 1, replacing: nil)  // the top row, deleted, then a new one
        loading.commitBatch()
        #expect(!loading.noRowidReused(since: start), "rowids up to the loader's ceiling were had")
    }

    // MARK: Loading at start-up

    @Test("a loading index may have every key, and counts a slice's live rows once it is read")
    func loadingSlices() {
        var index = KeyIndex(loadingUpTo: 3)
        #expect(index.isLoading)
        #expect(index.mayHaveRow(12345), "unknown until loaded: a lookup reads SQLite")
        #expect(index.nextLoadSlice(2)! == (0, 2))
        index.loaded([Self.row(1), Self.row(2)], through: 2)
        #expect(index.totals == .init(entries: 2, bytes: 200))
        #expect(index.nextLoadSlice(2)! == (2, 3))
        index.loaded([Self.row(3)], through: 3)
        #expect(!index.isLoading)
        #expect(index.totals == .init(entries: 3, bytes: 300))
        #expect(!index.mayHaveRow(12345))
        #expect(index.mayHaveRow(Self.row(3).hash))
        #expect(KeyIndex(loadingUpTo: 0).isLoading == false, "an empty table needs no loading")
    }

    @Test("changes to rows the loader has not read leave the totals to it; with random interleavings the totals always match the rows")
    func loadingInterleaved() {
        for seed in UInt64(1)...300 {
            var model = LoadingModel(seed: seed)
            model.run(steps: 400)
            if let failure = model.failure {
                Issue.record("seed \(seed): \(failure)")
                return
            }
        }
    }
}

/// A model of the cache table (rowid → key hash, size, store time) driven with random puts,
/// deletes, dooms, doomed deletes, reads and load slices, checking after each step that the
/// index's totals are exactly the live rows it has counted so far, and that every live row it
/// has read may be found.
struct LoadingModel {
    struct Stored { var hash: UInt64; var size: Int; var storedAt: Int }
    var rows: [Int64: Stored] = [:]
    /// Rows counted out by a doom and not stored again (still in the table).
    var unservable: Set<Int64> = []
    /// Those of them doomed without their size while counted: their bytes are still counted.
    var bytesHeld: Set<Int64> = []
    var dooms: [(rowids: [Int64], token: UInt64, storedUpTo: Int)] = []
    var reads: [UInt64] = []
    var index: KeyIndex
    var time = 0
    var random: SplitMix
    var failure: String?

    init(seed: UInt64) {
        random = SplitMix(state: seed)
        let start = Int64(random.next(20)) + 1
        for rowid in 1...start {
            rows[rowid] = Stored(hash: UInt64(random.next(40)) * 1_000 + UInt64(rowid), size: random.next(100) + 1, storedAt: 0)
        }
        // Keys are unique: the key's hash identifies its row.
        index = KeyIndex(loadingUpTo: start)
    }

    mutating func run(steps: Int) {
        for _ in 0..<steps where failure == nil {
            time += 1
            index.beginBatch()
            switch random.next(7) {
            case 0, 1: put()
            case 2: delete()
            case 3: doom()
            case 4: deleteDoomed()
            case 5: read()
            default: break
            }
            index.commitBatch()
            // Between batches, the writer reads a slice.
            if random.next(3) == 0, let slice = index.nextLoadSlice(Int64(random.next(4) + 1)) {
                let found = rows.filter { $0.key > slice.after && $0.key <= slice.upTo }
                index.loaded(found.map { KeyIndex.Row(rowid: $0.key, hash: $0.value.hash, size: $0.value.size) }, through: slice.upTo)
            }
            check()
        }
        while failure == nil, let slice = index.nextLoadSlice(8) {
            let found = rows.filter { $0.key > slice.after && $0.key <= slice.upTo }
            index.loaded(found.map { KeyIndex.Row(rowid: $0.key, hash: $0.value.hash, size: $0.value.size) }, through: slice.upTo)
            check()
        }
        for read in reads { index.endRead(read) }
        check()
        if failure == nil, index.isLoading { failure = "still loading" }
    }

    mutating func put() {
        let hash = random.next(2) == 0 ? rows.randomElement(using: &random)?.value.hash ?? 7 : UInt64(random.next(1_000_000)) * 1_000 + 999
        let size = random.next(100) + 1
        let existing = rows.first { $0.value.hash == hash }
        let mayHave = index.putting(hash)
        if existing != nil && !mayHave { failure = "a key with a row was said to have none" }
        // A response may be stored after an invalidation it came before (its doom deletes it).
        let storedAt = time - random.next(3)
        if let (rowid, old) = existing {
            index.stored(rowid: rowid, size: size, replacing: KeyIndex.Row(rowid: rowid, hash: hash, size: old.size))
            rows[rowid] = Stored(hash: hash, size: size, storedAt: storedAt)
            unservable.remove(rowid)
            bytesHeld.remove(rowid)
        } else {
            let rowid = (rows.keys.max() ?? 0) + 1  // SQLite's choice: may reuse a deleted top rowid
            index.stored(rowid: rowid, size: size, replacing: nil)
            rows[rowid] = Stored(hash: hash, size: size, storedAt: storedAt)
        }
    }

    mutating func delete() {
        guard let (rowid, row) = rows.randomElement(using: &random) else { return }
        let live = index.deleted(KeyIndex.Row(rowid: rowid, hash: row.hash, size: row.size))
        if live == unservable.contains(rowid) { failure = "deleted(\(rowid)) said live: \(live)" }
        rows[rowid] = nil
        unservable.remove(rowid)
        bytesHeld.remove(rowid)
    }

    mutating func doom() {
        let chosen = rows.filter { _ in random.next(4) == 0 }
        guard !chosen.isEmpty else { return }
        // The writer's dooms come without sizes: the bytes of the rows counted stay until deleted.
        let sized = random.next(2) == 0
        if !sized {
            bytesHeld.formUnion(chosen.keys.filter { !unservable.contains($0) && isCounted($0) })
        }
        let token = index.doom(chosen.map { KeyIndex.Row(rowid: $0.key, hash: $0.value.hash, size: sized ? $0.value.size : 0) }, sized: sized)
        unservable.formUnion(chosen.keys)
        dooms.append((Array(chosen.keys), token, time))
    }

    mutating func deleteDoomed() {
        guard !dooms.isEmpty else { return }
        let doom = dooms.removeFirst()
        for rowid in doom.rowids where (rows[rowid]?.storedAt ?? .max) <= doom.storedUpTo {
            // As the slice's delete returns it.
            index.deleted(KeyIndex.Row(rowid: rowid, hash: rows[rowid]!.hash, size: rows[rowid]!.size))
            rows[rowid] = nil
            unservable.remove(rowid)
            bytesHeld.remove(rowid)
        }
        index.deletedDoomed(doom.rowids, token: doom.token)
    }

    mutating func read() {
        if !reads.isEmpty, random.next(2) == 0 {
            index.endRead(reads.remove(at: random.next(reads.count)))
        } else {
            reads.append(index.beginRead())
        }
    }

    mutating func check() {
        guard failure == nil else { return }
        var expected = KeyIndex.Totals()
        for (rowid, row) in rows {
            let counted = isCounted(rowid)
            if unservable.contains(rowid) {
                if bytesHeld.contains(rowid) { expected.bytes += row.size }
                continue
            }
            if counted {
                expected.entries += 1
                expected.bytes += row.size
            }
            if !index.mayHaveRow(row.hash) { failure = "live row \(rowid) not found" }
        }
        if index.totals != expected { failure = "totals \(index.totals), rows say \(expected) (loading \(String(describing: index.loading)))" }
        if index.bytesIncludeDoomedRows != !bytesHeld.isEmpty { failure = "bytes of doomed rows held: \(index.bytesIncludeDoomedRows), rows say \(bytesHeld)" }
    }

    /// Whether the index's totals hold the row (rows the loader has not read are not counted).
    func isCounted(_ rowid: Int64) -> Bool {
        index.loading.map { rowid <= $0.through || rowid > $0.ceiling } ?? true
    }
}

/// A seeded generator (SplitMix64): a failing seed is replayed exactly.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
}

@Suite("Key hash")
struct KeyHashTests {
    @Test("the key hash tells keys apart: every length up to 40 bytes, one byte changed anywhere, 200,000 cache keys")
    func keyHashSpreads() {
        var seen = Set<UInt64>()
        // Keys of each length, and each with one byte changed at each place.
        for length in 0...40 {
            let base = [UInt8](repeating: UInt8(ascii: "a"), count: length)
            #expect(seen.insert(base.withUnsafeBytes { KeyHash.of($0) }).inserted, "length \(length)")
            for place in 0..<length {
                var changed = base
                changed[place] = UInt8(ascii: "b")
                #expect(seen.insert(changed.withUnsafeBytes { KeyHash.of($0) }).inserted, "length \(length), byte \(place)")
            }
        }
        var collisions = 0
        for n in 0..<200_000 where !seen.insert(KeyHash.of("GET http://127.0.0.1:8080/api/items?limit=1&n=\(n)&run=cg v=1")).inserted {
            collisions += 1
        }
        #expect(collisions == 0)
        #expect(KeyHash.of("abc") == "abc".utf8.withContiguousStorageIfAvailable { KeyHash.of(UnsafeRawBufferPointer($0)) })
    }
}
