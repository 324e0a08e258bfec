import Metrics
import Prometheus
import Synchronization

/// Counters and histograms of one daemon: plain atomics for `/stats`, and swift-metrics
/// instruments backed by this daemon's own Prometheus registry for `/metrics` (no global
/// bootstrap, so several daemons can live in one test process).
public final class ProxyStats: Sendable {
    public enum Counter: Int, CaseIterable, Sendable {
        case requests, hits, misses, stale, bypass, refreshes, replays, logouts, upstreamErrors, invalidations

        var jsonName: String {
            switch self {
            case .upstreamErrors: return "upstream_errors"
            default: return "\(self)"
            }
        }
    }

    private let values: Mutex<[Int]>
    public let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory
    private let counters: [Metrics.Counter]
    private let upstreamLatency: Metrics.Timer
    private let requestLatency: Metrics.Timer
    private struct RequestKey: Hashable {
        var endpoint: String
        var cache: String
        var status: Int
    }

    private let requestsByStatus = Mutex<[RequestKey: Metrics.Counter]>([:])
    private let entriesGauge: Metrics.Gauge
    private let bytesGauge: Metrics.Gauge
    private let storageDegradedGauge: Metrics.Gauge
    private let storageFailures: Metrics.Counter
    private let reportedStorageFailures = Mutex(0)

    public init() {
        values = Mutex(Array(repeating: 0, count: Counter.allCases.count))
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [.milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                                                   .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
                                                   .seconds(1), .seconds(2), .seconds(5), .seconds(10)]
        self.factory = factory
        counters = Counter.allCases.map { Metrics.Counter(label: "concierge_\($0.jsonName)_total", dimensions: [], factory: factory) }
        upstreamLatency = Metrics.Timer(label: "concierge_upstream_duration_seconds", dimensions: [], preferredDisplayUnit: .seconds, factory: factory)
        requestLatency = Metrics.Timer(label: "concierge_request_duration_seconds", dimensions: [], preferredDisplayUnit: .seconds, factory: factory)
        entriesGauge = Metrics.Gauge(label: "concierge_cache_entries", dimensions: [], factory: factory)
        bytesGauge = Metrics.Gauge(label: "concierge_cache_bytes", dimensions: [], factory: factory)
        storageDegradedGauge = Metrics.Gauge(label: "concierge_storage_degraded", dimensions: [], factory: factory)
        storageFailures = Metrics.Counter(label: "concierge_storage_write_failures_total", dimensions: [], factory: factory)
    }

    public func increment(_ counter: Counter, by amount: Int = 1) {
        values.withLock { $0[counter.rawValue] += amount }
        counters[counter.rawValue].increment(by: amount)
    }

    public func value(_ counter: Counter) -> Int {
        values.withLock { $0[counter.rawValue] }
    }

    /// Counts one client request by endpoint and cache status.
    public func recordRequest(endpoint: String, cache: String, status: Int, duration: Duration) {
        increment(.requests)
        let key = RequestKey(endpoint: endpoint, cache: cache, status: status)
        let counter = requestsByStatus.withLock { map -> Metrics.Counter in
            if let c = map[key] { return c }
            let c = Metrics.Counter(label: "concierge_requests_by_endpoint_total",
                                    dimensions: [("endpoint", endpoint), ("cache", cache.isEmpty ? "NONE" : cache), ("status", "\(status)")],
                                    factory: factory)
            map[key] = c
            return c
        }
        counter.increment()
        requestLatency.recordNanoseconds(duration.nanoseconds)
    }

    public func recordUpstream(duration: Duration) {
        upstreamLatency.recordNanoseconds(duration.nanoseconds)
    }

    public func setCacheSize(entries: Int, bytes: Int) {
        entriesGauge.record(entries)
        bytesGauge.record(bytes)
    }

    /// `concierge_storage_degraded` (0 or 1) and `concierge_storage_write_failures_total`.
    public func setStorageHealth(degraded: Bool, failedWrites: Int) {
        storageDegradedGauge.record(degraded ? 1 : 0)
        let delta = reportedStorageFailures.withLock { reported -> Int in
            defer { reported = max(reported, failedWrites) }
            return max(0, failedWrites - reported)
        }
        if delta > 0 { storageFailures.increment(by: delta) }
    }

    /// The `/stats` JSON object.
    public func snapshot(entries: Int, bytes: Int) -> [String: Int] {
        var out: [String: Int] = [:]
        for c in Counter.allCases { out[c.jsonName] = value(c) }
        out["entries"] = entries
        out["bytes"] = bytes
        return out
    }

    public var hitRatio: Double {
        let hits = value(.hits) + value(.stale)
        let total = hits + value(.misses) + value(.bypass)
        return total == 0 ? 0 : Double(hits) / Double(total)
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (s, atto) = components
        return s * 1_000_000_000 + atto / 1_000_000_000
    }

    var seconds: Double { Double(nanoseconds) / 1e9 }
}
