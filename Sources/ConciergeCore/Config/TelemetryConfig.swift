import Foundation
import Yams

extension ConciergeConfig {
    /// `telemetry`: what Concierge exports about itself beyond `/metrics` and the logs.
    public struct Telemetry: Sendable {
        /// `telemetry.traces`; `nil` without it: no trace is started, nothing is exported, and
        /// a client's `traceparent` goes upstream unchanged like any other header.
        public var traces: Traces? = nil
    }

    /// `telemetry.traces`: OpenTelemetry spans over OTLP/HTTP (protobuf), head-sampled.
    public struct Traces: Sendable, Equatable {
        /// The collector's base URL (`http://host:4318`); spans go to `<endpoint>/v1/traces`.
        public var endpoint: String
        /// The share of requests without a sampled parent that start a trace (0…1). A request
        /// whose `traceparent` says sampled is always traced (parent-based).
        public var sampleRatio: Double = 0.05
        public var serviceName = "concierge"
        /// The most finished spans waiting for export; beyond it spans are dropped (and counted).
        public var queueSize = 2048
        /// How long finished spans wait to be exported in one batch.
        public var exportDelay: Duration = .seconds(5)
        /// The most one export may take (a collector that hangs).
        public var exportTimeout: Duration = .seconds(10)

        /// The OTLP/HTTP URL spans are posted to.
        public var tracesURL: String {
            endpoint.hasSuffix("/") ? "\(endpoint)v1/traces" : "\(endpoint)/v1/traces"
        }
    }
}

extension ConfigLoader {
    /// `telemetry`: `traces` (endpoint, sample ratio, service name, queue and export timing).
    static func telemetrySection(_ node: Node?, _ r: YAMLReader) -> ConciergeConfig.Telemetry {
        var telemetry = ConciergeConfig.Telemetry()
        guard let node, !YAMLReader.isNull(node), let m = r.mapping(node, "telemetry", allowed: ["traces"]) else { return telemetry }
        if let n = m["traces"], !YAMLReader.isNull(n) { telemetry.traces = tracesSection(n, r) }
        return telemetry
    }

    static func tracesSection(_ node: Node, _ r: YAMLReader) -> ConciergeConfig.Traces? {
        let path = "telemetry.traces"
        guard let m = r.mapping(node, path, allowed: ["endpoint", "sample_ratio", "service_name", "queue_size", "export_delay", "export_timeout"])
        else { return nil }
        guard let endpointNode = m["endpoint"] else {
            r.fail("\(path).endpoint", node, "missing: the collector's OTLP/HTTP address (http://127.0.0.1:4318)")
            return nil
        }
        guard let endpoint = r.nonEmptyString(endpointNode, "\(path).endpoint"), let url = validEndpoint(endpoint, endpointNode, r) else { return nil }
        var traces = ConciergeConfig.Traces(endpoint: url)
        if let n = m["sample_ratio"], let text = r.string(n, "\(path).sample_ratio") {
            if let ratio = Double(text), ratio >= 0, ratio <= 1 {
                traces.sampleRatio = ratio
            } else {
                r.fail("\(path).sample_ratio", n, "expected a number from 0 to 1, found '\(text)'")
            }
        }
        if let n = m["service_name"], let s = r.nonEmptyString(n, "\(path).service_name") { traces.serviceName = s }
        if let n = m["queue_size"], let size = r.int(n, "\(path).queue_size", range: 1...1_000_000) { traces.queueSize = size }
        if let n = m["export_delay"], let d = r.duration(n, "\(path).export_delay") {
            if d > .zero { traces.exportDelay = d } else { r.fail("\(path).export_delay", n, "must be more than 0") }
        }
        if let n = m["export_timeout"], let d = r.duration(n, "\(path).export_timeout") {
            if d > .zero { traces.exportTimeout = d } else { r.fail("\(path).export_timeout", n, "must be more than 0") }
        }
        return traces
    }

    /// An `http://` or `https://` URL with a host. OTLP/gRPC (`grpc://`) is not built in.
    private static func validEndpoint(_ text: String, _ node: Node, _ r: YAMLReader) -> String? {
        let path = "telemetry.traces.endpoint"
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            r.fail(path, node, "expected a URL like http://127.0.0.1:4318, found '\(text)'")
            return nil
        }
        if scheme == "grpc" {
            r.fail(path, node, "OTLP/gRPC is not built into this Concierge; use the collector's OTLP/HTTP port (http://host:4318)")
            return nil
        }
        guard scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty else {
            r.fail(path, node, "expected an http:// or https:// URL with a host, found '\(text)'")
            return nil
        }
        return text
    }
}
