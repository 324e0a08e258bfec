import AsyncHTTPClient
import ConciergeCore
import ConciergeSampleAPI
import ConciergeServer
import ConciergeStorage
import Foundation
import NIOCore
import NIOHTTP1

/// A reply as a test sees it.
public struct TestResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: ByteBuffer

    public var text: String { String(buffer: body) }
    public var json: JSONValue? { JSONValue.parse(body.readableBytesView) }
    public func header(_ name: String) -> String? { headers.first(name: name) }
    /// The business code at `code`.
    public var code: Int? { json?[path: "code"]?.intValue }
}

/// A real Concierge daemon in this process (and the sample API it fronts, or a given one) on
/// ports chosen at run time, with its SQLite file in a fresh temp directory; hands the test
/// clients for the proxy and the admin API. A rig lives in a scope: ``with(_:_:)`` (or
/// ``withFleet(count:setup:_:)``, ``withRestart(configTransform:environment:_:)``) runs its daemon as a
/// child of a task group beside the test's body, and stops it when the body ends or throws.
public final class ConciergeTestRig: Sendable {
    public static let adminToken = "test-admin-token"

    public let api: RunningSampleAPI
    public let daemon: ConciergeDaemon
    public let proxyPort: Int
    public let adminPort: Int
    public let directory: String
    public let configPath: String
    public let logs: LogSink
    /// The clock the daemon stores and judges entries by, when the test moves time itself.
    public let clock: ManualClock?
    /// The daemon's run in its scope's task group.
    let run: DaemonRun

    init(run: DaemonRun, ports: (proxy: Int, admin: Int?)) {
        self.run = run
        api = run.launch.api
        daemon = run.daemon
        proxyPort = ports.proxy
        adminPort = ports.admin ?? 0
        directory = run.launch.directory
        configPath = run.launch.configPath
        logs = run.logs
        clock = run.launch.clock
    }

    /// Stops the daemon now, gracefully (at most 20 s; past that its log's end is printed and the
    /// scope cancels it as it ends). The API and the directory stay until the scope ends.
    public func stop() async {
        await run.stop()
    }

    // MARK: Clients

    public var proxyURL: String { "http://127.0.0.1:\(proxyPort)" }
    public var adminURL: String { "http://127.0.0.1:\(adminPort)" }

    public func request(_ method: HTTPMethod = .GET, _ path: String, headers: [(String, String)] = [], body: String? = nil,
                        timeout: Duration = .seconds(30)) async throws -> TestResponse {
        try await Self.send(method, proxyURL + path, headers: headers, body: body, timeout: timeout)
    }

    public func get(_ path: String, headers: [(String, String)] = []) async throws -> TestResponse {
        try await request(.GET, path, headers: headers)
    }

    public func post(_ path: String, form: String, headers: [(String, String)] = []) async throws -> TestResponse {
        try await request(.POST, path, headers: [("Content-Type", "application/x-www-form-urlencoded")] + headers, body: form)
    }

    public func postJSON(_ path: String, _ json: JSONValue, headers: [(String, String)] = []) async throws -> TestResponse {
        try await request(.POST, path, headers: [("Content-Type", "application/json")] + headers, body: json.serialized)
    }

    public func admin(_ method: HTTPMethod = .GET, _ path: String, json: JSONValue? = nil, token: String? = ConciergeTestRig.adminToken) async throws -> TestResponse {
        var headers: [(String, String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        if json != nil { headers.append(("Content-Type", "application/json")) }
        return try await Self.send(method, adminURL + path, headers: headers, body: json?.serialized, timeout: .seconds(30))
    }

    /// Logs in through the proxy (capturing the session) as `user`.
    @discardableResult
    public func login(_ user: String = "alice") async throws -> TestResponse {
        try await post("/api/login", form: "username=\(user)&password=secret")
    }

    /// The tests' client. It closes a kept-alive connection after 2 s idle, well before the
    /// daemon's `limits.header_timeout` (10 s by default) closes it from its side: otherwise a
    /// request written as the daemon closes the idle connection meets a reset (the keep-alive
    /// race every HTTP client has, which `HTTPClient.shared`, 600 s idle, ran into under load).
    /// Otherwise `HTTPClient.shared`'s configuration (connections wait up to 90 s for a slot,
    /// redirects followed, decompression on).
    public static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.connectionPool.idleTimeout = .seconds(2)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    public static func send(_ method: HTTPMethod, _ url: String, headers: [(String, String)] = [], body: String? = nil,
                            timeout: Duration = .seconds(30)) async throws -> TestResponse {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await client.execute(request, timeout: .nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return TestResponse(status: Int(response.status.code), headers: response.headers, body: bytes)
    }

    /// Everything the daemon logged so far, one string.
    public var logText: String { logs.lines.joined(separator: "\n") }
}

public struct TimeoutError: Error, CustomStringConvertible {
    public init() {}
    public var description: String { "timed out" }
}

/// Runs `work`, failing with ``TimeoutError`` when it takes longer than `limit`: at the limit
/// the caller goes on whether or not `work` (cancelled, left running) heeds the cancellation,
/// so a wait that ignores it (a task's value, a readiness signal) never hangs a test.
public func withTimeout<T: Sendable>(_ limit: Duration, _ work: @escaping @Sendable () async throws -> T) async throws -> T {
    do {
        return try await Deadline.run(limit, work)
    } catch is Deadline.Exceeded {
        throw TimeoutError()
    }
}

/// Polls `condition` every 20 ms for at most `limit`. Every caller waits for something that
/// must happen, so the bound is generous (a loaded 2-core CI machine running the whole suite
/// at once has taken over 5 s to deliver a hook); a passing wait ends at the first true.
public func eventually(_ limit: Duration = .seconds(30), _ condition: @Sendable () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}
