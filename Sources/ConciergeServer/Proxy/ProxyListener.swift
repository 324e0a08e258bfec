import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// The proxy listener (raw SwiftNIO) as a `Service`: binds, serves until a graceful
/// shutdown, then stops accepting and lets requests in flight finish within the grace
/// period.
final class ProxyListener: Service {
    let context: ProxyServerContext
    let host: String
    let port: Int
    let group: any EventLoopGroup
    let logger: Logger
    let onBound: @Sendable (Int) -> Void

    init(context: ProxyServerContext, host: String, port: Int, group: any EventLoopGroup, logger: Logger, onBound: @escaping @Sendable (Int) -> Void) {
        self.context = context
        self.host = host
        self.port = port
        self.group = group
        self.logger = logger
        self.onBound = onBound
    }

    func run() async throws {
        let context = self.context
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            // A client that half-closes after a cut body still gets its 400.
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // Reply headers come from a parsed upstream reply or from Concierge itself: no re-validation.
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: true, withErrorHandling: false, withOutboundHeaderValidation: false)
                    try channel.pipeline.syncOperations.addHandler(ProxyHTTPHandler(server: context))
                }
            }
            .bind(host: host, port: port).get()
        let boundPort = channel.localAddress?.port ?? port
        logger.info("proxy listening", metadata: ["address": "\(host):\(boundPort)"])
        onBound(boundPort)
        try? await gracefulShutdown()
        logger.info("proxy stops accepting; finishing requests in flight", metadata: ["in_flight": "\(context.requestsInFlight)"])
        try? await channel.close()
        let grace = context.runtime.current.config.limits.shutdownGrace
        let deadline = ContinuousClock.now + grace
        while context.requestsInFlight > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        if context.requestsInFlight > 0 {
            logger.warning("grace period over with requests still in flight", metadata: ["in_flight": "\(context.requestsInFlight)"])
        }
    }
}
