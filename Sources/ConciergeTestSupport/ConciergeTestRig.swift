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

/// Starts the sample API (or uses a given one) and a real Concierge daemon in this process
/// on ports chosen at run time, with its SQLite file in a fresh temp directory; hands the
/// test clients for the proxy and the admin API; ``stop()`` tears everything down.
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
    private let ownsAPI: Bool
    private let runTask: Task<Void, any Error>

    /// - Parameters:
    ///   - endpoints: YAML list items placed under `endpoints:` (indented by the caller or not; each line is indented by 2).
    ///   - extra: further top-level YAML (session, envelope, signing, hooks…); replaces the defaults of the same sections.
    public static func start(endpoints: String? = nil, extra: String = "", api givenAPI: RunningSampleAPI? = nil,
                             apiConfiguration: SampleAPIConfiguration = .init(), directory: String? = nil,
                             configTransform: (@Sendable (String) -> String)? = nil,
                             environment: [String: String] = [:], clock: ManualClock? = nil) async throws -> ConciergeTestRig {
        let ownsAPI = givenAPI == nil
        let api: RunningSampleAPI
        if let givenAPI { api = givenAPI } else { api = try await SampleAPI.start(configuration: apiConfiguration) }
        let dir = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("concierge-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var yaml = TestConfig.yaml(apiPort: api.port, directory: dir, endpoints: endpoints ?? TestConfig.defaultEndpoints, extra: extra)
        if let configTransform { yaml = configTransform(yaml) }
        let configPath = dir + "/concierge.yaml"
        try yaml.write(toFile: configPath, atomically: true, encoding: .utf8)
        let config = try ConfigLoader.load(path: configPath, environment: environment)
        return try await launch(config: config, configPath: configPath, api: api, ownsAPI: ownsAPI, directory: dir, clock: clock)
    }

    static func launch(config: ConciergeConfig, configPath: String, api: RunningSampleAPI, ownsAPI: Bool, directory: String,
                       clock: ManualClock?) async throws -> ConciergeTestRig {
        let logs = LogSink(capturing: true)
        let daemon = try ConciergeDaemon(config: config, configPath: configPath, logSink: logs, environment: [:],
                                         clock: clock?.wallClock ?? .system)
        let runTask = Task { try await daemon.run(handleSignals: false) }
        let ports = try await withTimeout(.seconds(10)) { await daemon.waitUntilReady() }
        return ConciergeTestRig(api: api, daemon: daemon, proxyPort: ports.proxy, adminPort: ports.admin ?? 0, directory: directory,
                                configPath: configPath, logs: logs, clock: clock, ownsAPI: ownsAPI, runTask: runTask)
    }

    private init(api: RunningSampleAPI, daemon: ConciergeDaemon, proxyPort: Int, adminPort: Int, directory: String, configPath: String,
                 logs: LogSink, clock: ManualClock?, ownsAPI: Bool, runTask: Task<Void, any Error>) {
        self.clock = clock
        self.api = api
        self.daemon = daemon
        self.proxyPort = proxyPort
        self.adminPort = adminPort
        self.directory = directory
        self.configPath = configPath
        self.logs = logs
        self.ownsAPI = ownsAPI
        self.runTask = runTask
    }

    /// Stops the daemon (gracefully) and, when `keepAPI` is false and the rig started it, the API.
    public func stop(keepAPI: Bool = false, removeDirectory: Bool = true) async {
        daemon.shutdown()
        do {
            try await withTimeout(.seconds(20)) { _ = try? await self.runTask.value }
        } catch {
            FileHandle.standardError.write(Data("ConciergeTestRig: the daemon on admin port \(adminPort) did not stop within 20 s; its log ends:\n\(logs.lines.suffix(30).joined(separator: "\n"))\n".utf8))
        }
        if ownsAPI, !keepAPI { await api.shutdown() }
        if removeDirectory { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// Stops this daemon and starts a new one on the same state directory and API.
    public func restart(configTransform: (@Sendable (String) -> String)? = nil,
                        environment: [String: String] = [:]) async throws -> ConciergeTestRig {
        await stop(keepAPI: true, removeDirectory: false)
        if let configTransform {
            let text = try String(contentsOfFile: configPath, encoding: .utf8)
            try configTransform(text).write(toFile: configPath, atomically: true, encoding: .utf8)
        }
        let config = try ConfigLoader.load(path: configPath, environment: environment)
        return try await Self.launch(config: config, configPath: configPath, api: api, ownsAPI: ownsAPI, directory: directory, clock: clock)
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

extension ConciergeTestRig {
    /// Starts a rig (with `${VAR}` values from `environment`), runs `body`, and always stops
    /// the rig, whether `body` throws or not.
    public static func with(endpoints: String? = nil, extra: String = "", api: RunningSampleAPI? = nil,
                            apiConfiguration: SampleAPIConfiguration = .init(), environment: [String: String] = [:],
                            clock: ManualClock? = nil, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        let rig = try await start(endpoints: endpoints, extra: extra, api: api, apiConfiguration: apiConfiguration, environment: environment,
                                  clock: clock)
        do {
            try await body(rig)
            await rig.stop()
        } catch {
            await rig.stop()
            throw error
        }
    }
}
