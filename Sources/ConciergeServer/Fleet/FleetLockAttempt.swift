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
        /// waits for a `body` that never answers (it is cancelled and left behind, ``Deadline``).
        func run<T: Sendable>(unanswered: Duration, total: Duration, _ body: @escaping @Sendable () async throws -> T?) async throws -> T {
            try await Deadline.run(total, clock: ContinuousClock()) { (answer: Deadline.Answer<T>) in
                await withTaskGroup(of: Bool.self) { group in
                    group.addTask {
                        do {
                            // `nil`: it got the lock after it was abandoned (answered already).
                            guard let value = try await body() else { throw Unanswered() }
                            answer.send(.success(value))
                        } catch {
                            answer.send(.failure(error))
                        }
                        return true
                    }
                    group.addTask {
                        guard (try? await Task.sleep(for: unanswered)) != nil, self.abandon() else { return false }
                        answer.send(.failure(Unanswered()))
                        return true
                    }
                    // Until the try ends or is abandoned (a try holding the lock runs on).
                    while let decided = await group.next(), !decided {}
                    group.cancelAll()
                }
            }
        }
    }
}
