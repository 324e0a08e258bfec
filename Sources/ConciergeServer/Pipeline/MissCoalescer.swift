import ConciergeCore
import Synchronization

/// Concurrent misses on one key make one upstream call; the others wait for its result
/// (coalescing). The first caller does the work inline (no extra task); callers that
/// arrive while it runs are parked and handed the same result. A miss answered by callbacks
/// on an event loop leads with ``lead(_:)`` and ends with ``hand(_:_:)``.
///
/// - Important: a leader cancelled mid-call (a `fail_fast` batch) hands its cancelled
///   result to the waiters too.
final class MissCoalescer<Result: Sendable>: Sendable {
    /// By key, hashed once (``HashedKey``).
    private let waiters = Mutex<[HashedKey: [CheckedContinuation<Result?, Never>]]>([:])

    /// - Parameter trace: a traced request's wait is a span of its own (`coalesced wait`).
    nonisolated(nonsending) func run(key text: String, trace: RequestTrace? = nil,
                                     _ work: nonisolated(nonsending) @Sendable () async -> Result) async -> Result {
        let key = HashedKey(text)
        // The usual case, no one on this key: lead without suspending.
        if !lead(key) {
            let waitStarted = ContinuousClock.now
            defer { trace?.record("coalesced wait", since: waitStarted) }
            let shared: Result? = await withCheckedContinuation { continuation in
                let joined = waiters.withLock { map -> Bool in
                    guard map[key] != nil else {
                        // The leader finished meanwhile: lead.
                        map[key] = []
                        return false
                    }
                    map[key]!.append(continuation)
                    return true
                }
                if !joined { continuation.resume(returning: nil) }
            }
            if let shared { return shared }
        }
        let result = await work()
        hand(key, result)
        return result
    }

    /// Leads `key` without waiting; `false` when another request is fetching it.
    func lead(_ key: HashedKey) -> Bool {
        waiters.withLock { map -> Bool in
            // One hash of the key in the usual case: put an empty list, and put back the one
            // it replaced if another request leads already.
            guard let led = map.updateValue([], forKey: key) else { return true }
            map[key] = led
            return false
        }
    }

    /// The requests waiting on `key` (for tests).
    func waiting(on key: String) -> Int { waiters.withLock { $0[HashedKey(key)]?.count ?? 0 } }

    /// Ends a lead: the requests waiting on `key` get `result` (`nil`: each fetches on its own).
    func hand(_ key: HashedKey, _ result: Result?) {
        let parked = waiters.withLock { $0.removeValue(forKey: key) ?? [] }
        for waiter in parked { waiter.resume(returning: result) }
    }
}
