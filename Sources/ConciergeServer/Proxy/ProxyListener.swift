import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// The proxy listener (raw SwiftNIO) as a `Service`: binds, serves until a graceful
/// shutdown, then stops accepting and lets the requests in flight finish within
/// `limits.shutdown_grace`.
///
/// Every request that is not answered on its event loop runs inside a child task of ``run()``'s
/// task group (its connection's lane, through a ``RequestWorkQueue``), its whole reply
/// included; the usual miss, answered by callbacks on its loop, is registered with the same
/// queue. So the shutdown waits for exactly that work, without polling.
struct ProxyListener: Service {
    let context: ProxyServerContext
    /// The address to bind (`listen.proxy`); port 0 lets the kernel choose.
    let host: String
    let port: Int
    let group: any EventLoopGroup
    let logger: Logger
    /// Called with the bound port, for readiness (`READY=1`) and tests.
    let onBound: @Sendable (Int) -> Void
    /// Counts the client connections (``MemoryReturnService``).
    var connections = OpenConnections()

    /// How the two phases of ``run()`` end.
    private enum Phase: Sendable {
        case requestsFinished
        case graceOver
    }

    func run() async throws {
        let requests = RequestWorkQueue()
        let server = try await bind(requests: requests)
        let boundPort = server.localAddress?.port ?? port
        logger.info("proxy listening", metadata: ["address": "\(host):\(boundPort)"])
        onBound(boundPort)
        await withTaskGroup(of: Phase.self) { phases in
            phases.addTask {
                await requests.run()
                return .requestsFinished
            }
            // Throws when the service group cancels instead: the same steps follow, and the
            // cancellation reaches the requests' work at once.
            try? await gracefulShutdown()
            logger.info("proxy stops accepting; finishing requests in flight")
            try? await server.close()
            requests.finish()
            let grace = context.runtime.current.settings.limits.shutdownGrace
            phases.addTask {
                try? await Task.sleep(for: grace)
                return .graceOver
            }
            if await phases.next() == .graceOver, !Task.isCancelled {
                logger.warning("grace period over with requests still in flight: closing their connections")
            }
            // Cancels the sleep, or the requests still running: each request's work closes its
            // connection when cancelled (ProxyHTTPHandler), which fails its pending writes and
            // ends its streams, so the group returns promptly.
            phases.cancelAll()
        }
    }

    private func bind(requests: RequestWorkQueue) async throws -> any Channel {
        let (context, connections) = (self.context, self.connections)
        let acceptFailures = AcceptFailureLog(logger: logger)
        return try await ServerBootstrap(group: group)
            // Out of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM): accept again a second later
            // instead of spinning, and say so (once a minute). First in the pipeline: it sees
            // the error before any other handler.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(acceptFailures.backoffHandler(), position: .first)
                }
            }
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            // A client that half-closes after a cut body still gets its 400.
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                connections.opened()
                channel.closeFuture.whenComplete { _ in connections.closed() }
                return channel.eventLoop.makeCompletedFuture {
                    try Self.configureConnection(channel.pipeline.syncOperations, responder: context, requests: requests)
                }
            }
            .bind(host: host, port: port).get()
    }

    /// A proxy connection's handlers: NIO's HTTP/1.1 response encoder, ``RepeatedHitHandler``
    /// (a read that repeats a head answered from the hot tier is answered without parsing),
    /// NIO's request decoder, then ``ProxyHTTPHandler``.
    ///
    /// Not NIO's `configureHTTPServerPipeline`: ``ProxyHTTPHandler`` orders pipelined requests
    /// itself and writes hits as ready bytes below the encoder, so the encoder must frame each
    /// reply from the reply alone (paired with the decoder it would count requests, and a hit it
    /// never saw would shift its bookkeeping). Bodies of replies to `HEAD` are left out by
    /// Concierge's writers. Reply headers come from a parsed upstream reply or from Concierge
    /// itself: no re-validation.
    static func configureConnection(_ pipeline: ChannelPipeline.SynchronousOperations, responder: any ProxyResponder,
                                    requests: RequestWorkQueue) throws {
        let proxy = ProxyHTTPHandler(responder: responder, requests: requests)
        try pipeline.addHandler(HTTPResponseEncoder())
        try pipeline.addHandler(RepeatedHitHandler(proxy: proxy))
        try pipeline.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
        try pipeline.addHandler(proxy)
    }
}
