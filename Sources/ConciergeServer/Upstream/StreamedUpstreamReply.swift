import NIOCore
import NIOHTTP1

/// An upstream reply whose body is still arriving: what ``UpstreamTransport/stream(_:)`` hands
/// back. The project's own type at the transport seam, so a scripted transport can stream in
/// tests as the network does (AsyncHTTPClient stays behind ``UpstreamClient``).
public struct StreamedUpstreamReply: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: UpstreamBody

    public init(status: Int, headers: HTTPHeaders, body: UpstreamBody) {
        (self.status, self.headers, self.body) = (status, headers, body)
    }
}

/// A reply body arriving from an upstream, chunk by chunk. Iteration throws an
/// ``UpstreamFailure`` when the upstream breaks off or the exchange's deadline passes: the
/// listener then closes the client's connection, so a cut body is never taken for a
/// complete one. Iterated once.
public struct UpstreamBody: AsyncSequence, Sendable {
    public typealias Element = ByteBuffer

    public struct AsyncIterator: AsyncIteratorProtocol {
        var chunks: AsyncThrowingStream<ByteBuffer, any Error>.Iterator?
        /// Reads the next chunk when asked for it, instead of `chunks` (``DeadlineBody``).
        var read: (@Sendable () async throws -> ByteBuffer?)?

        init(chunks: AsyncThrowingStream<ByteBuffer, any Error>.Iterator) { self.chunks = chunks }
        init(read: @escaping @Sendable () async throws -> ByteBuffer?) { self.read = read }

        public mutating func next() async throws -> ByteBuffer? {
            if let read { return try await read() }
            return try await chunks?.next()
        }
    }

    private let start: @Sendable () -> AsyncIterator

    /// `start` begins the body's delivery when iteration begins.
    init(start: @escaping @Sendable () -> AsyncIterator) {
        self.start = start
    }

    public func makeAsyncIterator() -> AsyncIterator { start() }

    /// A body whose chunks arrive through `stream` (a scripted upstream's, in tests).
    public init(_ stream: AsyncThrowingStream<ByteBuffer, any Error>) {
        start = { AsyncIterator(chunks: stream.makeAsyncIterator()) }
    }

    /// A body already at hand; `failure` ends it with that error after the chunks.
    public static func chunks(_ chunks: [ByteBuffer], thenFailing failure: UpstreamFailure? = nil) -> UpstreamBody {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: ByteBuffer.self)
        for chunk in chunks { continuation.yield(chunk) }
        continuation.finish(throwing: failure)
        return UpstreamBody(stream)
    }
}
