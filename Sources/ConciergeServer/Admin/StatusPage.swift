import ConciergeCore
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ServiceLifecycle

/// The status page on the admin listener (docs/operations.md, "Status page").
///
/// `GET /ui` is one self-contained page (markup, style and script from this binary; no build
/// step, no CDN) that asks for the admin token once, keeps it in the tab's session storage and
/// calls the admin API with it; it needs no token itself, as it holds no data. `GET /ui/stream`
/// (token required) is what keeps it live: `text/event-stream` with the recent events first,
/// then every event as it is published (`event: event`) and a snapshot every second
/// (`event: snapshot`: counters, session, environment, failing upstreams, the latency and
/// per-endpoint series of `/metrics`, and every fifth one the fleet). The page gains no power:
/// each action it offers is an admin-API call behind a confirmation.
///
/// - Important: the stream ends when the daemon shuts down gracefully, so it never holds up
///   SIGTERM.
struct StatusPage: Sendable {
    let api: AdminAPI

    static let snapshotInterval: Duration = .seconds(1)
    /// The fleet's description costs three PostgreSQL queries: every fifth snapshot has it.
    static let fleetEvery = 5
    /// The `/metrics` series the page draws (latency percentiles, the endpoints table).
    static let streamedSeries = ["concierge_request_duration_seconds_bucket", "concierge_upstream_duration_seconds_bucket",
                                 "concierge_requests_by_endpoint_total"]

    static func page() -> Response {
        var headers: HTTPFields = [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"]
        headers[HTTPField.Name("Content-Security-Policy")!] = contentSecurityPolicy
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    /// The whole page: markup, then the style and the script inline.
    static let html = markup
        .replacingOccurrences(of: "/*STYLE*/", with: style)
        .replacingOccurrences(of: "/*SCRIPT*/", with: script)

    /// Only this page's own style and script run (by their hashes); it talks to this listener only.
    static let contentSecurityPolicy = "default-src 'none'; script-src '\(hash(script))'; style-src '\(hash(style))'; "
        + "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    static func hash(_ text: String) -> String {
        "sha256-" + Data(SHA256.hash(data: Data(text.utf8))).base64EncodedString()
    }

    func stream() -> Response {
        let page = self
        let body = ResponseBody { writer in
            let (lines, continuation) = AsyncStream.makeStream(of: ByteBuffer.self, bufferingPolicy: .bufferingNewest(256))
            continuation.yield(ByteBuffer(string: "retry: 2000\n: connected\n\n"))
            for event in page.api.control.events.recentEvents() { continuation.yield(Self.frame(event)) }
            let subscription = page.api.control.events.subscribe()
            try? await withGracefulShutdownHandler {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await event in subscription { continuation.yield(Self.frame(event)) }
                        continuation.finish()
                    }
                    group.addTask {
                        var tick = 0
                        while !Task.isCancelled {
                            continuation.yield(await page.snapshot(withFleet: tick % Self.fleetEvery == 0))
                            tick += 1
                            try await Task.sleep(for: Self.snapshotInterval)
                        }
                    }
                    defer { group.cancelAll() }
                    // Ends when the client goes (the write throws), the bus closes or shutdown begins.
                    for await line in lines { try await writer.write(line) }
                }
            } onGracefulShutdown: {
                continuation.finish()
            }
            continuation.finish()
            try await writer.finish(nil)
        }
        var headers: HTTPFields = [.contentType: "text/event-stream", .cacheControl: "no-cache"]
        headers[HTTPField.Name("X-Accel-Buffering")!] = "no"
        return Response(status: .ok, headers: headers, body: body)
    }

    static func frame(_ event: ConciergeEvent) -> ByteBuffer {
        let data: JSONValue = ["id": .int(Int64(event.id)), "type": .string(event.type),
                               "time": .double(event.time.timeIntervalSince1970), "data": event.data]
        return ByteBuffer(string: "id: \(event.id)\nevent: event\ndata: \(data.serialized)\n\n")
    }

    func snapshot(withFleet: Bool) async -> ByteBuffer {
        let control = api.control
        control.refreshGauges()
        let stats = control.stats.snapshot(entries: control.cache.entryCount, bytes: control.cache.byteCount)
        let series = String(decoding: control.stats.prometheusText(), as: UTF8.self)
            .split(separator: "\n")
            .filter { line in Self.streamedSeries.contains { line.hasPrefix($0) } }
            .joined(separator: "\n")
        var fields: [String: JSONValue] = [
            "time": .double(Date().timeIntervalSince1970),
            "stats": .object(stats.mapValues { .int(Int64($0)) }),
            "session": control.sessionDescription(),
            "environment": api.environmentDescription(),
            "upstreams_down": .array(control.downUpstreams().map(JSONValue.string)),
            "storage": .string(control.storageDegraded() ? "degraded" : "ok"),
            "series": .string(series),
        ]
        if withFleet { fields["fleet"] = await api.fleetDescription() }
        return ByteBuffer(string: "event: snapshot\ndata: \(JSONValue.object(fields).serialized)\n\n")
    }
}
