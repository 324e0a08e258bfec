@testable import ConciergeStorage
import Foundation
import Testing

/// Pattern invalidation matches keys off the writer, in slices, within limits: a pattern that
/// runs away is refused and removes nothing, and the writer keeps storing meanwhile.
@Suite("Pattern invalidation")
struct PatternInvalidationTests {
    static let base = "GET https://api.example.com/api/items?q="

    /// `count` entries; every `runEvery`-th key holds a run of 30 `a`s (where `(?:a+)+$` runs away).
    static func fill(_ fixture: StoreFixture, count: Int, runEvery: Int) async throws {
        for start in stride(from: 0, to: count, by: 10_000) {
            for i in start..<min(count, start + 10_000) {
                let q = i % runEvery == 0 ? String(repeating: "a", count: 30) + "!\(i)" : "x\(i)"
                fixture.store.store(makeEntry(key: "\(base)\(q) v=1", bodyText: "{}"))
            }
            try await fixture.flush()
        }
    }

    /// Stores `count` new entries one by one, each committed, while something else runs.
    static func storeMeanwhile(_ fixture: StoreFixture, count: Int) async throws {
        for i in 0..<count {
            fixture.store.store(makeEntry(key: "GET https://api.example.com/api/fresh?n=\(i) v=1", bodyText: "{}"))
            try await fixture.flush()
        }
    }

    @Test("a runaway pattern over 100,000 entries is refused naming the limit, removes nothing, and the writer stores meanwhile")
    func runawayPatternOverAFullCache() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"), maxBytes: 512 << 20)
        let store = fixture.store
        try await Self.fill(fixture, count: 100_000, runEvery: 1_000)
        #expect(store.entryCount == 100_000)
        let scan = Task { () -> KeyPatternError? in
            do {
                _ = try await store.invalidate(matching: KeyPattern("(?:a+)+$"))
                return nil
            } catch {
                return error as? KeyPatternError
            }
        }
        try await Self.storeMeanwhile(fixture, count: 50)
        let refused = try await bounded("the refusal", seconds: 10) { await scan.value }
        #expect(refused == .limitExceeded("the match limit (1000000 steps)"))
        #expect(store.entryCount == 100_050)
        let runs = try await bounded("entries") { try await store.entries(pattern: KeyPattern("a{30}!"), limit: 1_000, cursor: nil) }
        #expect(runs.entries.count == 100)
        try await fixture.finish()
    }

    @Test("a pattern over 100,000 entries removes what it matches, in slices, while stores go on")
    func largeInvalidationWhileStoring() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"), maxBytes: 512 << 20)
        let store = fixture.store
        try await Self.fill(fixture, count: 100_000, runEvery: 4)
        let scan = Task { try await store.invalidate(matching: KeyPattern(#"\?q=x\d+ "#)) }
        try await Self.storeMeanwhile(fixture, count: 50)
        let removed = try await bounded("the invalidation", seconds: 20) { try await scan.value }
        #expect(removed == 75_000)
        try await fixture.flush()
        #expect(store.entryCount == 25_050)
        let left = try await bounded("entries") { try await store.entries(pattern: KeyPattern("q=x"), limit: 10, cursor: nil) }
        #expect(left.entries.isEmpty)
        let fresh = try await bounded("entries") { try await store.entries(pattern: KeyPattern("/fresh"), limit: 100, cursor: nil) }
        #expect(fresh.entries.count == 50)
        try await fixture.finish()
    }

    @Test("a scan past its deadline is refused and removes nothing")
    func deadlinePassedRemovesNothing() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"))
        let store = fixture.store
        try await Self.fill(fixture, count: 100, runEvery: 10)
        await #expect(throws: KeyPatternError.deadlineExceeded(CacheStore.patternScanLimit, keysScanned: 0)) {
            try await store.invalidate(matching: KeyPattern("q="), within: .zero)
        }
        #expect(store.entryCount == 100)
        #expect(store.hotLookup("\(Self.base)x1 v=1") != nil)
        try await fixture.finish()
    }
}
