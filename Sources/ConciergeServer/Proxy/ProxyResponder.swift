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

    /// A reply to write synchronously on the event loop (a fresh hot-tier hit or a local
    /// answer), or the preparation to go on with; `nil` when the request needs ``handle(_:prepared:)``.
    /// `encoded`: the connection can take a hit as ready HTTP/1.1 bytes.
    func fastPath(_ incoming: IncomingRequest, encoded: Bool) -> ProxyPipeline.FastPath?

    /// The usual miss answered by callbacks on `eventLoop` (``ProxyPipeline/missOnLoop(_:on:answer:)``),
    /// for a request the fast path prepared and whose key the hot tier did not have: `answer`
    /// is called once, on `eventLoop`. `false`, and `answer` never called, when it needs
    /// ``handle(_:prepared:)``.
    func missOnLoop(_ preparation: ProxyPipeline.Preparation, on eventLoop: any EventLoop,
                    answer: @escaping @Sendable (ProxyAnswer) -> Void) -> Bool

    /// The reply, from the pipeline or Concierge's own routes (`prepared` when the fast path
    /// already prepared the request).
    nonisolated(nonsending) func handle(_ incoming: IncomingRequest, prepared: ProxyPipeline.Preparation?) async -> ProxyAnswer

    /// The request's route, decided once as its head arrives (it says whether the body is
    /// streamed); `nil` for Concierge's own routes, whose bodies are buffered.
    func route(method: String, target: String) -> PreparedRequest.Route?

    /// An absolute-form target turned into origin form and its host, only when it names an
    /// upstream.
    func originForm(_ uri: String) -> (origin: String, host: String)?

    /// Counts a finished request in the metrics and writes its log line.
    func log(_ incoming: IncomingRequest, _ answer: ProxyAnswer, started: ContinuousClock.Instant)

    /// The hit for a request head recognised by its bytes (``ProxyPipeline/replayedHit(of:)``),
    /// with the request as it was first read; `nil` when the bytes must be parsed.
    func replayedHit(of bytes: ByteBuffer) -> (hit: EncodedHit, incoming: IncomingRequest)?

    /// Remembers a head that arrived alone in one read and was answered as `recipe` says.
    func rememberReplay(_ bytes: ByteBuffer, incoming: IncomingRequest, recipe: HitMemo.Recipe)
}

extension ProxyResponder {
    /// A responder without a pipeline of its own (a test's stub) answers every miss in a task.
    func missOnLoop(_ preparation: ProxyPipeline.Preparation, on eventLoop: any EventLoop,
                    answer: @escaping @Sendable (ProxyAnswer) -> Void) -> Bool { false }

    /// Without a pipeline every request is parsed.
    func replayedHit(of bytes: ByteBuffer) -> (hit: EncodedHit, incoming: IncomingRequest)? { nil }

    func rememberReplay(_ bytes: ByteBuffer, incoming: IncomingRequest, recipe: HitMemo.Recipe) {}
}

extension ProxyResponder {
    var tracer: RequestTracer? { nil }
}
