import ConciergeCore
import Foundation
import Logging
import NIOHTTP1
import OTel
import ServiceLifecycle
import Synchronization
import Tracing

/// Traces of proxied requests (`telemetry.traces`, docs/tracing.md): decides once per request
/// whether it is traced, and starts its server span when it is.
///
/// The decision is parent-based head sampling, made here before the tracer is asked: a
/// request whose `traceparent` says sampled is traced (its trace continued); one whose
/// `traceparent` says not sampled is not (the header goes upstream unchanged, so the caller's
/// trace goes on past Concierge); one without is traced with the probability `sample_ratio`.
/// The tracer itself then samples every span it is asked for. An untraced request costs a
/// look for one header name, and with `sample_ratio: 0` nothing else.
///
/// Spans are exported by swift-otel's batch processor over OTLP/HTTP, a service of the
/// daemon's group: a bounded queue (`queue_size`), exports bounded by `export_timeout`, spans
/// that find the queue full or whose export failed counted in
/// `concierge_trace_spans_dropped_total`. A collector that is down or slow never reaches a
/// request: ending a span only hands it to the processor's stream.
final class RequestTracer: Sendable {
    let tracer: any Tracer
    let sampleRatio: Double

    init(tracer: any Tracer, sampleRatio: Double) {
        self.tracer = tracer
        self.sampleRatio = sampleRatio
    }

    /// The tracer for `traces` and the service that exports its spans (to run in the
    /// daemon's group). Resource attributes: the host, and the fleet's node and name.
    static func make(_ traces: ConciergeConfig.Traces, fleet: ConciergeConfig.Fleet?, stats: ProxyStats,
                     logger: Logger) throws -> (RequestTracer, any Service) {
        var configuration = OTel.Configuration.default
        configuration.serviceName = traces.serviceName
        var resource = ["host.name": ProcessInfo.processInfo.hostName]
        if let fleet {
            resource["concierge.node"] = fleet.node
            resource["concierge.fleet"] = fleet.name
        }
        configuration.resourceAttributes = resource
        let exportLog = TraceExportLog(logger: logger, stats: stats)
        configuration.diagnosticLogger = .custom(Logger(label: "concierge.traces") { _ in exportLog })
        configuration.diagnosticLogLevel = .warning
        configuration.propagators = [.traceContext]
        configuration.metrics.enabled = false
        configuration.logs.enabled = false
        // Sampling is decided before a span is asked for (``begin(method:target:headers:)``).
        configuration.traces.sampler = .alwaysOn
        configuration.traces.batchSpanProcessor.scheduleDelay = traces.exportDelay
        configuration.traces.batchSpanProcessor.exportTimeout = traces.exportTimeout
        configuration.traces.batchSpanProcessor.maxQueueSize = traces.queueSize
        configuration.traces.batchSpanProcessor.maxExportBatchSize = min(512, traces.queueSize)
        configuration.traces.otlpExporter.endpoint = traces.tracesURL
        configuration.traces.otlpExporter.`protocol` = .httpProtobuf
        configuration.traces.otlpExporter.timeout = traces.exportTimeout
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        retained.withLock { $0.append((backend.factory, backend.service)) }
        return (RequestTracer(tracer: backend.factory, sampleRatio: traces.sampleRatio), backend.service)
    }

    /// Every tracer made, kept for the life of the process: swift-otel's OTLP/HTTP exporter
    /// shuts its HTTP client down synchronously in `deinit`, which traps when the last
    /// reference goes on an event loop (a request's trace released there). Its service has
    /// shut the client down already; one tracer per daemon is kept.
    private static let retained = Mutex<[(any Tracer, any Service)]>([])

    /// The request's trace, or `nil` when it is not traced (see the type's documentation).
    func begin(_ incoming: IncomingRequest) -> RequestTrace? {
        begin(method: incoming.method, target: incoming.target, headers: incoming.headers)
    }

    func begin(method: String, target: String, headers: HTTPHeaders) -> RequestTrace? {
        var parent: InstrumentationContext? = nil
        if let traceparent = Self.traceparent(headers) {
            switch Self.sampledFlag(traceparent) {
            case true?:
                var context = InstrumentationContext.topLevel
                tracer.extract(headers, into: &context, using: HTTPHeadersExtractor())
                parent = context
            case false?:
                return nil
            case nil:
                break  // Malformed: as if absent.
            }
        }
        if parent == nil {
            guard sampleRatio > 0, sampleRatio >= 1 || Double.random(in: 0..<1) < sampleRatio else { return nil }
        }
        let span = tracer.startSpan(method, context: parent ?? .topLevel, ofKind: .server)
        var attributes = SpanAttributes()
        attributes["http.request.method"] = method
        attributes["url.path"] = target.pathPart
        attributes["url.scheme"] = "http"
        span.attributes = attributes
        return RequestTrace(tracer: tracer, server: span)
    }

    /// The first `traceparent` field's value, found by the name's length first (most
    /// requests have none: one comparison of lengths per field).
    static func traceparent(_ headers: HTTPHeaders) -> String? {
        for (name, value) in headers where name.utf8.count == 11 && ASCIICase.equals(name, lowercase: "traceparent") {
            return value
        }
        return nil
    }

    /// The sampled flag of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`); `nil` when
    /// the value is malformed.
    static func sampledFlag(_ value: String) -> Bool? {
        let parts = value.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].utf8.count == 2, parts[0] != "ff", parts[1].utf8.count == 32, parts[2].utf8.count == 16,
              parts[3].utf8.count == 2, let flags = UInt8(parts[3], radix: 16),
              parts[1].contains(where: { $0 != "0" }), parts[2].contains(where: { $0 != "0" }),
              UInt64(parts[2], radix: 16) != nil, parts[1].allSatisfy(\.isHexDigit) else { return nil }
        return flags & 1 == 1
    }
}

/// swift-otel's diagnostic log: what its batch processor and exporter report. Spans dropped
/// because the queue was full, and the spans of an export that failed (a collector down,
/// slow or refusing), are counted; the failure is logged at most once a minute.
struct TraceExportLog: LogHandler {
    let logger: Logger
    let stats: ProxyStats
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .warning

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let message = "\(event.message)"
        let merged = metadata.merging(event.metadata ?? [:]) { _, explicit in explicit }
        var lost = 0
        if message.hasPrefix("Spans were dropped"), let count = merged["dropped_count"].flatMap({ Int("\($0)") }) {
            lost = count
        } else if message.hasPrefix("Failed to export batch"), let count = merged["batch_size"].flatMap({ Int("\($0)") }) {
            lost = count
        }
        if lost > 0 { stats.increment(.traceSpansDropped, by: lost) }
        if Self.warned.shouldReport() {
            logger.warning("trace export: \(message)", metadata: ["error": "\(merged["error.message"] ?? merged["error"] ?? "-")",
                                                                 "spans_lost": "\(lost)"])
        }
    }

    /// Once a minute at most.
    static let warned = OncePerInterval(.seconds(60))
}

/// Says yes at most once per interval (a warning that would otherwise repeat every export).
final class OncePerInterval: Sendable {
    private let interval: Duration
    private let last = Mutex<ContinuousClock.Instant?>(nil)

    init(_ interval: Duration) { self.interval = interval }

    func shouldReport() -> Bool {
        let now = ContinuousClock.now
        return last.withLock { last in
            if let previous = last, now - previous < interval { return false }
            last = now
            return true
        }
    }
}
