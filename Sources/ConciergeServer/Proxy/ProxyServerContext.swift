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
    let record: @Sendable (IncomingRequest, ProxyAnswer, ContinuousClock.Instant) -> Void
    let tracer: RequestTracer?

    init(pipeline: ProxyPipeline, stats: ProxyStats, requestLog: RequestLog, tracer: RequestTracer? = nil) {
        self.pipeline = pipeline
        self.tracer = tracer
        self.runtime = pipeline.runtime
        let runtime = pipeline.runtime
        // The one place a finished request is counted and logged.
        let record: @Sendable (IncomingRequest, ProxyAnswer, ContinuousClock.Instant) -> Void = { incoming, answer, started in
            let total = ContinuousClock.now - started
            incoming.trace?.end(method: incoming.method, status: answer.reply.status, report: answer.report)
            stats.record(answer.report, status: answer.reply.status, duration: total)
            // The configuration the request was routed under (no lock), else the current one.
            requestLog.log(incoming, answer, total: total, config: incoming.route?.config ?? runtime.current)
        }
        self.record = record
        self.ownRoutes = ConciergeRoutes(pipeline: pipeline, log: record)
    }

    var currentConfig: RuntimeConfig { runtime.current }
    var configGeneration: Int { runtime.generation }

    /// The request's plan; `nil` for Concierge's own routes (``ConciergeRoutes``, in a task).
    func plan(_ incoming: IncomingRequest, encoded: Bool) -> RequestPlan? {
        if incoming.target.hasPrefix(ConciergeRoutes.prefix) { return nil }
        return pipeline.plan(incoming, encoded: encoded)
    }

    func missOnLoop(_ miss: RequestPlan.LoopMiss, on eventLoop: any EventLoop,
                    answer: @escaping @Sendable (ProxyAnswer) -> Void) -> Bool {
        pipeline.missOnLoop(miss, on: eventLoop, answer: answer)
    }

    nonisolated(nonsending) func handle(_ incoming: IncomingRequest, plan: RequestPlan.TaskPlan? = nil) async -> ProxyAnswer {
        if let plan { return await pipeline.run(plan) }
        if incoming.target.hasPrefix(ConciergeRoutes.prefix) {
            return await ownRoutes.handle(incoming)
        }
        return await pipeline.handle(incoming)
    }

    /// The request's route, decided once as its head arrives; `nil` for Concierge's own
    /// routes (their bodies are always buffered).
    func route(method: String, target: String) -> PreparedRequest.Route? {
        if target.hasPrefix(ConciergeRoutes.prefix) { return nil }
        return runtime.route(method: method, target: target)
    }

    /// An absolute-form target turned into origin form and its host, only when it names an
    /// upstream.
    func originForm(_ uri: String) -> (origin: String, host: String)? {
        guard let components = URLComponents(string: uri), let host = components.host?.lowercased(),
              let scheme = components.scheme?.lowercased() else { return nil }
        let port = components.port ?? (scheme == "https" ? 443 : 80)
        let known = runtime.current.settings.upstreams.contains { $0.host.lowercased() == host && $0.port == port }
        guard known else { return nil }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        return (components.percentEncodedQuery.map { "\(path)?\($0)" } ?? path, host)
    }

    func log(_ incoming: IncomingRequest, _ answer: ProxyAnswer, started: ContinuousClock.Instant) {
        record(incoming, answer, started)
    }

    func replayedHit(of bytes: ByteBuffer, listenerSession: String?) -> (hit: EncodedHit, incoming: IncomingRequest)? {
        pipeline.replayedHit(of: bytes, listenerSession: listenerSession)
    }

    func rememberReplay(_ bytes: ByteBuffer, incoming: IncomingRequest, recipe: HitMemo.Recipe) {
        pipeline.rememberReplay(bytes, incoming: incoming, recipe: recipe)
    }
}
