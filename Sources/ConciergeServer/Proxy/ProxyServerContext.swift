import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// What every proxy connection shares: the pipeline, Concierge's own routes under
/// `/_concierge/` and the request log.
final class ProxyServerContext: ProxyResponder {
    let pipeline: ProxyPipeline
    let runtime: Runtime
    let ownRoutes: ConciergeRoutes
    /// Counts a finished request in the metrics and writes its log line.
    let record: @Sendable (IncomingRequest, ProxyReply, ContinuousClock.Instant) -> Void

    init(pipeline: ProxyPipeline, requestLog: RequestLog) {
        self.pipeline = pipeline
        self.runtime = pipeline.runtime
        let stats = pipeline.stats
        let runtime = pipeline.runtime
        let record: @Sendable (IncomingRequest, ProxyReply, ContinuousClock.Instant) -> Void = { incoming, reply, started in
            let total = ContinuousClock.now - started
            stats.recordRequest(endpoint: reply.endpoint, cache: reply.cacheStatus, status: reply.status, duration: total)
            requestLog.log(incoming, reply, total: total, config: runtime.current)
        }
        self.record = record
        self.ownRoutes = ConciergeRoutes(pipeline: pipeline, log: record)
    }

    var currentConfig: RuntimeConfig { runtime.current }

    /// A synchronous reply (fresh hot hit or local answer), or the preparation to go on with.
    func fastPath(_ incoming: IncomingRequest) -> ProxyPipeline.FastPath? {
        if incoming.target.hasPrefix(ConciergeRoutes.prefix) { return nil }
        return pipeline.fastPath(incoming)
    }

    func handle(_ incoming: IncomingRequest, prepared: ProxyPipeline.Preparation? = nil) async -> ProxyReply {
        if incoming.target.hasPrefix(ConciergeRoutes.prefix) {
            return await ownRoutes.handle(incoming)
        }
        if let prepared { return await pipeline.handle(incoming, prepared: prepared) }
        return await pipeline.handle(incoming)
    }

    /// Whether the request body is streamed to the upstream rather than buffered.
    func streams(method: String, target: String) -> Bool {
        if target.hasPrefix(ConciergeRoutes.prefix) { return false }
        let path = target.firstIndex(of: "?").map { String(target[..<$0]) } ?? target
        let endpoint = runtime.current.router.route(method: method, path: path)
        return !endpoint.envelope && !endpoint.isCacheable
    }

    /// An absolute-form target turned into origin form and its host, only when it names an
    /// upstream.
    func originForm(_ uri: String) -> (origin: String, host: String)? {
        guard let components = URLComponents(string: uri), let host = components.host?.lowercased(),
              let scheme = components.scheme?.lowercased() else { return nil }
        let port = components.port ?? (scheme == "https" ? 443 : 80)
        let known = runtime.current.config.upstreams.contains { $0.host.lowercased() == host && $0.port == port }
        guard known else { return nil }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        return (components.percentEncodedQuery.map { "\(path)?\($0)" } ?? path, host)
    }

    func log(_ incoming: IncomingRequest, _ reply: ProxyReply, started: ContinuousClock.Instant) {
        record(incoming, reply, started)
    }
}
