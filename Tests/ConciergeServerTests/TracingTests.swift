import ConciergeCore
import ConciergeSampleAPI
@testable import ConciergeServer
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// `telemetry.traces` against a real OTLP/HTTP receiver (``OTLPReceiver``: the protobuf decoded
/// by `opentelemetry-proto`): the spans of a miss with a replay, a hit and a coalesced wait; W3C
/// context continued upstream; sampling; a collector that is down.
@Suite("Tracing", .serialized, .enabled(if: OTLPReceiver.python != nil, "needs .venv-otel (run .ci/run)"))
struct TracingTests {
    static func telemetry(_ endpoint: String, ratio: String = "1", extra: String = "") -> String {
        """
        telemetry:
          traces:
            endpoint: \(endpoint)
            sample_ratio: \(ratio)
            service_name: concierge-test
            export_delay: 50ms
            export_timeout: 2s
        \(extra)
        """
    }

    static let endpoints = TestConfig.defaultEndpoints.replacingOccurrences(
        of: #"- { name: slow, match: "GET /api/slow", timeout: 2s }"#,
        with: #"- { name: slow, match: "GET /api/slow", timeout: 5s, cache: { ttl: 60s } }"#)

    static func withReceiver(_ body: (OTLPReceiver) async throws -> Void) async throws {
        let receiver = try await OTLPReceiver.start()
        do {
            try await body(receiver)
            await receiver.stop()
        } catch {
            await receiver.stop()
            throw error
        }
    }

    static func servers(_ spans: [OTLPReceiver.Span], route: String) -> [OTLPReceiver.Span] {
        spans.filter { $0.kind == OTLPReceiver.Span.serverKind && $0.string("http.route") == route }
    }

    static func children(of parent: OTLPReceiver.Span, in spans: [OTLPReceiver.Span]) -> [OTLPReceiver.Span] {
        spans.filter { $0.traceID == parent.traceID && $0.parentSpanID == parent.spanID }
    }

    @Test("a miss with a token expiry: a server span, two upstream client spans (the replay the second), a token request linked from the request")
    func missWithReplay() async throws {
        try await Self.withReceiver { receiver in
            try await ConciergeTestRig.with(endpoints: Self.endpoints, extra: Self.telemetry(receiver.baseURL)) { rig in
                try await rig.login()
                rig.api.state.expireAllAccessTokens()
                let reply = try await rig.get("/api/user/info")
                #expect(reply.code == 200)
                #expect(reply.header("X-Concierge-Replays") == "1")
                let spans = try await receiver.waitForSpans { spans in
                    guard let server = Self.servers(spans, route: "userInfo").first else { return false }
                    return Self.children(of: server, in: spans).count >= 3
                }
                let server = try #require(Self.servers(spans, route: "userInfo").first, "\(spans)")
                #expect(server.name == "GET userInfo")
                #expect(server.string("concierge.cache") == "MISS")
                #expect(server.int("concierge.replays") == 1)
                #expect(server.int("http.response.status_code") == 200)
                #expect(server.string("concierge.session") == "default")
                #expect(server.resource["service.name"]?.stringValue == "concierge-test")
                let children = Self.children(of: server, in: spans)
                let attempts = children.filter { $0.kind == OTLPReceiver.Span.clientKind }
                #expect(attempts.count == 2, "\(children)")
                #expect(attempts.compactMap { $0.int("http.request.resend_count") } == [1])
                let token = try #require(children.first { $0.name == "token request" }, "\(children)")
                #expect(token.string("concierge.token") == "refresh")
                #expect(server.links.contains { $0.spanID == token.spanID }, "the server span links to the token request")
                // The request's log line carries its trace and span ids; a line the token
                // request wrote carries the ids of its own span.
                #expect(rig.logs.lines.contains { $0.contains(server.traceID) && $0.contains(server.spanID) && $0.contains("/api/user/info") })
                #expect(rig.logs.lines.contains { $0.contains("access token refreshed") && $0.contains("trace_id=\(token.traceID)")
                    && $0.contains("span_id=\(token.spanID)") }, "\(rig.logs.lines.filter { $0.contains("refreshed") })")
            }
        }
    }

    @Test("the log lines a traced request writes on its way carry its trace and span ids, on the loop's miss and in a task")
    func logLinesCarryIDs() async throws {
        try await Self.withReceiver { receiver in
            try await ConciergeTestRig.with(endpoints: Self.endpoints, extra: Self.telemetry(receiver.baseURL)) { rig in
                #expect(try await rig.get("/api/fail?status=500").status == 502)
                #expect(try await rig.get("/api/nonjson").status == 502)
                let spans = try await receiver.waitForSpans { !Self.servers($0, route: "fail").isEmpty && !Self.servers($0, route: "nonJSON").isEmpty }
                for (route, words) in [("fail", "upstream answered an HTTP error"), ("nonJSON", "upstream reply is not JSON")] {
                    let server = try #require(Self.servers(spans, route: route).first, "\(spans)")
                    #expect(rig.logs.lines.contains { $0.contains(words) && $0.contains("trace_id=\(server.traceID)")
                        && $0.contains("span_id=\(server.spanID)") }, "\(words): \(rig.logs.lines.filter { $0.contains(words) })")
                }
            }
        }
    }

    @Test("a hit: a server span with concierge.cache=HIT and no client span")
    func hit() async throws {
        try await Self.withReceiver { receiver in
            try await ConciergeTestRig.with(endpoints: Self.endpoints, extra: Self.telemetry(receiver.baseURL)) { rig in
                _ = try await rig.get("/api/items?page=1")
                let hit = try await rig.get("/api/items?page=1")
                #expect(hit.header("X-Cache") == "HIT")
                let spans = try await receiver.waitForSpans { Self.servers($0, route: "itemList").count >= 2 }
                let servers = Self.servers(spans, route: "itemList")
                let miss = try #require(servers.first { $0.string("concierge.cache") == "MISS" }, "\(spans)")
                let hitSpan = try #require(servers.first { $0.string("concierge.cache") == "HIT" }, "\(spans)")
                #expect(Self.children(of: miss, in: spans).filter { $0.kind == OTLPReceiver.Span.clientKind }.count == 1)
                #expect(Self.children(of: hitSpan, in: spans).isEmpty)
                #expect(hitSpan.traceID != miss.traceID, "each request without a parent starts its own trace")
            }
        }
    }

    @Test("a coalesced wait: the request that waited for another's upstream call has a `coalesced wait` span and no client span")
    func coalescedWait() async throws {
        try await Self.withReceiver { receiver in
            try await ConciergeTestRig.with(endpoints: Self.endpoints, extra: Self.telemetry(receiver.baseURL)) { rig in
                async let first = rig.get("/api/slow?ms=600")
                // The second arrives while the first waits for the upstream.
                #expect(await eventually { rig.api.state.calls("/api/slow") == 1 })
                let second = try await rig.get("/api/slow?ms=600")
                #expect(try await first.code == 200)
                #expect(second.code == 200)
                #expect(rig.api.state.calls("/api/slow") == 1)
                let spans = try await receiver.waitForSpans { spans in
                    spans.contains { $0.name == "coalesced wait" } && Self.servers(spans, route: "slow").count == 2
                }
                let wait = try #require(spans.first { $0.name == "coalesced wait" }, "\(spans)")
                let waiter = try #require(Self.servers(spans, route: "slow").first { $0.spanID == wait.parentSpanID }, "\(spans)")
                #expect(Self.children(of: waiter, in: spans).filter { $0.kind == OTLPReceiver.Span.clientKind }.isEmpty)
                #expect(waiter.string("concierge.cache") == "MISS")
            }
        }
    }

    @Test("a client's sampled traceparent is continued: the upstream sees the same trace id and Concierge's client span as parent")
    func traceparentContinued() async throws {
        let traceID = "4bf92f3577b34da6a3ce929d0e0e4736", parentID = "00f067aa0ba902b7"
        try await Self.withReceiver { receiver in
            try await ConciergeTestRig.with(endpoints: Self.endpoints, extra: Self.telemetry(receiver.baseURL, ratio: "0")) { rig in
                let reply = try await rig.get("/api/items/7", headers: [("traceparent", "00-\(traceID)-\(parentID)-01"),
                                                                        ("tracestate", "vendor=abc")])
                #expect(reply.code == 200)
                let upstream = try #require(rig.api.state.lastRequest("/api/items/7")?.headers["traceparent"])
                let parts = upstream.split(separator: "-").map(String.init)
                #expect(parts.count == 4 && parts[1] == traceID && parts[3] == "01", "\(upstream)")
                #expect(rig.api.state.lastRequest("/api/items/7")?.headers["tracestate"] == "vendor=abc")
                let spans = try await receiver.waitForSpans { Self.servers($0, route: "item").count == 1 && $0.count >= 2 }
                let server = try #require(Self.servers(spans, route: "item").first, "\(spans)")
                #expect(server.traceID == traceID)
                #expect(server.parentSpanID == parentID, "the server span's parent is the client's span")
                let client = try #require(Self.children(of: server, in: spans).first { $0.kind == OTLPReceiver.Span.clientKind })
                #expect(parts.count == 4 && parts[2] == client.spanID, "the upstream's parent is Concierge's client span")
            }
        }
    }

    @Test("sample_ratio 0: nothing exported, a not-sampled traceparent goes upstream unchanged, a sampled parent is followed")
    func ratioZero() async throws {
        let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        let sampledTrace = "5bf92f3577b34da6a3ce929d0e0e4736"
        try await Self.withReceiver { receiver in
            try await ConciergeTestRig.with(endpoints: Self.endpoints, extra: Self.telemetry(receiver.baseURL, ratio: "0")) { rig in
                _ = try await rig.get("/api/items/1", headers: [("traceparent", unsampled)])
                #expect(rig.api.state.lastRequest("/api/items/1")?.headers["traceparent"] == unsampled)
                _ = try await rig.get("/api/items/2")
                #expect(rig.api.state.lastRequest("/api/items/2")?.headers["traceparent"] == nil)
                for _ in 0..<3 { _ = try await rig.get("/api/items/2") }
                // Then a sampled parent: its spans are the only ones exported.
                _ = try await rig.get("/api/items/3", headers: [("traceparent", "00-\(sampledTrace)-00f067aa0ba902b7-01")])
                let spans = try await receiver.waitForSpans { Self.servers($0, route: "item").count >= 1 }
                #expect(!spans.isEmpty)
                #expect(spans.allSatisfy { $0.traceID == sampledTrace }, "\(spans)")
                #expect(Self.servers(spans, route: "item").count == 1)
            }
        }
    }

    @Test("in a fleet, a traced token request has a `fleet lock wait` child", .enabled(if: PostgresCluster.isAvailable))
    func fleetLockWait() async throws {
        try await PostgresCluster.withAPI { cluster, api in
            try await Self.withReceiver { receiver in
                try await FleetTokenTests.withNodes(1, cluster: cluster, endpoints: Self.endpoints, extra: Self.telemetry(receiver.baseURL),
                                                    api: api, environment: [:]) { rigs in
                    try await rigs[0].login()
                    api.state.expireAllAccessTokens()
                    #expect(try await rigs[0].get("/api/user/info").code == 200)
                    let spans = try await receiver.waitForSpans { spans in spans.contains { $0.name == "fleet lock wait" } && spans.contains { $0.name == "token request" } }
                    let token = try #require(spans.first { $0.name == "token request" }, "\(spans)")
                    let wait = try #require(spans.first { $0.name == "fleet lock wait" }, "\(spans)")
                    #expect(wait.parentSpanID == token.spanID && wait.traceID == token.traceID)
                }
            }
        }
    }

    @Test("a collector that is down: every reply as without tracing, the spans lost counted in /metrics")
    func collectorDown() async throws {
        let extra = Self.telemetry("http://127.0.0.1:1", extra: "    queue_size: 4").replacingOccurrences(of: "export_timeout: 2s", with: "export_timeout: 300ms")
        try await ConciergeTestRig.with(endpoints: Self.endpoints, extra: extra) { rig in
            for page in 0..<40 {
                let reply = try await rig.get("/api/items?page=\(page % 4)")
                #expect(reply.status == 200 && reply.code == 200)
            }
            let counted = await eventually(.seconds(15)) {
                let metrics = (try? await rig.admin(.GET, "/metrics").text) ?? ""
                guard let line = metrics.split(separator: "\n").first(where: { $0.hasPrefix("concierge_trace_spans_dropped_total ") }),
                      let value = Int(line.split(separator: " ").last ?? "") else { return false }
                return value > 0
            }
            #expect(counted, "concierge_trace_spans_dropped_total rises")
            #expect(try await rig.admin(.GET, "/stats").json?[path: "trace_spans_dropped"]?.intValue ?? 0 > 0)
        }
    }
}

/// The W3C `traceparent` reading the sampling decision rests on.
@Suite("Trace context")
struct TraceContextTests {
    @Test("the sampled flag of a well-formed traceparent; nil for a malformed one")
    func sampledFlag() {
        #expect(RequestTracer.sampledFlag("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") == true)
        #expect(RequestTracer.sampledFlag("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00") == false)
        #expect(RequestTracer.sampledFlag("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03") == true)
        // A later version may add fields after the flags.
        #expect(RequestTracer.sampledFlag("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra") == true)
        for malformed in ["", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e473z-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz"] {
            #expect(RequestTracer.sampledFlag(malformed) == nil, "\(malformed)")
        }
    }

    @Test("the traceparent field is found whatever its case, and only that field")
    func traceparentField() {
        #expect(RequestTracer.traceparent(["TraceParent": "x", "Host": "a"]) == "x")
        #expect(RequestTracer.traceparent(["tracestate": "y", "Host": "a"]) == nil)
    }
}
