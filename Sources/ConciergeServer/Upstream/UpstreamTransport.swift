import NIOCore

/// How requests reach an upstream: the seam between the request path and the network.
/// ``PooledUpstreamTransport`` is the daemon's (its own connection pool for buffered
/// exchanges, ``UpstreamClient`` for streamed ones); unit tests script replies through their own.
public protocol UpstreamTransport: Sendable {
    /// Sends a request and buffers the reply up to `maxBody` bytes; `request.deadline` bounds
    /// the whole exchange.
    nonisolated(nonsending) func send(_ request: UpstreamRequest, maxBody: Int) async throws(UpstreamFailure) -> UpstreamResponse

    /// Sends a request and hands back the reply with its body still streaming; the body ends
    /// with ``UpstreamFailure/timeout`` at `request.deadline`.
    func stream(_ request: UpstreamRequest) async throws(UpstreamFailure) -> StreamedUpstreamReply

    /// ``send(_:maxBody:)`` without a task or a future, for a caller on `eventLoop`: `reply` is
    /// called once, on that loop, with the reply or an ``UpstreamFailure``. `false`, and
    /// `reply` never called, when this transport cannot (the caller then awaits
    /// ``send(_:maxBody:)``).
    func start(_ request: UpstreamRequest, maxBody: Int, on eventLoop: any EventLoop,
               reply: @escaping @Sendable (Result<UpstreamResponse, UpstreamFailure>) -> Void) -> Bool
}

extension UpstreamTransport {
    public func start(_ request: UpstreamRequest, maxBody: Int, on eventLoop: any EventLoop,
                      reply: @escaping @Sendable (Result<UpstreamResponse, UpstreamFailure>) -> Void) -> Bool { false }
}

extension UpstreamClient: UpstreamTransport {}
