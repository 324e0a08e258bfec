import ConciergeCore
import ConciergeStorage
@testable import ConciergeServer
import Foundation
import Logging
import NIOCore

/// One pipeline over a ``LoopScriptedTransport`` (``MissPathScript``), a real SQLite file in a
/// temp directory, the real session, refresher and counters, and a clock that never moves: no
/// sockets. Two rigs fed the same requests in the same order stay in the same state, so one
/// can answer each miss on the event loop and the other in a task (``MissPathComparison``).
final class MissPathRig: Sendable {
    static let yaml = """
        upstreams: { api: http://upstream.test }
        environment: api
        session:
          inject: [{ query: accessToken }]
          refresh: { method: POST, path: /token/refresh, body: { refreshToken: "{refresh_token}" },
                     access_token: data.accessToken, refresh_token: data.refreshToken, max_replays: 2 }
          # The loop guard reads a monotonic clock no rig can freeze: two rigs a moment apart
          # would trip it at different times (a `Retry-After` of 5 and of 6). Never tripped here.
          max_refreshes: { count: 1000, within: 1ms }
        envelope:
          warning_codes: { 901: [event, logout], 902: [event] }
        endpoints:
          - name: profile
            match: GET /profile
            login: required
            cache: { ttl: 60s, stale_if_error: 30s }
          - name: items
            match: GET /items
            cache: { ttl: 60s, stale_while_revalidate: 30s }
          - name: tagged
            match: GET /tagged
            cache:
              ttl: 60s
              tags: ["t:{query.v}", "items", "c:{data.code}"]
              tags_header: Surrogate-Key
          - name: unwrapped
            match: GET /unwrapped
            cache: { ttl: 60s }
            unwrap: data
          - name: validated
            match: GET /validated
            cache: { ttl: 60s }
            validate: { "data.v": string }
          - name: invalidating
            match: GET /invalidating
            cache: { ttl: 60s }
            invalidates: [items]
        """

    /// The frozen time both rigs of a comparison read (Unix seconds).
    static let time: Double = 1_800_000_000

    let directory: URL
    let cache: CacheStore
    let session: SessionState
    let transport: LoopScriptedTransport
    let pipeline: ProxyPipeline

    init(clock: WallClock) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-misspaths-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let logger = Logger(label: "misspaths") { _ in SwiftLogNoOpLogHandler() }
        let config = try ConfigLoader.parse(yaml: Self.yaml + "\nstorage:\n  path: \(directory.path)/c.sqlite\n")
        let database = try StorageDatabase(path: "\(directory.path)/c.sqlite", logger: logger)
        cache = try CacheStore(database: database, maxBytes: 64 << 20, memoryBytes: 8 << 20, logger: logger,
                               keepsAttachments: true, clock: clock)
        session = try SessionState(store: SessionStore(database: database), logger: logger)
        transport = LoopScriptedTransport(MissPathScript.reply)
        var lifecycle = SessionLifecycle(session: session, cache: cache, stats: ProxyStats(), events: EventBus(), logger: logger)
        lifecycle.clock = clock
        let runtime = Runtime(config: config)
        let sessions = try SessionRegistry(parts: .init(database: database, cache: cache, transport: transport, runtime: runtime, logger: logger),
                                           base: lifecycle, perClientDefault: nil)
        runtime.bind(sessions.bind)
        pipeline = ConciergeDaemon.makePipeline(runtime: runtime, sessions: sessions, transport: transport, logger: logger)
    }

    /// Logs in with the first tokens when no session is there (a logout code or warning ended it).
    func ensureSession() async throws {
        guard session.current == nil else { return }
        try await session.set(SessionTokens(accessToken: "at-1", refreshToken: "rt-1", userID: "alice"))
    }

    /// Removes the SQLite files (after the cache's writer has finished).
    func removeFiles() {
        try? FileManager.default.removeItem(at: directory)
    }
}
