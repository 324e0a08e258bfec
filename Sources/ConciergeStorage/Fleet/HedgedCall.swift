import Synchronization

/// A short call to PostgreSQL (a ping) asked again rather than waited on. The client's pool may
/// lend a connection whose end it has not noticed yet (its backend just terminated): a call on
/// it fails at once, or is never answered. So a call that failed with a `retryable` error (its
/// connection lost) is made again at once, and one without an answer after `askAgainAfter` is
/// made again beside it (on another connection, the first one being lent); the first answer
/// counts, at most `tries` calls are made, and the caller never waits past `limit`
/// (``Deadline/Exceeded``).
public enum HedgedCall {
    public static func run(within limit: Duration, askAgainAfter: Duration, tries: Int = 3,
                           retryable: @escaping @Sendable (any Error) -> Bool = FleetDatabase.connectionLost,
                           _ call: @escaping @Sendable () async throws -> Void) async throws {
        try await Deadline.run(limit) {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let calls = Calls(continuation, tries: tries)
                @Sendable func ask() {
                    guard calls.start() else { return }
                    Task {
                        do {
                            try await call()
                            calls.answered()
                        } catch {
                            if calls.failed(error, retryable: retryable(error)) { ask() }
                        }
                    }
                }
                ask()
                Task {
                    try? await Task.sleep(for: askAgainAfter)
                    ask()
                }
            }
        }
    }

    /// The calls made so far and the caller's continuation, resumed once.
    private final class Calls: Sendable {
        private struct State {
            var continuation: CheckedContinuation<Void, any Error>?
            var made = 0
            var pending = 0
        }
        private let state: Mutex<State>
        private let tries: Int
        init(_ continuation: CheckedContinuation<Void, any Error>, tries: Int) {
            state = Mutex(State(continuation: continuation))
            self.tries = tries
        }

        /// Whether one more call may be made (none answered yet, tries left); counts it.
        func start() -> Bool {
            state.withLock { s in
                guard s.continuation != nil, s.made < tries else { return false }
                s.made += 1
                s.pending += 1
                return true
            }
        }

        /// A call answered: the caller's answer, unless another call answered first.
        func answered() {
            state.withLock { s in
                s.pending -= 1
                return s.continuation.take()
            }?.resume()
        }

        /// A call failed: whether to make another. A failure that is not `retryable`, or the
        /// last one with no tries left, is the caller's answer.
        func failed(_ error: any Error, retryable: Bool) -> Bool {
            let (again, continuation) = state.withLock { s -> (Bool, CheckedContinuation<Void, any Error>?) in
                s.pending -= 1
                guard s.continuation != nil else { return (false, nil) }
                if retryable && s.made < tries { return (true, nil) }
                if !retryable || s.pending == 0 { return (false, s.continuation.take()) }
                return (false, nil)
            }
            continuation?.resume(throwing: error)
            return again
        }
    }
}
