import ConciergeCore
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// The proxy listener (raw SwiftNIO) as a `Service`: binds every address of `listen.proxy`
/// (TCP, and Unix sockets through ``UnixSocketFile``), serves until a graceful shutdown, then
/// stops accepting and lets the requests in flight finish within `limits.shutdown_grace`.
///
/// Every request that is not answered on its event loop runs inside a child task of ``run()``'s
/// task group (its connection's lane, through a ``RequestWorkQueue``), its whole reply
/// included; the usual miss, answered by callbacks on its loop, is registered with the same
/// queue. So the shutdown waits for exactly that work, without polling.
///
/// Each connection gets its ``ConnectionIdentity`` when it is accepted: on a Unix socket the
/// peer's credentials (``PeerCredentialReader``), and the listener's `session`.
struct ProxyListener: Service {
    let context: ProxyServerContext
    /// `listen.proxy`: the addresses to bind; port 0 lets the kernel choose.
    let listeners: [ConciergeConfig.ProxyListener]
    let group: any EventLoopGroup
    let logger: Logger
    /// Called with the first TCP listener's bound port (0 when all are Unix sockets), for
    /// readiness (`READY=1`) and tests.
    let onBound: @Sendable (Int) -> Void
    /// Counts the client connections (``MemoryReturnService``).
    var connections = OpenConnections()

    /// How the two phases of ``run()`` end.
    private enum Phase: Sendable {
        case requestsFinished
        case graceOver
    }

    /// A bound listener: its server channel and, for a Unix socket, the file to remove at the end.
    private struct Bound {
        var channel: any Channel
        var socketFile: (file: UnixSocketFile, placed: UnixSocketFile.Placed)?
    }

    func run() async throws {
        let requests = RequestWorkQueue()
        let servers = try await bindAll(requests: requests)
        onBound(servers.lazy.compactMap { $0.socketFile == nil ? $0.channel.localAddress?.port : nil }.first ?? 0)
        await withTaskGroup(of: Phase.self) { phases in
            phases.addTask {
                await requests.run()
                return .requestsFinished
            }
            // Throws when the service group cancels instead: the same steps follow, and the
            // cancellation reaches the requests' work at once.
            try? await gracefulShutdown()
            logger.info("proxy stops accepting; finishing requests in flight")
            await Self.close(servers)
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

    /// Binds every listener, or none: a failure closes those already bound.
    private func bindAll(requests: RequestWorkQueue) async throws -> [Bound] {
        var servers: [Bound] = []
        do {
            for listener in listeners {
                let bound = try await bind(listener, requests: requests)
                servers.append(bound)
                let address = switch listener.address {
                case .tcp(let host, let port): "\(host):\(bound.channel.localAddress?.port ?? port)"
                case .unix(let path): "unix:\(path)"
                }
                var metadata: Logger.Metadata = ["address": "\(address)"]
                if let session = listener.session { metadata["session"] = "\(session)" }
                logger.info("proxy listening", metadata: metadata)
            }
        } catch {
            await Self.close(servers)
            throw error
        }
        warnIfPeersIndistinct()
        return servers
    }

    /// `clients` on Unix sockets inside a user namespace that hides other users: said once, at start.
    private func warnIfPeersIndistinct() {
        guard context.runtime.current.accessControlled, listeners.contains(where: { if case .unix = $0.address { true } else { false } }),
              let map = try? String(contentsOfFile: "/proc/self/uid_map", encoding: .utf8),
              !PeerCredentialReader.mapsEveryID(uidMap: map) else { return }
        logger.warning("session.clients: this process runs in a user namespace that does not map every uid (systemd PrivateUsers=yes?): peers of other users may all appear as uid 65534; see docs/local-access.md")
    }

    /// Stops accepting; removes the Unix socket files.
    private static func close(_ servers: [Bound]) async {
        for server in servers {
            try? await server.channel.close()
            if let socket = server.socketFile { socket.file.remove(socket.placed) }
        }
    }

    private func bind(_ listener: ConciergeConfig.ProxyListener, requests: RequestWorkQueue) async throws -> Bound {
        switch listener.address {
        case .tcp(let host, let port):
            let bootstrap = makeBootstrap(listener, requests: requests)
            return Bound(channel: try await bootstrap.bind(host: host, port: port).get(), socketFile: nil)
        case .unix(let path):
            let file = UnixSocketFile(path: path, mode: listener.mode, group: listener.group)
            let bootstrap = makeBootstrap(listener, requests: requests)
            let (channel, placed) = try await file.bind { try await bootstrap.bind(unixDomainSocketPath: $0).get() }
            return Bound(channel: channel, socketFile: (file, placed))
        }
    }

    private func makeBootstrap(_ listener: ConciergeConfig.ProxyListener, requests: RequestWorkQueue) -> ServerBootstrap {
        let (context, connections, logger) = (self.context, self.connections, self.logger)
        let acceptFailures = AcceptFailureLog(logger: logger)
        let isUnix = if case .unix = listener.address { true } else { false }
        let session = listener.session
        var bootstrap = ServerBootstrap(group: group)
            // Out of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM): accept again a second later
            // instead of spinning, and say so (once a minute). First in the pipeline: it sees
            // the error before any other handler.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(acceptFailures.backoffHandler(), position: .first)
                }
            }
            .serverChannelOption(.backlog, value: 1024)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            // A client that half-closes after a cut body still gets its 400.
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                connections.opened()
                channel.closeFuture.whenComplete { _ in connections.closed() }
                guard isUnix else {
                    return channel.eventLoop.makeCompletedFuture {
                        try Self.configureConnection(channel.pipeline.syncOperations, responder: context, requests: requests,
                                                     identity: ConnectionIdentity(listenerSession: session), logger: logger)
                    }
                }
                // Once, at accept, on the connection's loop (the future is already complete).
                return PeerCredentialReader.read(channel).flatMapThrowing { peer in
                    try Self.configureConnection(channel.pipeline.syncOperations, responder: context, requests: requests,
                                                 identity: ConnectionIdentity(peer: peer, listenerSession: session), logger: logger)
                }
            }
        if !isUnix {
            bootstrap = bootstrap
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
        }
        return bootstrap
    }

    /// A proxy connection's handlers: NIO's HTTP/1.1 response encoder, ``RepeatedHitHandler``
    /// (hands a read that repeats a head answered from the hot tier, or a plain head, to the
    /// proxy handler as a ``RecognisedRead``), NIO's request decoder, then ``ProxyHTTPHandler``;
    /// the two share the connection's ``DecodedReadWatch``.
    ///
    /// Not NIO's `configureHTTPServerPipeline`: ``ProxyHTTPHandler`` orders pipelined requests
    /// itself and writes hits as ready bytes below the encoder, so the encoder must frame each
    /// reply from the reply alone (paired with the decoder it would count requests, and a hit it
    /// never saw would shift its bookkeeping). Bodies of replies to `HEAD` are left out by
    /// Concierge's writers. Reply headers come from a parsed upstream reply or from Concierge
    /// itself: no re-validation.
    static func configureConnection(_ pipeline: ChannelPipeline.SynchronousOperations, responder: any ProxyResponder,
                                    requests: RequestWorkQueue, identity: ConnectionIdentity = .anonymous,
                                    logger: Logger = ProxyHTTPHandler.quietLogger) throws {
        let watch = DecodedReadWatch(responder: responder)
        let proxy = ProxyHTTPHandler(responder: responder, requests: requests, identity: identity, watch: watch, logger: logger)
        try pipeline.addHandler(HTTPResponseEncoder())
        try pipeline.addHandler(RepeatedHitHandler(receiver: proxy, watch: watch))
        try pipeline.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
        try pipeline.addHandler(proxy)
    }
}
