import ConciergeCore
import NIOCore

/// What a proxy connection needs from the daemon: the configuration its checks read, the
/// pipeline that answers, and the request log. ``ProxyServerContext`` is the daemon's; a test
/// gives ``ProxyHTTPHandler`` a stub to run it on an `EmbeddedChannel`.
protocol ProxyResponder: Sendable {
    /// Traces requests (`telemetry.traces`); `nil`: tracing is off.
    var tracer: RequestTracer? { get }

    /// The configuration in force (limits, `Host` policy), read once per request head.
    var currentConfig: RuntimeConfig { get }

    /// Changes whenever the configuration or the environment does (``Runtime/generation``):
    /// while it stays the same, a connection reuses the configuration and routes it read.
    var configGeneration: Int { get }

    /// How the request is answered (``ProxyPipeline/plan(_:encoded:onLoop:)``), decided once
    /// on the event loop; `nil` when the responder answers it itself in a task
    /// (``handle(_:plan:)`` without a plan: Concierge's own routes).
    /// `encoded`: the connection can take a hit as ready HTTP/1.1 bytes.
    func plan(_ incoming: IncomingRequest, encoded: Bool) -> RequestPlan?

    /// The usual miss answered by callbacks on `eventLoop` (``ProxyPipeline/missOnLoop(_:on:answer:)``):
    /// `answer` is called once, on `eventLoop`. `false`, and `answer` never called, when the
    /// coalescer or the transport did not take it (then ``RequestPlan/LoopMiss/awaited`` runs).
    func missOnLoop(_ miss: RequestPlan.LoopMiss, on eventLoop: any EventLoop,
                    answer: @escaping @Sendable (ProxyAnswer) -> Void) -> Bool

    /// The reply, carried out in a task: the plan's (``ProxyPipeline/run(_:)``), or without
    /// one, Concierge's own routes or a request planned there (a streamed body).
    nonisolated(nonsending) func handle(_ incoming: IncomingRequest, plan: RequestPlan.TaskPlan?) async -> ProxyAnswer

    /// The request's route, decided once as its head arrives (it says whether the body is
    /// streamed); `nil` for Concierge's own routes, whose bodies are buffered.
    func route(method: String, target: String) -> PreparedRequest.Route?

    /// An absolute-form target turned into origin form and its host, only when it names an
    /// upstream.
    func originForm(_ uri: String) -> (origin: String, host: String)?

    /// Counts a finished request in the metrics and writes its log line.
    func log(_ incoming: IncomingRequest, _ answer: ProxyAnswer, started: ContinuousClock.Instant)

    /// The hit for a request head recognised by its bytes (``ProxyPipeline/replayedHit(of:listenerSession:)``)
    /// on a connection of a listener with `listenerSession`, with the request as it was first
    /// read; `nil` when the bytes must be parsed.
    func replayedHit(of bytes: ByteBuffer, listenerSession: String?) -> (hit: EncodedHit, incoming: IncomingRequest)?

    /// Remembers a head that arrived alone in one read and was answered as `recipe` says.
    func rememberReplay(_ bytes: ByteBuffer, incoming: IncomingRequest, recipe: HitMemo.Recipe)
}

extension ProxyResponder {
    /// A responder without a pipeline of its own (a test's stub) answers every miss in a task.
    func missOnLoop(_ miss: RequestPlan.LoopMiss, on eventLoop: any EventLoop,
                    answer: @escaping @Sendable (ProxyAnswer) -> Void) -> Bool { false }

    /// Without a pipeline every request is parsed.
    func replayedHit(of bytes: ByteBuffer, listenerSession: String?) -> (hit: EncodedHit, incoming: IncomingRequest)? { nil }

    func rememberReplay(_ bytes: ByteBuffer, incoming: IncomingRequest, recipe: HitMemo.Recipe) {}
}

extension ProxyResponder {
    var tracer: RequestTracer? { nil }
}
