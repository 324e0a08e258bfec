import AsyncHTTPClient
import ConciergeStorage
import NIOCore

/// An upstream reply body streamed until a deadline (the endpoint's `timeout` over the
/// whole exchange, docs/hardening.md). Past the deadline the upstream request is cancelled, its
/// connection closed, and iteration throws ``UpstreamFailure/timeout``; the listener then
/// closes the client connection, so a cut body is never taken for a complete one.
///
/// Each chunk is read when the consumer asks for it (``Deadline/race(_:clock:exceeded:_:)``:
/// the read against what is left of the deadline), so a slow client slows the upstream read.
struct DeadlineBody: Sendable {
    let body: HTTPClientResponse.Body
    let deadline: NIODeadline

    /// The body as the transport seam hands it on.
    var upstreamBody: UpstreamBody {
        UpstreamBody(start: makeAsyncIterator)
    }

    @Sendable func makeAsyncIterator() -> UpstreamBody.AsyncIterator {
        let reader = Reader(body.makeAsyncIterator())
        let deadline = self.deadline
        return UpstreamBody.AsyncIterator(read: {
            let left = deadline - .now()
            guard left.nanoseconds > 0 else {
                reader.end()
                throw UpstreamFailure.timeout
            }
            do {
                return try await Deadline.race(.nanoseconds(left.nanoseconds), clock: ContinuousClock(),
                                               exceeded: { UpstreamFailure.timeout }) { try await reader.next() }
            } catch {
                // Cancelled (the read past the deadline): the request and its connection end.
                reader.end()
                throw error
            }
        })
    }

    /// The upstream body's iterator, read by one task at a time.
    // @unchecked Sendable: the consumer asks for one chunk at a time, and each read (a child of
    // its race, awaited before the race returns) ends before the next begins; `end()` runs
    // only between reads.
    final class Reader: @unchecked Sendable {
        private var iterator: HTTPClientResponse.Body.AsyncIterator?
        init(_ iterator: HTTPClientResponse.Body.AsyncIterator) { self.iterator = iterator }

        func next() async throws -> ByteBuffer? {
            guard iterator != nil else { return nil }
            return try await iterator?.next()
        }

        /// Drops the iterator: AsyncHTTPClient cancels the request and closes its connection.
        func end() { iterator = nil }
    }
}
