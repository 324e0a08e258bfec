import ConciergeCore
import ConciergeStorage
@testable import ConciergeServer
import NIOCore

/// One pipeline (``ScriptedPipeline``) over a ``LoopScriptedTransport`` (``MissPathScript``) and a
/// clock that never moves: no sockets. Two rigs fed the same requests in the same order stay in
/// the same state, so one can answer each miss on the event loop and the other in a task
/// (``MissPathComparison``).
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

    let scripted: ScriptedPipeline
    let transport: LoopScriptedTransport
    var cache: CacheStore { scripted.cache }
    var session: SessionState { scripted.session }
    var pipeline: ProxyPipeline { scripted.pipeline }

    init(clock: WallClock) throws {
        transport = LoopScriptedTransport(MissPathScript.reply)
        scripted = try ScriptedPipeline(yaml: Self.yaml, label: "misspaths", transport: transport, encodedHits: true, clock: clock)
    }

    /// Logs in with the first tokens when no session is there (a logout code or warning ended it).
    func ensureSession() async throws {
        guard session.current == nil else { return }
        try await session.set(SessionTokens(accessToken: "at-1", refreshToken: "rt-1", userID: "alice"))
    }

    /// Removes the SQLite files (after the cache's writer has finished).
    func removeFiles() {
        scripted.removeFiles()
    }
}
