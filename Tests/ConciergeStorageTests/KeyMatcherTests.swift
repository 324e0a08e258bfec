@testable import ConciergeStorage
import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Testing

/// Large regex invalidations answer once the rows are unreachable; rows go in the background.
@Suite("Large invalidation")
struct LargeInvalidationTests {
    @Test("more than the inline limit of matches: removed count exact, entries unreachable at once, rows deleted soon after")
    func backgroundDelete() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-large-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let logger = Logger(label: "test")
        let database = try StorageDatabase(path: dir + "/c.sqlite", logger: logger)
        let store = try CacheStore(database: database, maxBytes: 1 << 30, memoryBytes: 1 << 20, logger: logger)
        let writer = Task { await store.run() }
        let now = Date().timeIntervalSince1970
        let total = CacheStore.inlineDeleteLimit * 2 + 10
        for i in 0..<total {
            store.store(CacheEntry(key: "GET http://x/api/items?n=\(i) v=1", endpoint: "items", userID: nil, status: 200, headers: HTTPHeaders(),
                                   body: ByteBuffer(string: "{}"), storedAt: now, ttl: 3600, staleWhileRevalidate: 0, staleIfError: 0, version: 1))
        }
        await store.flush()
        store.hot.removeAll()
        // The scan's 10 s limit is not what this test is about: with both cores loaded by the
        // rest of the suite it was once reached before the first slice.
        let removed = try await store.invalidate(matching: KeyPattern("n=[0-9]*[02468] "), within: .seconds(120))
        #expect(removed == (total + 1) / 2)
        #expect(store.entryCount == total - removed)
        #expect(await store.lookup("GET http://x/api/items?n=4 v=1") == nil)
        #expect(await store.lookup("GET http://x/api/items?n=5 v=1") != nil)
        let listed = try await store.entries(pattern: nil, limit: 100_000, cursor: nil)
        #expect(listed.entries.count == total - removed)
        var rows = 0
        for _ in 0..<2_400 {  // at most a minute
            rows = try await database.pool.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM cache_entry") ?? 0 }
            if rows == total - removed { break }
            try await Task.sleep(for: .milliseconds(25))
        }
        #expect(rows == total - removed)
        store.finish()
        await writer.value
    }
}
