import ConciergeStorage
import Foundation
import Synchronization

extension FleetSession {
    /// One try for the fleet row's lock: abandoned by its caller unless it got the lock (or
    /// failed) in time.
    final class LockAttempt: Sendable {
        struct Unanswered: Error, CustomStringConvertible {
            var description: String { "the try for the fleet's lock got no answer" }
        }

        private enum State { case waiting, locked, abandoned }
        private let state = Mutex(State.waiting)

        /// Called with the lock held: whether the try may go on (it was not abandoned).
        func claim() -> Bool {
            state.withLock { s in
                guard s == .waiting else { return false }
                s = .locked
                return true
            }
        }

        /// Abandons the try unless it holds the lock; whether it was abandoned.
        func abandon() -> Bool {
            state.withLock { s in
                guard s == .waiting else { return false }
                s = .abandoned
                return true
            }
        }

        /// Runs `body`; throws ``Unanswered`` when it has neither got the lock nor ended within
        /// `unanswered`, and ``Deadline/Exceeded`` when it has not ended within `total`. Neither
        /// waits for a `body` that never answers (it is cancelled and left behind).
        func run<T: Sendable>(unanswered: Duration, total: Duration, _ body: @escaping @Sendable () async throws -> T?) async throws -> T {
            try await Deadline.run(total) {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                    let waiting = Answer(continuation)
                    let work = Task {
                        let result: Result<T, any Error>
                        do {
                            // `nil`: it got the lock after it was abandoned (answered already).
                            guard let value = try await body() else { throw Unanswered() }
                            result = .success(value)
                        } catch {
                            result = .failure(error)
                        }
                        waiting.take()?.resume(with: result)
                    }
                    Task {
                        try? await Task.sleep(for: unanswered)
                        guard self.abandon(), let continuation = waiting.take() else { return }
                        work.cancel()
                        continuation.resume(throwing: Unanswered())
                    }
                }
            }
        }
    }

    /// A caller's continuation, resumed once by whichever comes first.
    fileprivate final class Answer<T: Sendable>: Sendable {
        private let continuation: Mutex<CheckedContinuation<T, any Error>?>
        init(_ continuation: CheckedContinuation<T, any Error>) { self.continuation = Mutex(continuation) }
        func take() -> CheckedContinuation<T, any Error>? { continuation.withLock { $0.take() } }
    }
}
