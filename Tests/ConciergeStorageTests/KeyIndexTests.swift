@testable import ConciergeStorage
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
}
