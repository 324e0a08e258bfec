import ConciergeCore
import Foundation
import Logging
import NIOHTTP1
import Synchronization
import Tracing

/// One traced request (docs/tracing.md): its server span, the upstream attempt under way, and
/// the ids its log lines carry. Made by ``RequestTracer/begin(method:target:headers:)`` only
/// for a request that is traced; an untraced request carries `nil` and costs nothing more.
///
/// The request path is callbacks on an event loop as much as tasks, so spans are started and
/// ended explicitly with this span's context, never through a task-local context.
final class RequestTrace: Sendable {
    let tracer: any Tracer
    let server: any Span
    /// The upstream attempt under way (a client span), ended by ``endAttempt(status:failure:)``.
    private let attempt = Mutex<(any Span)?>(nil)
    /// The session the request uses (`concierge.session`), once the pipeline chose it.
    private let sessionName = Mutex("default")

    init(tracer: any Tracer, server: any Span) {
        self.tracer = tracer
        self.server = server
    }

    /// `trace_id` and `span_id` (the server span's, as hex), for the log lines of a traced
    /// request: read when a line is written, as most traced requests write none.
    var logMetadata: Logger.Metadata { TraceLogContext.metadata(of: server, tracer) }

    /// Records the session the pipeline chose for the request.
    func chose(session name: String) {
        sessionName.withLock { $0 = name }
    }

    // MARK: Upstream attempts

    /// A client span for one upstream attempt (a replay is a second one), and its context in
    /// the request's `traceparent`/`tracestate` in place of the client's.
    func beginAttempt(_ request: inout UpstreamRequest, replays: Int) {
        let span = tracer.startSpan(request.method, context: server.context, ofKind: .client)
        var attributes = SpanAttributes()
        attributes["http.request.method"] = request.method
        if let url = URLComponents(string: request.base) {
            if let host = url.host { attributes["server.address"] = host }
            if let port = url.port { attributes["server.port"] = port }
            attributes["url.scheme"] = url.scheme ?? "http"
        }
        // The path only: a query may carry a token.
        attributes["url.path"] = request.target.pathPart
        if replays > 0 { attributes["http.request.resend_count"] = replays }
        span.attributes = attributes
        request.headers.remove(name: "traceparent")
        request.headers.remove(name: "tracestate")
        tracer.inject(span.context, into: &request.headers, using: HTTPHeadersInjector())
        let replaced = attempt.withLock { current -> (any Span)? in
            defer { current = span }
            return current
        }
        // An attempt built but never sent (the pool refused it at once) ends unsent.
        replaced?.setStatus(SpanStatus(code: .error, message: "not sent"))
        replaced?.end()
    }

    /// The attempt's end: the upstream's status, or why there was none.
    func endAttempt(status: Int?, failure: String? = nil) {
        guard let span = attempt.withLock({ current -> (any Span)? in
            defer { current = nil }
            return current
        }) else { return }
        if let status {
            span.attributes["http.response.status_code"] = status
            if status >= 500 { span.setStatus(SpanStatus(code: .error, message: "HTTP \(status)")) }
        }
        if let failure {
            span.attributes["error.type"] = failure
            span.setStatus(SpanStatus(code: .error, message: failure))
        }
        span.end()
    }

    // MARK: Other children

    /// A child of the server span, to be ended by the caller.
    func child(_ name: String, attributes: SpanAttributes = [:]) -> any Span {
        let span = tracer.startSpan(name, context: server.context, ofKind: .internal)
        if !attributes.isEmpty { span.attributes = attributes }
        return span
    }

    /// A child of the server span that already happened, from `started` until now.
    func record(_ name: String, since started: ContinuousClock.Instant, attributes: SpanAttributes = [:]) {
        let span = tracer.startSpan(name, context: server.context, ofKind: .internal, at: WallInstant(started))
        if !attributes.isEmpty { span.attributes = attributes }
        span.end()
    }

    /// Records a cache read that went to SQLite (the hot tier did not have the entry).
    var cacheReadRecorder: @Sendable (ContinuousClock.Instant) -> Void {
        { started in self.record("cache read", since: started, attributes: ["db.system.name": "sqlite", "db.operation.name": "SELECT"]) }
    }

    /// Links the server span to a span of another request it waited for (a token request).
    func link(_ context: InstrumentationContext, _ attributes: SpanAttributes = [:]) {
        server.addLink(SpanLink(context: context, attributes: attributes))
    }

    /// The `fleet lock wait` of a token request (`parent`): ended by whichever end comes first.
    func lockWait(under parent: any Span) -> OnceEndedSpan {
        OnceEndedSpan(tracer.startSpan("fleet lock wait", context: parent.context, ofKind: .internal))
    }

    /// Ends a token request's span with its outcome.
    static func end(_ span: any Span, _ outcome: TokenRefresher.Outcome) {
        switch outcome {
        case .refreshed: span.attributes["concierge.outcome"] = "refreshed"
        case .loggedOut:
            span.attributes["concierge.outcome"] = "logged_out"
            span.setStatus(SpanStatus(code: .error, message: "the session ended"))
        case .unavailable, .throttled:
            span.attributes["concierge.outcome"] = "unavailable"
            span.setStatus(SpanStatus(code: .error, message: "no token"))
        }
        span.end()
    }

    // MARK: The end

    /// Ends the server span with what the reply and the request's report say.
    func end(method: String, status: Int, report: RequestReport) {
        var attributes = server.attributes
        attributes["http.response.status_code"] = status
        if !report.endpoint.isEmpty {
            attributes["http.route"] = report.endpoint
            server.operationName = "\(method) \(report.endpoint)"
        }
        if let cache = report.cache { attributes["concierge.cache"] = cache.rawValue }
        attributes["concierge.replays"] = report.replays
        attributes["concierge.session"] = sessionName.withLock { $0 }
        if let code = report.businessCode { attributes["concierge.code"] = code.description }
        server.attributes = attributes
        if status >= 500 { server.setStatus(SpanStatus(code: .error, message: "HTTP \(status)")) }
        endAttempt(status: nil, failure: "abandoned")
        server.end()
    }

    /// The hex trace and span ids of `context` (read through the propagator's `traceparent`).
    static func ids(_ context: InstrumentationContext, _ tracer: any Tracer) -> (trace: String, span: String) {
        var fields: [String: String] = [:]
        tracer.inject(context, into: &fields, using: DictionaryInjector())
        let parts = (fields["traceparent"] ?? "").split(separator: "-")
        guard parts.count == 4 else { return ("", "") }
        return (String(parts[1]), String(parts[2]))
    }
}

extension PreparedRequest {
    /// The request's trace, when it is traced.
    var trace: RequestTrace? {
        guard let carrier = traceCarrier else { return nil }
        return carrier as? RequestTrace
    }

    /// `metadata` for a log line about this request: with its `trace_id` and `span_id` when it
    /// is traced (lines logged in an event loop's callbacks, where no task-local is set).
    func logMetadata(_ metadata: Logger.Metadata) -> Logger.Metadata {
        guard let trace else { return metadata }
        return metadata.merging(trace.logMetadata) { $1 }
    }
}

/// The span whose ids every log line written in a task carries (``ConciergeLogHandler`` reads
/// it, and reads the ids only for a line it writes): a traced request's server span for its work
/// in a task, a token request's own span for that request.
enum TraceLogContext {
    struct Source: Sendable {
        let span: any Span
        let tracer: any Tracer
    }

    @TaskLocal static var current: Source?

    /// Runs `work` with the log lines it writes carrying `trace`'s ids; as is when untraced.
    static func withTrace<T>(_ trace: RequestTrace?, _ work: () async -> T) async -> T {
        guard let trace else { return await work() }
        return await $current.withValue(Source(span: trace.server, tracer: trace.tracer)) { await work() }
    }

    /// `trace_id` and `span_id` of `span`, as hex.
    static func metadata(of span: any Span, _ tracer: any Tracer) -> Logger.Metadata {
        let (traceID, spanID) = RequestTrace.ids(span.context, tracer)
        return ["trace_id": "\(traceID)", "span_id": "\(spanID)"]
    }
}

/// A span ended once, by whichever of its ends comes first.
final class OnceEndedSpan: Sendable {
    private let span: Mutex<(any Span)?>

    init(_ span: any Span) { self.span = Mutex(span) }

    func end() {
        let open = span.withLock { current -> (any Span)? in
            defer { current = nil }
            return current
        }
        open?.end()
    }
}

/// A `ContinuousClock` instant as a tracer's wall-clock instant.
struct WallInstant: TracerInstant {
    var nanosecondsSinceEpoch: UInt64

    init(_ instant: ContinuousClock.Instant) {
        let ago = ContinuousClock.now - instant
        let now = DefaultTracerClock.now.nanosecondsSinceEpoch
        let (seconds, attoseconds) = ago.components
        let nanos = UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
        nanosecondsSinceEpoch = now > nanos ? now - nanos : now
    }

    static func < (lhs: WallInstant, rhs: WallInstant) -> Bool { lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch }
}

struct HTTPHeadersExtractor: Extractor {
    func extract(key: String, from carrier: HTTPHeaders) -> String? { carrier.first(name: key) }
}

struct HTTPHeadersInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout HTTPHeaders) {
        carrier.replaceOrAdd(name: key, value: value)
    }
}

struct DictionaryInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}

extension String {
    /// A request target up to its `?` (read as bytes: a character-wise scan costs far more).
    var pathPart: String {
        guard let query = utf8.firstIndex(of: UInt8(ascii: "?")) else { return self }
        return String(self[..<query])
    }
}
