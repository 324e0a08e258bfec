import Synchronization

/// A deadline on a call to PostgreSQL: the caller gets ``DeadlineExceeded`` once `limit`
/// passes, whether or not the call (left running, cancelled) has ended: a frozen database
/// never holds a request longer than that.
public enum Deadline {
    public struct Exceeded: Error, CustomStringConvertible {
        public let limit: Duration
        public init(limit: Duration) { self.limit = limit }
        public var description: String { "PostgreSQL did not answer within \(limit)" }
    }

    public static func run<T: Sendable>(_ limit: Duration, _ work: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let slot = Slot(continuation)
            let task = Task {
                let result: Result<T, any Error>
                do { result = .success(try await work()) } catch { result = .failure(error) }
                slot.take()?.resume(with: result)
            }
            Task {
                try? await Task.sleep(for: limit)
                if let continuation = slot.take() {
                    task.cancel()
                    continuation.resume(throwing: Exceeded(limit: limit))
                }
            }
        }
    }

    /// The caller's continuation, resumed once by whichever comes first.
    private final class Slot<T: Sendable>: Sendable {
        private let continuation: Mutex<CheckedContinuation<T, any Error>?>
        init(_ continuation: CheckedContinuation<T, any Error>) { self.continuation = Mutex(continuation) }
        func take() -> CheckedContinuation<T, any Error>? { continuation.withLock { $0.take() } }
    }
}
