/// A short call to PostgreSQL (a ping) asked again rather than waited on. The client's pool may
/// lend a connection whose end it has not noticed yet (its backend just terminated): a call on
/// it fails at once, or is never answered. So a call that failed with a `retryable` error (its
/// connection lost) is made again at once, and one without an answer after `askAgainAfter` is
/// made again beside it (on another connection, the first one being lent); the first answer
/// counts, at most `tries` calls are made, and the caller never waits past `limit`
/// (``Deadline/Exceeded``). The calls are a task group run under ``Deadline``, which answers
/// the caller as soon as one call does and leaves behind the calls never answered.
public enum HedgedCall {
    private enum Event: Sendable {
        case answered
        case failed(any Error)
        /// `askAgainAfter` has passed.
        case hedge
    }

    public static func run(within limit: Duration, askAgainAfter: Duration, tries: Int = 3,
                           retryable: @escaping @Sendable (any Error) -> Bool = FleetDatabase.connectionLost,
                           _ call: @escaping @Sendable () async throws -> Void) async throws {
        try await Deadline.run(limit, clock: ContinuousClock()) { (answer: Deadline.Answer<Void>) in
            await withTaskGroup(of: Event.self) { group in
                @Sendable func ask() async -> Event {
                    do {
                        try await call()
                        return .answered
                    } catch {
                        return .failed(error)
                    }
                }
                var (made, pending) = (1, 1)
                group.addTask { await ask() }
                group.addTask {
                    try? await Task.sleep(for: askAgainAfter)
                    return .hedge
                }
                while let event = await group.next() {
                    let again: Bool
                    switch event {
                    case .hedge:
                        again = made < tries
                    case .answered:
                        answer.send(.success(()))
                        again = false
                    case .failed(let error):
                        pending -= 1
                        again = retryable(error) && made < tries
                        if !again && (!retryable(error) || pending == 0) { answer.send(.failure(error)) }
                    }
                    if answer.answered {
                        group.cancelAll()
                        return
                    }
                    if again {
                        made += 1
                        pending += 1
                        group.addTask { await ask() }
                    }
                }
            }
        }
    }
}
