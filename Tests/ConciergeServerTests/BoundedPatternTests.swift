import ConciergeCore
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// The admin API over a full cache: a pattern that would run away is refused with `422`
/// naming the limit, at once, while `/health` answers; one that does not compile is a `400`
/// with PCRE2's words.
@Suite("Bounded patterns")
struct BoundedPatternTests {
    /// 100,000 entries straight into the daemon's cache; every 1,000th key holds a run of 30 `a`s.
    static func fill(_ cache: CacheStore) async {
        for start in stride(from: 0, to: 100_000, by: 10_000) {
            for i in start..<(start + 10_000) {
                let q = i % 1_000 == 0 ? String(repeating: "a", count: 30) + "!\(i)" : "x\(i)"
                cache.store(CacheEntry(key: "GET http://127.0.0.1:1/api/items?q=\(q) v=1", endpoint: "itemList", userID: nil, status: 200,
                                       headers: HTTPHeaders(), body: .init(string: #"{"code":200}"#), storedAt: cache.clock.now, ttl: 600,
                                       staleWhileRevalidate: 0, staleIfError: 0, version: 1))
            }
            await cache.flush()
        }
    }

    @Test("runaway patterns over 100,000 entries: 422 naming the limit (invalidate and entries), /health answering meanwhile, nothing removed")
    func runawayPatternsAreRefused() async throws {
        try await ConciergeTestRig.with { rig in
            await Self.fill(rig.daemon.cache)
            #expect(rig.daemon.cache.entryCount == 100_000)
            let health = Task { () -> (statuses: Set<Int>, slowest: Duration) in
                var statuses = Set<Int>()
                var slowest = Duration.zero
                for _ in 0..<20 {
                    let began = ContinuousClock.now
                    statuses.insert((try? await rig.admin(.GET, "/health", token: nil))?.status ?? 0)
                    slowest = max(slowest, ContinuousClock.now - began)
                }
                return (statuses, slowest)
            }
            let began = ContinuousClock.now
            let invalidation = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": "(?:a+)+$"])
            let took = ContinuousClock.now - began
            #expect(invalidation.status == 422)
            #expect(invalidation.json?[path: "error"]?.stringValue?.contains("the match limit (1000000 steps)") == true, "\(invalidation.text)")
            #expect(took < .seconds(10))
            let listing = try await rig.admin(.GET, "/cache/entries?pattern=%28%3F%3Aa%2B%29%2B%24")
            #expect(listing.status == 422, "\(listing.text)")
            let nested = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": "((a{1,100}){1,100}){1,100}"])
            #expect(nested.status == 400)
            #expect(nested.json?[path: "error"] == "invalid regex: regular expression is too large at offset 26")
            let answered = await health.value
            #expect(answered.statuses == [200])
            print("bounded patterns: invalidation refused after \(took), slowest /health \(answered.slowest)")
            #expect(rig.daemon.cache.entryCount == 100_000)
            // A pattern within the limits still works over the same cache.
            let removed = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": "a{30}!"])
            #expect(removed.json?[path: "removed"] == 100)
        }
    }
}
