import AsyncHTTPClient
import ConciergeCore
import NIOCore
import NIOSSL

/// The daemon's ``UpstreamTransport``: buffered exchanges (envelope and cacheable endpoints,
/// token requests) go through Concierge's own ``UpstreamConnectionPool``; streamed ones
/// (opaque endpoints' uploads and downloads, and any request whose body is still arriving)
/// stay on AsyncHTTPClient (``UpstreamClient``). Both trust an https upstream's `ca_file`
/// when the configuration gives one.
public final class PooledUpstreamTransport: UpstreamTransport {
    public let pool: UpstreamConnectionPool
    public let client: UpstreamClient
    /// The configured upstreams as they are now (a reload may change their CA files).
    private let upstreams: @Sendable () -> [ConciergeConfig.Upstream]

    public init(group: any EventLoopGroup, client: UpstreamClient, configuration: UpstreamConnectionPool.Configuration = .init(),
                upstreams: @escaping @Sendable () -> [ConciergeConfig.Upstream]) {
        pool = UpstreamConnectionPool(group: group, configuration: configuration)
        self.client = client
        self.upstreams = upstreams
    }

    nonisolated(nonsending) public func send(_ request: UpstreamRequest, maxBody: Int) async throws(UpstreamFailure) -> UpstreamResponse {
        if case .stream = request.body {
            return try await client.send(request, maxBody: maxBody, tlsConfiguration: tlsConfiguration(for: request.base))
        }
        return try await pool.send(request, maxBody: maxBody, caFile: caFile(for: request.base))
    }

    public func start(_ request: UpstreamRequest, maxBody: Int, on eventLoop: any EventLoop,
                      reply: @escaping @Sendable (Result<UpstreamResponse, UpstreamFailure>) -> Void) -> Bool {
        if case .stream = request.body { return false }
        return pool.start(request, maxBody: maxBody, caFile: caFile(for: request.base), on: eventLoop, reply: reply)
    }

    public func stream(_ request: UpstreamRequest) async throws(UpstreamFailure) -> StreamedUpstreamReply {
        try await client.stream(request, tlsConfiguration: tlsConfiguration(for: request.base))
    }

    /// Closes the pool's connections, then AsyncHTTPClient's (hooks use it until then).
    public func shutdown() async {
        await pool.shutdown()
        await client.shutdown()
    }

    /// The `ca_file` of the configured https upstream at this URL's origin, if any (`url` may
    /// stop at its authority: a request's ``UpstreamRequest/base``).
    func caFile(for url: String) -> String? {
        guard UpstreamOrigin.schemeIsTLS(url) == true, let origin = UpstreamOrigin.parse(url)?.origin else { return nil }
        return upstreams().first { $0.caFile != nil && origin.matches($0.scheme, host: $0.host, port: $0.port) }?.caFile
    }

    private func tlsConfiguration(for url: String) -> TLSConfiguration? {
        caFile(for: url).map { UpstreamTLSContexts.configuration(caFile: $0) }
    }
}
