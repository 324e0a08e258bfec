@testable import ConciergeStorage
import Foundation
import Testing

/// The writer's own thread and its group commit: with a window of an hour, only what is meant
/// to end the wait can make these tests pass within their bounds.
@Suite("Cache writer thread")
struct CacheWriterThreadTests {
    static let hour = Duration.seconds(3600)

    @Test("a flush ends the group commit's wait: the queued put is committed and counted")
    func flushEndsTheWait() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"), groupCommitDelay: Self.hour)
        fixture.store.store(makeEntry(key: "GET /a"))
        try await fixture.flush()
        #expect(fixture.store.entryCount == 1)
        try await fixture.finish()
    }

    @Test("an invalidation ends the wait, and the puts queued before it commit in its batch")
    func invalidationEndsTheWait() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"), groupCommitDelay: Self.hour)
        let store = fixture.store
        store.store(makeEntry(key: "GET /a", endpoint: "itemList"))
        store.store(makeEntry(key: "GET /b", endpoint: "itemList"))
        store.store(makeEntry(key: "GET /c", endpoint: "userInfo"))
        let removed = try await bounded("invalidate") { try await store.invalidate(.endpoints(["userInfo"], scope: .everyone)) }
        #expect(removed == 1)
        #expect(store.entryCount == 2)
        try await fixture.finish()
    }

    @Test("a full batch of puts ends the wait without a flush")
    func fullBatchEndsTheWait() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fixture = try StoreFixture(path: dir.path("cache.sqlite"), memoryBytes: 64 << 20, groupCommitDelay: Self.hour)
        let store = fixture.store
        for n in 0..<CacheWriter.groupCommitSize { store.store(makeEntry(key: "GET /items?n=\(n)")) }
        // Nothing else is queued: only the batch's size can end the hour's wait.
        try await bounded("a full batch committed") {
            while store.entryCount < CacheWriter.groupCommitSize { try await Task.sleep(for: .milliseconds(5)) }
        }
        #expect(store.entryCount == CacheWriter.groupCommitSize)
        try await fixture.finish()
    }

    @Test("finish during the wait commits what is queued, and the thread ends")
    func finishCommitsQueued() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        do {
            let fixture = try StoreFixture(path: path, groupCommitDelay: Self.hour)
            for n in 0..<3 { fixture.store.store(makeEntry(key: "GET /items?n=\(n)")) }
            try await fixture.finish()
        }
        let reopened = try StoreFixture(path: path)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        #expect(reopened.store.entryCount == 3)
        try await reopened.finish()
    }

    @Test("cancelling the writer's task ends its thread after committing what is queued")
    func cancellationEndsTheThread() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("cache.sqlite")
        do {
            let database = try StorageDatabase(path: path, logger: quietLogger)
            let store = try CacheStore(database: database, maxBytes: 64 << 20, memoryBytes: 8 << 20, logger: quietLogger, keepsAttachments: false,
                                       clock: .system, groupCommitDelay: Self.hour)
            let writer = Task { await store.run() }
            store.store(makeEntry(key: "GET /a"))
            store.store(makeEntry(key: "GET /b"))
            writer.cancel()
            try await bounded("writer task end") { await writer.value }
        }
        let reopened = try StoreFixture(path: path)
        try await bounded("index loaded") { await reopened.store.indexLoaded() }
        #expect(reopened.store.entryCount == 2)
        try await reopened.finish()
    }
}
