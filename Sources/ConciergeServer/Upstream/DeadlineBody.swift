import AsyncHTTPClient
import NIOCore
import Synchronization

/// An upstream reply body streamed until a deadline (the endpoint's `timeout` over the
/// whole exchange, docs/hardening.md). Past the deadline the upstream request is cancelled, its
/// connection closed, and iteration throws ``UpstreamFailure/timeout``; the listener then
/// closes the client connection, so a cut body is never taken for a complete one.
///
/// A producer task reads the upstream body and hands over one chunk per `next()` call, so
/// a slow client still slows the upstream read (at most one chunk read ahead).
struct DeadlineBody: Sendable {
    let body: HTTPClientResponse.Body
    let deadline: NIODeadline

    /// The body as the transport seam hands it on.
    var upstreamBody: UpstreamBody {
        UpstreamBody(start: makeAsyncIterator)
    }

    @Sendable func makeAsyncIterator() -> UpstreamBody.AsyncIterator {
        let credits = Credits()
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: ByteBuffer.self)
        let body = self.body
        let producer = Task {
            do {
                for try await chunk in body {
                    guard await credits.take() else { return }
                    continuation.yield(chunk)
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        let deadline = self.deadline
        let timer = Task {
            let left = max(0, (deadline - .now()).nanoseconds)
            guard (try? await Task.sleep(for: .nanoseconds(left))) != nil else { return }
            continuation.finish(throwing: UpstreamFailure.timeout)
            producer.cancel()
        }
        continuation.onTermination = { _ in
            producer.cancel()
            timer.cancel()
            credits.cancel()
        }
        return UpstreamBody.AsyncIterator(chunks: stream.makeAsyncIterator(), demand: { credits.grant() })
    }

    /// How many chunks the consumer asked for and the producer has not yet handed over.
    final class Credits: Sendable {
        private struct State {
            var available = 0
            var waiter: CheckedContinuation<Bool, Never>?
            var cancelled = false
        }

        private let state = Mutex(State())

        /// Waits for one credit; false once cancelled.
        func take() async -> Bool {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                    let now = state.withLock { s -> Bool? in
                        if s.cancelled { return false }
                        if s.available > 0 {
                            s.available -= 1
                            return true
                        }
                        s.waiter = c
                        return nil
                    }
                    if let now { c.resume(returning: now) }
                }
            } onCancel: {
                cancel()
            }
        }

        func grant() {
            let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
                if let w = s.waiter {
                    s.waiter = nil
                    return w
                }
                s.available += 1
                return nil
            }
            waiter?.resume(returning: true)
        }

        func cancel() {
            let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
                s.cancelled = true
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume(returning: false)
        }
    }
}
