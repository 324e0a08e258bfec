@testable import ConciergeServer
import Synchronization
import Testing

/// ``RevalidationService``: refreshes run as its child tasks, one per key at a time, and none
/// starts once it has stopped.
@Suite("Revalidation service")
struct RevalidationServiceTests {
    @Test("a refresh runs in the service's task group; a second one for the same key is refused while the first runs")
    func oneRefreshPerKey() async throws {
        let service = RevalidationService()
        let running = Task { try await service.run() }
        let (started, startedInput) = AsyncStream.makeStream(of: String.self)
        let (release, releaseInput) = AsyncStream.makeStream(of: Void.self)
        #expect(service.submit(key: "k") {
            startedInput.yield("k")
            for await _ in release { break }
        })
        var iterator = started.makeAsyncIterator()
        #expect(await iterator.next() == "k")
        #expect(!service.submit(key: "k") {}, "one refresh per key in flight")
        #expect(service.pendingKeys == ["k"])
        releaseInput.yield()
        let done = Mutex(false)
        let (finished, finishedInput) = AsyncStream.makeStream(of: Void.self)
        // Once the first is done, the key takes a new refresh.
        for _ in 0..<1000 where !done.withLock({ $0 }) {
            if service.submit(key: "k", { finishedInput.yield() }) { done.withLock { $0 = true } } else { await Task.yield() }
        }
        #expect(done.withLock { $0 })
        var finishedIterator = finished.makeAsyncIterator()
        _ = await finishedIterator.next()
        running.cancel()
        _ = try? await running.value
    }

    @Test("after the service stopped, a refresh is refused and its key left free")
    func refusedAfterStop() async throws {
        let service = RevalidationService()
        let running = Task { try await service.run() }
        running.cancel()
        _ = try? await running.value
        // The stream ended with the run loop's cancellation only if it was iterating; finish it as shutdown does.
        service.stopTakingRefreshes()
        #expect(!service.submit(key: "k") {})
        #expect(service.pendingKeys.isEmpty)
    }
}
