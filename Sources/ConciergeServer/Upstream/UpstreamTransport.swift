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
}

extension UpstreamClient: UpstreamTransport {}
