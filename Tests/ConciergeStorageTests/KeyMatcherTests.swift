@testable import ConciergeStorage
import Testing

/// The invalidation matcher: POSIX fast path only where it means the same as ICU.
@Suite("KeyMatcher")
struct KeyMatcherTests {
    @Test("portable patterns use regexec; ICU-only constructs fall back", arguments: [
        ("limit=[0-2]&", true), ("^GET .*/api/items\\?", true), ("user=(alice|bob) ", true), ("n=1[0-9]*5 ", true),
        ("a{2,3}", true), ("\\d+", false), ("(?i)items", false), ("a+?", false), ("[\\w]", false), ("[[:digit:]]", false),
("é", false), ("\\bitems", false),
    ])
    func portability(pattern: String, portable: Bool) throws {
        #expect(KeyMatcher.isPortable(pattern) == portable)
        #expect(try KeyMatcher(pattern).usesPOSIX == portable)
    }

    @Test("both engines agree on unanchored search", arguments: [
        "limit=[0-2]&", "^GET ", "v=1$", "user=(alice|bob) ", "\\d{2}", "(?i)API/ITEMS", "items\\?a", "x*",
    ])
    func agreement(pattern: String) throws {
        let keys = ["GET https://api.example.com/api/items?a=1&limit=1& v=1", "GET https://x/api/user/info user=alice v=1",
                    "POST https://x/api/items?limit=22 user=bob v=2", "GET https://x/other v=1"]
        let matcher = try KeyMatcher(pattern)
        let icu = try ConciergeCore.RegexBox(pattern)
        for key in keys {
            #expect(matcher.matches(key) == icu.firstMatch(in: key), "\(pattern) on \(key)")
            #expect(key.withCString { matcher.matches(cString: $0) } == icu.firstMatch(in: key))
        }
    }
}

import ConciergeCore

import Foundation
import Logging
import NIOCore

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
            store.store(CacheEntry(key: "GET http://x/api/items?n=\(i) v=1", endpoint: "items", userID: nil, status: 200, headers: [],
                                   body: ByteBuffer(string: "{}"), storedAt: now, ttl: 3600, staleWhileRevalidate: 0, staleIfError: 0, version: 1))
        }
        await store.flush()
        store.hot.removeAll()
        let removed = try await store.invalidate(.pattern("n=[0-9]*[02468] "))
        #expect(removed == (total + 1) / 2)
        #expect(store.entryCount == total - removed)
        #expect(await store.lookup("GET http://x/api/items?n=4 v=1") == nil)
        #expect(await store.lookup("GET http://x/api/items?n=5 v=1") != nil)
        let listed = try await store.entries(pattern: nil, limit: 100_000, cursor: nil)
        #expect(listed.entries.count == total - removed)
        var rows = 0
        for _ in 0..<200 {
            rows = try await database.pool.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM cache_entry") ?? 0 }
            if rows == total - removed { break }
            try await Task.sleep(for: .milliseconds(25))
        }
        #expect(rows == total - removed)
        store.finish()
        await writer.value
    }
}
