import Synchronization

/// Concurrent misses on one key make one upstream call; the others wait for its result
/// (coalescing). The first caller does the work inline (no extra task); callers that
/// arrive while it runs are parked and handed the same result.
///
/// - Important: a leader cancelled mid-call (a `fail_fast` batch) hands its cancelled
///   result to the waiters too.
final class MissCoalescer<Result: Sendable>: Sendable {
    private let waiters = Mutex<[String: [CheckedContinuation<Result?, Never>]]>([:])

    func run(key: String, _ work: @Sendable () async -> Result) async -> Result {
        let shared: Result? = await withCheckedContinuation { continuation in
            let joined = waiters.withLock { map -> Bool in
                if map[key] != nil {
                    map[key]!.append(continuation)
                    return true
                }
                map[key] = []
                return false
            }
            if !joined { continuation.resume(returning: nil) }
        }
        if let shared { return shared }
        let result = await work()
        let parked = waiters.withLock { $0.removeValue(forKey: key) ?? [] }
        for waiter in parked { waiter.resume(returning: result) }
        return result
    }
}
