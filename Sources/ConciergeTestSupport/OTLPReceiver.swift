import ConciergeCore
import Foundation

/// A real OTLP/HTTP trace receiver for tests: `Tests/Fixtures/otlp-receiver/receiver.py`
/// accepts `POST /v1/traces`, decodes the protobuf with PyPI's `opentelemetry-proto`, and
/// hands the spans back as JSON; on a free loopback port, stopped by its PID.
///
/// The Python comes from `CONCIERGE_OTEL_PYTHON`, else the repository's `.venv-otel`
/// (`.ci/run` installs `opentelemetry-proto` there).
public final class OTLPReceiver: Sendable {
    public let port: Int
    private let process: ChildProcess

    /// One span as the receiver decoded it.
    public struct Span: Sendable, CustomStringConvertible {
        public var traceID: String
        public var spanID: String
        public var parentSpanID: String
        public var name: String
        /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client.
        public var kind: Int
        public var attributes: [String: JSONValue]
        public var links: [(traceID: String, spanID: String)]
        /// OTLP's status code: 0 unset, 1 ok, 2 error.
        public var statusCode: Int
        public var resource: [String: JSONValue]

        public static let serverKind = 2, clientKind = 3, internalKind = 1

        public func string(_ key: String) -> String? { attributes[key]?.stringValue }
        public func int(_ key: String) -> Int? { attributes[key]?.intValue }

        public var description: String {
            "\(name) kind=\(kind) trace=\(traceID) span=\(spanID) parent=\(parentSpanID) \(attributes) links=\(links.map(\.spanID))"
        }
    }

    /// The interpreter with `opentelemetry-proto`, if this machine has one.
    public static var python: String? {
        let candidates = [ProcessInfo.processInfo.environment["CONCIERGE_OTEL_PYTHON"], OAuthProvider.repositoryRoot + "/.venv-otel/bin/python"]
        return candidates.compactMap { $0 }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Starts the receiver and waits (bounded) until it serves.
    public static func start() async throws -> OTLPReceiver {
        guard let python else { throw ReceiverError("no Python with opentelemetry-proto: set CONCIERGE_OTEL_PYTHON or run .ci/run") }
        let process = try ChildProcess([python, OAuthProvider.repositoryRoot + "/Tests/Fixtures/otlp-receiver/receiver.py"])
        guard let port = await process.readyPort() else { throw ReceiverError("the receiver did not start: \(process.output.suffix(2000))") }
        return OTLPReceiver(port: port, process: process)
    }

    private init(port: Int, process: ChildProcess) {
        (self.port, self.process) = (port, process)
    }

    /// Stops the receiver by its PID (SIGTERM, then SIGKILL past a bounded wait).
    public func stop() async {
        process.signal(SIGTERM)
        await process.wait(limit: .seconds(5))
    }

    /// Every span received so far.
    public func spans() async throws -> [Span] {
        let reply = try await ConciergeTestRig.send(.GET, baseURL + "/spans")
        guard case .array(let items)? = reply.json else { throw ReceiverError("spans: \(reply.text)") }
        return items.map(Self.span)
    }

    /// Polls (bounded) until `condition` holds for the spans received; the last spans seen.
    public func waitForSpans(limit: Duration = .seconds(15), until condition: @escaping @Sendable ([Span]) -> Bool) async throws -> [Span] {
        let deadline = ContinuousClock.now + limit
        while true {
            let spans = try await spans()
            if condition(spans) || ContinuousClock.now >= deadline { return spans }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// How many exports arrived.
    public func exports() async throws -> Int {
        try await ConciergeTestRig.send(.GET, baseURL + "/exports").json?[path: "exports"]?.intValue ?? 0
    }

    /// Forgets the spans received.
    public func reset() async throws {
        _ = try await ConciergeTestRig.send(.GET, baseURL + "/reset")
    }

    static func span(_ json: JSONValue) -> Span {
        func object(_ value: JSONValue?) -> [String: JSONValue] {
            guard case .object(let members)? = value else { return [:] }
            return members
        }
        var links: [(traceID: String, spanID: String)] = []
        if case .array(let items)? = json[path: "links"] {
            for item in items { links.append((item[path: "trace_id"]?.stringValue ?? "", item[path: "span_id"]?.stringValue ?? "")) }
        }
        return Span(traceID: json[path: "trace_id"]?.stringValue ?? "", spanID: json[path: "span_id"]?.stringValue ?? "",
                    parentSpanID: json[path: "parent_span_id"]?.stringValue ?? "", name: json[path: "name"]?.stringValue ?? "",
                    kind: json[path: "kind"]?.intValue ?? 0, attributes: object(json[path: "attributes"]), links: links,
                    statusCode: json[path: "status.code"]?.intValue ?? 0, resource: object(json[path: "resource"]))
    }

    public struct ReceiverError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
