@testable import ConciergeStorage
import ConciergeCore
import Foundation
import Logging
import NIOCore
import Synchronization
import Testing

@Suite("HotTier")
struct HotTierTests {
    @Test("the entry helper builds entries of the exact requested size")
    func entrySize() {
        #expect(makeEntry(key: "k1", size: 1000).size == 1000)
        #expect(makeEntry(key: "k1", size: 1000, headers: [("Content-Type", "application/json")]).size == 1000)
    }

    @Test("an entry is a value: a copy changed (a head attached in the tier, a field set) leaves the others as they were")
    func entryIsAValue() {
        let hot = HotTier(capacityBytes: 10_000)
        let original = makeEntry(key: "a", size: 1000, ttl: 60)
        hot.put(original)
        var copy = original
        copy.ttl = 5
        copy.tags = ["t"]
        copy.body = ByteBuffer(string: "changed")
        #expect(original.ttl == 60 && original.tags.isEmpty && original.size == 1000)
        #expect(copy.ttl == 5 && copy.tags == ["t"] && copy.body == ByteBuffer(string: "changed"))
        hot.attach(CacheEntry.Attachment(bytes: ByteBuffer(string: "HTTP/1.1 200 OK\r\n"), value: 0), to: original)
        #expect(hot.get("a")?.attachment != nil, "the tier's entry has its head")
        #expect(original.attachment == nil && copy.attachment == nil, "the caller's entries do not")
        #expect(hot.get("a")?.ttl == 60)
    }

    @Test("put and get round-trip; count and bytes follow")
    func putGet() {
        let hot = HotTier(capacityBytes: 10_000)
        hot.put(makeEntry(key: "a", size: 1000))
        hot.put(makeEntry(key: "b", size: 2000))
        #expect(hot.count == 2)
        #expect(hot.bytes == 3000)
        #expect(hot.get("a")?.key == "a")
        #expect(hot.get("b")?.size == 2000)
        #expect(hot.get("c") == nil)
    }

    @Test("replacing a key keeps one entry and accounts only the new size")
    func replace() {
        let hot = HotTier(capacityBytes: 10_000)
        hot.put(makeEntry(key: "a", size: 1000))
        hot.put(makeEntry(key: "a", size: 3000))
        #expect(hot.count == 1)
        #expect(hot.bytes == 3000)
        #expect(hot.get("a")?.size == 3000)
    }

    @Test("over the byte budget the least recently put entries go first")
    func lruEviction() {
        let hot = HotTier(capacityBytes: 3000)
        hot.put(makeEntry(key: "k1", size: 1000))
        hot.put(makeEntry(key: "k2", size: 1000))
        hot.put(makeEntry(key: "k3", size: 1000))
        #expect(hot.count == 3)
        hot.put(makeEntry(key: "k4", size: 1000))
        #expect(hot.get("k1") == nil)
        #expect(hot.get("k2") != nil && hot.get("k3") != nil && hot.get("k4") != nil)
        #expect(hot.bytes == 3000)
    }

    @Test("get marks an entry recently used, so it outlives entries put after it")
    func getMarksRecentlyUsed() {
        let hot = HotTier(capacityBytes: 3000)
        hot.put(makeEntry(key: "k1", size: 1000))
        hot.put(makeEntry(key: "k2", size: 1000))
        hot.put(makeEntry(key: "k3", size: 1000))
        #expect(hot.get("k1") != nil)  // k1 is now the most recent; k2 the least
        hot.put(makeEntry(key: "k4", size: 1000))
        #expect(hot.get("k2") == nil)
        #expect(hot.get("k1") != nil)
        // Now k3 is the least recently used.
        hot.put(makeEntry(key: "k5", size: 1000))
        #expect(hot.get("k3") == nil)
        #expect(hot.get("k1") != nil)
        #expect(hot.get("k4") != nil)
        #expect(hot.get("k5") != nil)
    }

    @Test("a big entry evicts as many old entries as needed")
    func bigEntryEvictsSeveral() {
        let hot = HotTier(capacityBytes: 3000)
        for i in 1...3 { hot.put(makeEntry(key: "k\(i)", size: 1000)) }
        hot.put(makeEntry(key: "big", size: 2500))
        #expect(hot.count == 1)
        #expect(hot.get("big") != nil)
        #expect(hot.bytes == 2500)
    }

    @Test("an entry larger than the whole budget is not kept, and drops an older value of its key")
    func tooLarge() {
        let hot = HotTier(capacityBytes: 1000)
        hot.put(makeEntry(key: "a", size: 500))
        hot.put(makeEntry(key: "b", size: 500))
        hot.put(makeEntry(key: "a", size: 5000))
        #expect(hot.get("a") == nil)
        #expect(hot.get("b") != nil)
        #expect(hot.bytes == 500)
    }

    @Test("a zero budget keeps nothing")
    func zeroBudget() {
        let hot = HotTier(capacityBytes: 0)
        hot.put(makeEntry(key: "a", size: 100))
        #expect(hot.count == 0)
        #expect(hot.get("a") == nil)
    }

    @Test("remove(key) drops one entry; removed slots are reused correctly")
    func removeKey() {
        let hot = HotTier(capacityBytes: 10_000)
        for i in 1...5 { hot.put(makeEntry(key: "k\(i)", size: 1000)) }
        hot.remove("k3")
        hot.remove("nope")
        #expect(hot.count == 4)
        #expect(hot.bytes == 4000)
        #expect(hot.get("k3") == nil)
        hot.put(makeEntry(key: "k6", size: 1000))
        hot.put(makeEntry(key: "k7", size: 1000))
        #expect(hot.count == 6)
        for key in ["k1", "k2", "k4", "k5", "k6", "k7"] { #expect(hot.get(key)?.key == key) }
    }

    private func seeded() -> HotTier {
        let hot = HotTier(capacityBytes: 100_000)
        hot.put(makeEntry(key: "GET https://api.example.com/api/items?page=1 v=1", endpoint: "itemList"))
        hot.put(makeEntry(key: "GET https://api.example.com/api/items?page=2 v=1", endpoint: "itemList"))
        hot.put(makeEntry(key: "GET https://api.example.com/api/items?page=1 user=1 v=1", endpoint: "itemList", user: "1"))
        hot.put(makeEntry(key: "GET https://api.example.com/api/user/info user=1 v=1", endpoint: "userInfo", user: "1"))
        hot.put(makeEntry(key: "GET https://api.example.com/api/user/info user=2 v=1", endpoint: "userInfo", user: "2"))
        return hot
    }

    @Test("remove(where: .endpoints) honours everyone / sharedOnly / sharedAnd(user)")
    func removeByEndpoint() {
        var hot = seeded()
        #expect(hot.remove(where: .endpoints(["userInfo"], scope: .everyone)).count == 2)
        #expect(hot.count == 3)

        hot = seeded()
        let shared = hot.remove(where: .endpoints(["itemList", "userInfo"], scope: .sharedOnly))
        #expect(Set(shared) == ["GET https://api.example.com/api/items?page=1 v=1", "GET https://api.example.com/api/items?page=2 v=1"])

        hot = seeded()
        let mine = hot.remove(where: .endpoints(["itemList", "userInfo"], scope: .sharedAnd("1")))
        #expect(mine.count == 4)
        #expect(hot.count == 1)
        #expect(hot.get("GET https://api.example.com/api/user/info user=2 v=1") != nil)
    }

    @Test("remove(where: .user) drops only that user's entries")
    func removeByUser() {
        let hot = seeded()
        let removed = hot.remove(where: .user("1"))
        #expect(Set(removed) == ["GET https://api.example.com/api/items?page=1 user=1 v=1",
                                 "GET https://api.example.com/api/user/info user=1 v=1"])
        #expect(hot.count == 3)
    }

    @Test("removeKeys(matching:) runs the pattern as an unanchored search over keys")
    func removeByPattern() throws {
        let hot = seeded()
        let before = hot.count
        try hot.removeKeys(matching: KeyPattern("page=1"), until: .now + .seconds(10))
        #expect(hot.count == before - 2)
        #expect(hot.get("GET https://api.example.com/api/items?page=2 v=1") != nil)
        let remaining = ["GET https://api.example.com/api/items?page=2 v=1", "GET https://api.example.com/api/user/info user=1 v=1",
                         "GET https://api.example.com/api/user/info user=2 v=1"]
        #expect(hot.bytes == remaining.reduce(0) { $0 + makeEntry(key: $1).size })
        // Criteria never match a pattern: patterns go through removeKeys(matching:).
        #expect(hot.remove(where: .pattern("page")).isEmpty)
    }

    @Test("remove(where: .all) and removeAll empty the tier")
    func removeAll() {
        let hot = seeded()
        #expect(hot.remove(where: .all).count == 5)
        #expect(hot.count == 0)
        #expect(hot.bytes == 0)
        let other = seeded()
        other.removeAll()
        #expect(other.count == 0 && other.bytes == 0)
        other.put(makeEntry(key: "again", size: 500))
        #expect(other.get("again") != nil)
    }

    @Test("concurrent puts and gets keep the tier within budget and consistent")
    func concurrency() async {
        let hot = HotTier(capacityBytes: 50_000)
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<8 {
                group.addTask {
                    for i in 0..<500 {
                        let key = "k\((t * 31 + i) % 200)"
                        if i % 3 == 0 { _ = hot.get(key) } else { hot.put(makeEntry(key: key, size: 1000)) }
                        if i % 50 == 0 { hot.remove(key) }
                    }
                }
            }
        }
        #expect(hot.bytes <= 50_000)
        #expect(hot.bytes == hot.count * 1000)
    }
}

/// The encoded head of a hot-tier entry is made by its first lookup, not when it is stored:
/// the store keeps what its user attaches (the proxy's first lookup of an entry,
/// `CachedReply.withEncodedHead`, which ``Encoder/lookup(_:_:now:)`` does as it does).
@Suite("Hot tier: heads encoded at the first lookup")
struct HotTierLazyHeadTests {
    /// Counts encodings; the head is 300 bytes of the key.
    final class Encoder: Sendable {
        let calls = Mutex(0)
        func encode(_ entry: CacheEntry) -> CacheEntry.Attachment {
            calls.withLock { $0 += 1 }
            return CacheEntry.Attachment(bytes: ByteBuffer(string: String(repeating: "h", count: 300)), value: 0)
        }

        /// A lookup as the proxy makes it: an entry found without an attachment gets one.
        func lookup(_ store: CacheStore, _ key: HashedKey, now: Double) -> CacheEntry? {
            guard var entry = store.hotLookup(key, now: now) else { return nil }
            guard entry.attachment == nil, store.keepsAttachments else { return entry }
            entry.attachment = encode(entry)
            store.attach(entry.attachment!, to: entry)
            return entry
        }
    }

    @Test("stored: no encoding; first lookup: encoded once and kept (the tier's bytes grow by its footprint); later lookups reuse it")
    func encodedOnce() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-lazyhead-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let encoder = Encoder()
        let store = try CacheStore(database: StorageDatabase(path: dir + "/c.sqlite", logger: quietLogger), maxBytes: 1 << 30,
                                   memoryBytes: 1 << 20, logger: quietLogger, keepsAttachments: true)
        let entry = makeEntry(key: "a", size: 1000)
        store.store(entry)
        #expect(encoder.calls.withLock { $0 } == 0, "a stored entry is not encoded")
        #expect(store.hot.bytes == 1000 + HotTier.allocationOverhead, "a stored entry: its size and its allocations")
        let first = encoder.lookup(store, HashedKey("a"), now: entry.storedAt)
        #expect(first?.attachment?.bytes.readableBytes == 300)
        #expect(encoder.calls.withLock { $0 } == 1)
        #expect(store.hot.bytes == store.hot.footprint(first!))
        #expect(store.hot.bytes == 1000 + HotTier.allocationOverhead + first!.attachment!.bytes.storageCapacity)
        for _ in 0..<3 { #expect(encoder.lookup(store, HashedKey("a"), now: entry.storedAt)?.attachment != nil) }
        #expect(encoder.calls.withLock { $0 } == 1, "later lookups reuse the head")
    }

    @Test("a head is attached only to the entry it was made for, and room is made for it by the least recently used")
    func attachChecksAndEvicts() {
        let hot = HotTier(capacityBytes: 2200)
        let old = makeEntry(key: "a", size: 1000, storedAt: 100)
        hot.put(old)
        hot.put(makeEntry(key: "a", size: 1000, storedAt: 200))
        let head = CacheEntry.Attachment(bytes: ByteBuffer(string: String(repeating: "h", count: 200)), value: 0)
        hot.attach(head, to: old)
        #expect(hot.get("a")?.attachment == nil, "the entry stored since is not given the old one's head")
        #expect(hot.bytes == 1000)

        hot.put(makeEntry(key: "b", size: 1000))
        let current = hot.get("a")!  // "a" is now the most recently used
        hot.attach(head, to: current)
        #expect(hot.get("a")?.attachment != nil)
        #expect(hot.get("b") == nil, "the least recently used left to make room for the head's footprint")
        #expect(hot.bytes == hot.footprint(hot.get("a")!))
        #expect(hot.bytes <= hot.capacityBytes)
    }
}
