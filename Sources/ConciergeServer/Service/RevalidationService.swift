import Foundation
import ServiceLifecycle
import Synchronization

/// Stale-while-revalidate refreshes, run as child tasks of this service's task group: none
/// outlives the service, and the service group stops it before the cache writer, so a
/// refresh never stores into a stopped writer.
///
/// At most one refresh per cache key is in flight (``submit(key:_:)`` refuses a second). On
/// graceful shutdown no new refresh starts; those in flight finish (each bounded by its
/// endpoint's timeout).
final class RevalidationService: Service, Sendable {
    typealias Refresh = @Sendable () async -> Void

    private let queue: AsyncStream<Refresh>
    private let input: AsyncStream<Refresh>.Continuation
    private let inFlight = Mutex<Set<String>>([])

    init() {
        (queue, input) = AsyncStream.makeStream(of: Refresh.self)
    }

    /// Starts `refresh` for `key` unless one is already in flight; whether it was taken.
    @discardableResult
    func submit(key: String, _ refresh: @escaping Refresh) -> Bool {
        guard inFlight.withLock({ $0.insert(key).inserted }) else { return false }
        let job: Refresh = { [self] in
            await refresh()
            _ = self.inFlight.withLock { $0.remove(key) }
        }
        if case .enqueued = input.yield(job) { return true }
        _ = inFlight.withLock { $0.remove(key) }
        return false
    }

    /// Keys whose refresh is queued or running.
    var pendingKeys: Set<String> { inFlight.withLock { $0 } }

    /// No refresh starts from now on (graceful shutdown).
    func stopTakingRefreshes() {
        input.finish()
    }

    func run() async throws {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await refresh in queue {
                    group.addTask { await refresh() }
                }
            }
        } onGracefulShutdown: {
            self.stopTakingRefreshes()
        }
    }
}
