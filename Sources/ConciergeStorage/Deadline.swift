import Synchronization

/// A call with a deadline that cannot be cancelled underneath its caller: the caller is
/// answered by `limit` at the latest (``Exceeded``), whether or not the call heeds its
/// cancellation. A call to PostgreSQL may never answer (a frozen database, a connection cut
/// mid-call the client does not notice) and its client may ignore cancellation; a request, a
/// lock try or a heartbeat never waits on it longer than its deadline.
///
/// ``run(_:clock:answering:)`` is the one place such a call is left behind: the work runs in a
/// task of its own, cancelled at the deadline (it may still not end). ``race(_:clock:exceeded:_:)``
/// is the same deadline for work that ends when cancelled (an HTTP body read): a task group,
/// which waits for it.
public enum Deadline {
    public struct Exceeded: Error, CustomStringConvertible {
        public let limit: Duration
        public init(limit: Duration) { self.limit = limit }
        public var description: String { "PostgreSQL did not answer within \(limit)" }
    }

    /// The caller's one answer: the first ``send(_:)`` counts, later ones are dropped.
    public final class Answer<T: Sendable>: Sendable {
        private let continuation: Mutex<AsyncThrowingStream<T, any Error>.Continuation?>
        init(_ continuation: AsyncThrowingStream<T, any Error>.Continuation) { self.continuation = Mutex(continuation) }

        /// Answers the caller unless it was answered already. - Returns: whether the caller took
        /// this answer (`false`: answered before, or it stopped waiting: cancelled).
        @discardableResult
        public func send(_ result: Result<T, any Error>) -> Bool {
            guard let continuation = continuation.withLock({ $0.take() }) else { return false }
            switch result {
            case .success(let value):
                let taken = continuation.yield(value)
                continuation.finish()
                if case .enqueued = taken { return true }
                return false
            case .failure(let error):
                continuation.finish(throwing: error)
                return true
            }
        }

        var answered: Bool { continuation.withLock { $0 == nil } }
    }

    /// `work`'s result, or ``Exceeded`` once `limit` passes; `work` is then cancelled and left
    /// behind. A cancelled caller is answered at once (`CancellationError`) and its work goes on,
    /// still within `limit`.
    public static func run<T: Sendable>(_ limit: Duration, _ work: @escaping @Sendable () async throws -> T) async throws -> T {
        try await run(limit, clock: ContinuousClock()) { answer in
            do { answer.send(.success(try await work())) } catch { answer.send(.failure(error)) }
        }
    }

    /// The caller's answer as `work` gives it through ``Answer``, possibly before it ends (the
    /// first of hedged calls to answer), or ``Exceeded`` once `limit` passes on `clock`. Past
    /// the limit `work` is cancelled and left behind; work that ends without answering leaves
    /// its caller to the limit. A cancelled caller is answered at once (`CancellationError`) and
    /// its work goes on, still within `limit`.
    public static func run<T: Sendable, C: Clock>(_ limit: Duration, clock: C, answering work: @escaping @Sendable (Answer<T>) async -> Void)
        async throws -> T where C.Duration == Duration {
        let (answers, continuation) = AsyncThrowingStream.makeStream(of: T.self)
        let answer = Answer(continuation)
        // Unstructured because the work may never end and may ignore its cancellation (PostgreSQL's
        // client): a task group would hold the caller until it ends, past any deadline.
        Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await work(answer) }
                group.addTask {
                    guard (try? await clock.sleep(for: limit)) != nil else { return }
                    answer.send(.failure(Exceeded(limit: limit)))
                }
                _ = await group.next()
                // The work ended without answering: the caller is answered at the limit.
                if !answer.answered { _ = await group.next() }
                group.cancelAll()
            }
        }
        for try await value in answers { return value }
        throw CancellationError()
    }

    /// `work`'s result, or `exceeded()` thrown once `limit` passes on `clock`: a race in a task
    /// group, for work that ends when cancelled (the group waits for it to end).
    public static func race<T: Sendable, C: Clock>(_ limit: Duration, clock: C, exceeded: @escaping @Sendable () -> any Error,
                                                   _ work: @escaping @Sendable () async throws -> T) async throws -> T where C.Duration == Duration {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await work() }
            group.addTask {
                try await clock.sleep(for: limit)
                throw exceeded()
            }
            defer { group.cancelAll() }
            while let next = try await group.next() {
                if let value = next { return value }
            }
            throw CancellationError()
        }
    }
}
