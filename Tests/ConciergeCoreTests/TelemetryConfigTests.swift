@testable import ConciergeCore
import Foundation
import Testing

/// `telemetry.traces`: the collector's address, sampling, and the export queue.
@Suite("Telemetry configuration")
struct TelemetryConfigTests {
    static func load(_ telemetry: String) throws(ConfigError) -> ConciergeConfig {
        try ConfigLoader.parse(yaml: "upstreams:\n  release: https://api.example.com\ntelemetry:\n" + telemetry)
    }

    static func issues(_ telemetry: String) -> [ConfigIssue] {
        do {
            _ = try load(telemetry)
            return []
        } catch {
            return error.issues
        }
    }

    @Test("without the section tracing is off; a full section loads")
    func fullSection() throws {
        let plain = try ConfigLoader.parse(yaml: "upstreams:\n  release: https://api.example.com\n")
        #expect(plain.telemetry.traces == nil)
        let config = try Self.load("""
              traces:
                endpoint: http://127.0.0.1:4318/
                sample_ratio: 0.25
                service_name: billing-proxy
                queue_size: 100
                export_delay: 200ms
                export_timeout: 3s
            """)
        let traces = try #require(config.telemetry.traces)
        #expect(traces.tracesURL == "http://127.0.0.1:4318/v1/traces")
        #expect(traces.sampleRatio == 0.25)
        #expect(traces.serviceName == "billing-proxy")
        #expect(traces.queueSize == 100)
        #expect(traces.exportDelay == .milliseconds(200))
        #expect(traces.exportTimeout == .seconds(3))
    }

    @Test("the defaults: ratio 0.05, service concierge, queue 2048, export every 5 s")
    func defaults() throws {
        let traces = try #require(try Self.load("  traces: { endpoint: \"https://collector.example.com:4318\" }").telemetry.traces)
        #expect(traces.tracesURL == "https://collector.example.com:4318/v1/traces")
        #expect((traces.sampleRatio, traces.serviceName, traces.queueSize) == (0.05, "concierge", 2048))
        #expect(traces.exportDelay == .seconds(5))
    }

    @Test("errors name the key path: a missing endpoint, grpc://, a ratio outside 0…1, a zero delay, an unknown key")
    func errors() {
        #expect(Self.issues("  traces: { sample_ratio: 0.5 }").map(\.path) == ["telemetry.traces.endpoint"])
        let grpc = Self.issues("  traces: { endpoint: \"grpc://127.0.0.1:4317\" }")
        #expect(grpc.map(\.path) == ["telemetry.traces.endpoint"])
        #expect(grpc.first?.message.contains("OTLP/HTTP") == true)
        #expect(Self.issues("  traces: { endpoint: \"127.0.0.1:4318\" }").map(\.path) == ["telemetry.traces.endpoint"])
        #expect(Self.issues("  traces: { endpoint: \"http://h:4318\", sample_ratio: 1.5 }").map(\.path) == ["telemetry.traces.sample_ratio"])
        #expect(Self.issues("  traces: { endpoint: \"http://h:4318\", sample_ratio: half }").map(\.path) == ["telemetry.traces.sample_ratio"])
        #expect(Self.issues("  traces: { endpoint: \"http://h:4318\", export_delay: 0s }").map(\.path) == ["telemetry.traces.export_delay"])
        #expect(Self.issues("  traces: { endpoint: \"http://h:4318\", queue_size: 0 }").map(\.path) == ["telemetry.traces.queue_size"])
        #expect(Self.issues("  traces: { endpoint: \"http://h:4318\", sampling: 1 }").map(\.path).first?.hasPrefix("telemetry.traces") == true)
        #expect(Self.issues("  metrics: {}").map(\.path).first?.hasPrefix("telemetry") == true)
    }
}
