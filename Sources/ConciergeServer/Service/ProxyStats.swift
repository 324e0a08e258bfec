import ConciergeCore
import NIOPosix
import Prometheus
import Synchronization

/// The daemon's counters, each kept once (an atomic) and rendered two ways: the `/stats`
/// JSON object and Prometheus text on `/metrics`. Request counters come from the finished
/// request's ``RequestReport`` in ``record(_:status:duration:)``, the one place a request is
/// counted; event counters (refreshes, logouts, upstream errors, invalidations) are bumped
/// where the event happens, once. Histograms, gauges and the per-endpoint breakdown live in
/// this daemon's own Prometheus registry (no global bootstrap, so several daemons can live
/// in one test process).
public final class ProxyStats: Sendable {
    public enum Counter: Int, CaseIterable, Sendable {
        case requests, hits, misses, stale, bypass, refreshes, replays, logouts, upstreamErrors, invalidations
        case tokenRequestFailures, loopGuardTrips
        /// An unsafe request's invalidation in `mode: http` that could not happen (a storage error).
        case httpInvalidationsSkipped

        var jsonName: String {
            switch self {
            case .upstreamErrors: return "upstream_errors"
            case .tokenRequestFailures: return "token_request_failures"
            case .loopGuardTrips: return "loop_guard_trips"
            case .httpInvalidationsSkipped: return "http_invalidations_skipped"
            default: return "\(self)"
            }
        }

        var metricName: String { "concierge_\(jsonName)_total" }

        var help: String {
            switch self {
            case .requests: return "Client requests answered."
            case .hits: return "Requests answered from the cache."
            case .misses: return "Cacheable requests that went to the upstream."
            case .stale: return "Expired entries served (stale-if-error, stale-while-revalidate)."
            case .bypass: return "Cache lookups skipped on the client's request."
            case .refreshes: return "Calls to the token endpoint."
            case .replays: return "Requests replayed after a token refresh."
            case .logouts: return "Sessions dropped (logout code, failed refresh, admin)."
            case .upstreamErrors: return "Upstream failures: refused connections, timeouts, 5xx."
            case .invalidations: return "Cache invalidations through the admin API and write endpoints."
            case .tokenRequestFailures: return "Token requests (refresh, app token) that gave no token: refused, failed or unanswered."
            case .loopGuardTrips: return "Token requests refused by the loop guard (session.max_refreshes)."
            case .httpInvalidationsSkipped: return "Invalidations an unsafe request asked for in mode http that storage could not make."
            }
        }
    }

    /// One atomic per counter.
    private final class Cell: Sendable {
        let value = Atomic<Int>(0)
    }

    private let cells: [Cell] = Counter.allCases.map { _ in Cell() }
    public let registry: PrometheusCollectorRegistry
    private let upstreamLatency: DurationHistogram
    private let latencyBuckets: [Duration]
    private struct RequestKey: Hashable {
        var endpoint: String
        var cache: CacheStatus?
        var status: Int
    }

    /// The per-key counters and the per-endpoint latency histograms, made on first use.
    private struct Instruments {
        var counters: [RequestKey: Prometheus.Counter] = [:]
        var latencies: [String: DurationHistogram] = [:]
    }

    private let instruments = Mutex(Instruments())
    private let entriesGauge: Gauge
    private let bytesGauge: Gauge
    private let storageDegradedGauge: Gauge
    private let storageFailures: Prometheus.Counter
    private let reportedStorageFailures = Mutex(0)

    public init() {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        let buckets: [Duration] = [.milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                                   .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
                                   .seconds(1), .seconds(2), .seconds(5), .seconds(10)]
        upstreamLatency = registry.makeDurationHistogram(descriptor: .named("concierge_upstream_duration_seconds",
            "Time of upstream exchanges, in seconds."), buckets: buckets)
        latencyBuckets = buckets
        entriesGauge = registry.makeGauge(descriptor: .named("concierge_cache_entries", "Entries in the cache."))
        bytesGauge = registry.makeGauge(descriptor: .named("concierge_cache_bytes", "Bytes of cached replies."))
        storageDegradedGauge = registry.makeGauge(descriptor: .named("concierge_storage_degraded",
            "1 while SQLite writes fail (disk full, I/O error), else 0."))
        storageFailures = registry.makeCounter(descriptor: .named("concierge_storage_write_failures_total", "SQLite writes that failed."))
    }

    public func increment(_ counter: Counter, by amount: Int = 1) {
        cells[counter.rawValue].value.add(amount, ordering: .relaxed)
    }

    public func value(_ counter: Counter) -> Int {
        cells[counter.rawValue].value.load(ordering: .relaxed)
    }

    /// Counts one finished client request: `requests`, its cache outcome, its replays, the
    /// per-endpoint breakdown and the endpoint's latency histogram.
    public func record(_ report: RequestReport, status: Int, duration: Duration) {
        increment(.requests)
        switch report.cache {
        case .hit?: increment(.hits)
        case .miss?: increment(.misses)
        case .stale?: increment(.stale)
        case .bypass?: increment(.bypass)
        case nil: break
        }
        if report.replays > 0 { increment(.replays, by: report.replays) }
        let key = RequestKey(endpoint: report.endpoint, cache: report.cache, status: status)
        let last = instruments(for: key)
        last.counter.increment()
        last.latency.recordNanoseconds(duration.nanoseconds)
    }

    /// The last request key this thread counted, its counter and its endpoint's latency
    /// histogram: a run of requests of one kind (an event loop serving hits of one endpoint)
    /// skips the shared maps and their lock.
    private final class LastInstruments: Sendable {
        let key: RequestKey
        let counter: Prometheus.Counter
        let latency: DurationHistogram

        init(key: RequestKey, counter: Prometheus.Counter, latency: DurationHistogram) {
            (self.key, self.counter, self.latency) = (key, counter, latency)
        }
    }

    private let lastInstruments = ThreadSpecificVariable<LastInstruments>()

    private func instruments(for key: RequestKey) -> LastInstruments {
        if let last = lastInstruments.currentValue, last.key == key { return last }
        let made = instruments.withLock { made -> LastInstruments in
            let counter = made.counters[key] ?? registry.makeCounter(descriptor: .named("concierge_requests_by_endpoint_total",
                "Client requests by endpoint, cache status and HTTP status."),
                labels: [("endpoint", key.endpoint), ("cache", key.cache?.rawValue ?? "NONE"), ("status", "\(key.status)")])
            made.counters[key] = counter
            let latency = made.latencies[key.endpoint] ?? registry.makeDurationHistogram(
                descriptor: .named("concierge_request_duration_seconds", "Time from request to reply, in seconds, by endpoint."),
                labels: [("endpoint", key.endpoint)], buckets: latencyBuckets)
            made.latencies[key.endpoint] = latency
            return LastInstruments(key: key, counter: counter, latency: latency)
        }
        lastInstruments.currentValue = made
        return made
    }

    public func recordUpstream(duration: Duration) {
        upstreamLatency.recordNanoseconds(duration.nanoseconds)
    }

    /// The fleet's metrics, registered once a daemon has `fleet:`.
    private struct FleetMetrics: Sendable {
        let up: Gauge
        let appliedSeq: Gauge
        let tokenRequests: Prometheus.Counter
        let applyDelay: DurationHistogram
    }

    private let fleet = Mutex<FleetMetrics?>(nil)

    /// Registers `concierge_fleet_up`, `concierge_fleet_applied_seq`,
    /// `concierge_fleet_token_requests_total` and `concierge_fleet_invalidation_delay_seconds`.
    public func enableFleetMetrics() {
        fleet.withLock { metrics in
            guard metrics == nil else { return }
            let buckets: [Duration] = [.milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                                       .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5)]
            metrics = FleetMetrics(
                up: registry.makeGauge(descriptor: .named("concierge_fleet_up", "1 while the fleet's PostgreSQL answers, else 0.")),
                appliedSeq: registry.makeGauge(descriptor: .named("concierge_fleet_applied_seq",
                    "The last fleet invalidation applied here.")),
                tokenRequests: registry.makeCounter(descriptor: .named("concierge_fleet_token_requests_total",
                    "Token requests this node made for the fleet.")),
                applyDelay: registry.makeDurationHistogram(descriptor: .named("concierge_fleet_invalidation_delay_seconds",
                    "From another node's invalidation commit to its application here, in seconds."), buckets: buckets))
        }
    }

    public func setFleet(up: Bool, appliedSeq: Int64) {
        guard let metrics = fleet.withLock({ $0 }) else { return }
        metrics.up.record(Int64(up ? 1 : 0))
        metrics.appliedSeq.record(appliedSeq)
    }

    public func countFleetTokenRequest() {
        fleet.withLock { $0 }?.tokenRequests.increment()
    }

    public func recordFleetApplyDelay(_ seconds: Double) {
        fleet.withLock { $0 }?.applyDelay.recordNanoseconds(Int64(seconds * 1e9))
    }

    public func setCacheSize(entries: Int, bytes: Int) {
        entriesGauge.record(Int64(entries))
        bytesGauge.record(Int64(bytes))
    }

    /// `concierge_storage_degraded` (0 or 1) and `concierge_storage_write_failures_total`.
    public func setStorageHealth(degraded: Bool, failedWrites: Int) {
        storageDegradedGauge.record(Int64(degraded ? 1 : 0))
        let delta = reportedStorageFailures.withLock { reported -> Int in
            defer { reported = max(reported, failedWrites) }
            return max(0, failedWrites - reported)
        }
        if delta > 0 { storageFailures.increment(by: Int64(delta)) }
    }

    /// The `/stats` JSON object.
    public func snapshot(entries: Int, bytes: Int) -> [String: Int] {
        var out: [String: Int] = [:]
        for c in Counter.allCases { out[c.jsonName] = value(c) }
        out["entries"] = entries
        out["bytes"] = bytes
        return out
    }

    /// The Prometheus text of `/metrics`: the counters, then the registry's instruments.
    public func prometheusText() -> [UInt8] {
        var text = ""
        for c in Counter.allCases {
            text += "# HELP \(c.metricName) \(c.help)\n# TYPE \(c.metricName) counter\n\(c.metricName) \(value(c))\n"
        }
        var bytes = Array(text.utf8)
        registry.emit(into: &bytes)
        return bytes
    }

    public var hitRatio: Double {
        let hits = value(.hits) + value(.stale)
        let total = hits + value(.misses) + value(.bypass)
        return total == 0 ? 0 : Double(hits) / Double(total)
    }
}

extension MetricNameDescriptor {
    /// A metric named in full (`concierge_…_total`, `…_seconds`): swift-prometheus joins the
    /// parts it is given and drops empty ones, so the whole name goes in `metricName`.
    static func named(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }
}

extension Duration {
    var nanoseconds: Int64 {
        // Within ±9.2 s (a request's time, every histogram sample) the attoseconds fit in 64
        // bits: one 64-bit division instead of `components`' 128-bit arithmetic (about 200
        // instructions a call, several a request). `_low` and `_high` are the frozen type's
        // stored halves of its 128-bit count of attoseconds.
        if _high == Int64(bitPattern: _low) >> 63 { return Int64(bitPattern: _low) / 1_000_000_000 }
        let (s, atto) = components
        return s * 1_000_000_000 + atto / 1_000_000_000
    }

    var seconds: Double { Double(nanoseconds) / 1e9 }
}
