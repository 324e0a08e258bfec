import AsyncHTTPClient
import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import Testing

@testable import ConciergeServer
@testable import ConciergeServerFuzzing

/// An upstream made of a script: each request gets what the script answers, no network.
final class ScriptedTransport: UpstreamTransport {
    typealias Script = @Sendable (UpstreamRequest) async throws(UpstreamFailure) -> UpstreamResponse
    typealias StreamScript = @Sendable (UpstreamRequest) async throws(UpstreamFailure) -> StreamedUpstreamReply
    private let script: Script
    private let streamScript: StreamScript?
    private let sent = Mutex<[UpstreamRequest]>([])

    init(_ script: @escaping Script, streaming streamScript: StreamScript? = nil) {
        self.script = script
        self.streamScript = streamScript
    }

    var requests: [UpstreamRequest] { sent.withLock { $0 } }

    func calls(to path: String) -> Int {
        requests.filter { URLComponents(string: $0.url)?.path == path }.count
    }

    func send(_ request: UpstreamRequest, maxBody: Int) async throws(UpstreamFailure) -> UpstreamResponse {
        sent.withLock { $0.append(request) }
        return try await script(request)
    }

    func stream(_ request: UpstreamRequest) async throws(UpstreamFailure) -> StreamedUpstreamReply {
        sent.withLock { $0.append(request) }
        guard let streamScript else { throw .unreachable("streaming is not scripted") }
        return try await streamScript(request)
    }

    /// A JSON reply.
    static func json(_ value: JSONValue, status: Int = 200) -> UpstreamResponse {
        UpstreamResponse(status: status, headers: ["Content-Type": "application/json"], body: ByteBuffer(bytes: value.serializedBytes))
    }

    /// The query parameter `name` of a request.
    static func query(_ name: String, of request: UpstreamRequest) -> String? {
        URLComponents(string: request.url)?.queryItems?.first { $0.name == name }?.value
    }
}

/// The pipeline's stages over a scripted upstream (``ScriptedPipeline``, the construction the
/// fuzz target's rigs share): no sockets.
struct StageFixture {
    static let yaml = """
        upstreams:
          api: http://upstream.test
        environment: api
        session:
          inject:
            - query: accessToken
          refresh:
            method: POST
            path: /token/refresh
            body: { refreshToken: "{refresh_token}" }
            access_token: data.accessToken
            refresh_token: data.refreshToken
            max_replays: 2
        envelope:
          warning_codes:
            901: [event, logout]
        endpoints:
          - name: profile
            match: GET /profile
            login: required
            cache: { ttl: 60s }
          - name: items
            match: GET /items
            cache: { ttl: 60s }
          - name: download
            match: GET /download
            envelope: false
        """

    let directory: URL
    let cache: CacheStore
    let session: SessionState
    let stats: ProxyStats
    let events: EventBus
    let transport: ScriptedTransport
    let runtime: Runtime
    let pipeline: ProxyPipeline
    let writer: Task<Void, Never>

    let sessions: SessionRegistry

    /// - Parameters:
    ///   - yaml: the configuration (``yaml`` by default; `storage.path` is added).
    ///   - encodedHits: hot entries get their head encoded, as in the daemon (hits as ready bytes).
    init(yaml: String = StageFixture.yaml, encodedHits: Bool = false, streaming: ScriptedTransport.StreamScript? = nil,
         _ script: @escaping ScriptedTransport.Script) throws {
        transport = ScriptedTransport(script, streaming: streaming)
        let scripted = try ScriptedPipeline(yaml: yaml, label: "stages", transport: transport, encodedHits: encodedHits)
        (directory, cache, session, stats, events) = (scripted.directory, scripted.cache, scripted.session, scripted.stats, scripted.events)
        (runtime, sessions, pipeline) = (scripted.runtime, scripted.sessions, scripted.pipeline)
        let cache = self.cache
        writer = Task { await cache.run() }
    }

    func login(_ user: String, access: String = "at-1", refresh: String = "rt-1") async throws {
        try await session.set(SessionTokens(accessToken: access, refreshToken: refresh, userID: user))
    }

    func get(_ target: String) async -> ProxyAnswer {
        await pipeline.handle(IncomingRequest(method: "GET", target: target, headers: ["Host": "127.0.0.1"]))
    }

    /// Ends the writer loop (after it commits what is queued), waits for it, removes the files.
    func finish() async {
        cache.finish()
        await writer.value
        try? FileManager.default.removeItem(at: directory)
    }
}

extension ProxyAnswer {
    var json: JSONValue? {
        guard case .buffer(let body) = reply.body else { return nil }
        return JSONValue.parse(body.readableBytesView)
    }
}

@Suite("Pipeline stages over a scripted upstream")
struct PipelineStageTests {
    /// The business code of a scripted reply for a token.
    static func profile(for request: UpstreamRequest, valid: Set<String>) -> UpstreamResponse {
        let token = ScriptedTransport.query("accessToken", of: request) ?? ""
        return valid.contains(token) ? ScriptedTransport.json(["code": 200, "data": ["token": .string(token)]])
            : ScriptedTransport.json(["code": 801, "msg": "expired"])
    }

    @Test("an expired token is renewed once and the request replayed with the new token")
    func renewAndReplay() async throws {
        let fixture = try StageFixture { request throws(UpstreamFailure) in
            if request.url.hasSuffix("/token/refresh") {
                return ScriptedTransport.json(["code": 200, "data": ["accessToken": "at-2", "refreshToken": "rt-2"]])
            }
            return Self.profile(for: request, valid: ["at-2"])
        }
        try await fixture.login("alice")
        let answer = await fixture.get("/profile")
        #expect(answer.reply.status == 200)
        #expect(answer.json?[path: "data.token"] == "at-2")
        #expect(answer.report.replays == 1)
        #expect(answer.reply.headers.first(name: "X-Concierge-Replays") == "1")
        #expect(fixture.transport.calls(to: "/token/refresh") == 1)
        #expect(fixture.session.current?.accessToken == "at-2")
        await fixture.finish()
    }

    @Test("a token the upstream keeps refusing stops after max_replays: the upstream's own reply is passed on")
    func replayLimit() async throws {
        let refreshes = Atomic<Int>(0)
        let fixture = try StageFixture { request throws(UpstreamFailure) in
            if request.url.hasSuffix("/token/refresh") {
                let n = refreshes.add(1, ordering: .relaxed).newValue
                return ScriptedTransport.json(["code": 200, "data": ["accessToken": .string("at-r\(n)"), "refreshToken": "rt"]])
            }
            return Self.profile(for: request, valid: [])
        }
        try await fixture.login("alice")
        let answer = await fixture.get("/profile")
        #expect(answer.json?[path: "code"] == 801)
        #expect(answer.report.replays == 2)
        #expect(fixture.transport.calls(to: "/profile") == 3)
        #expect(fixture.transport.calls(to: "/token/refresh") == 2)
        #expect(answer.reply.headers.first(name: "X-Cache") == "MISS")
        await fixture.cache.flush()
        #expect(fixture.cache.entryCount == 0)
        await fixture.finish()
    }

    @Test("a storm of 200 concurrent requests on an expired token makes one refresh call")
    func refreshStorm() async throws {
        let fixture = try StageFixture { request throws(UpstreamFailure) in
            if request.url.hasSuffix("/token/refresh") {
                try? await Task.sleep(for: .milliseconds(20))  // let the storm gather behind it
                return ScriptedTransport.json(["code": 200, "data": ["accessToken": "at-2", "refreshToken": "rt-2"]])
            }
            return Self.profile(for: request, valid: ["at-2"])
        }
        try await fixture.login("alice")
        let codes = await withTaskGroup(of: JSONValue?.self) { group in
            for i in 0..<200 { group.addTask { await fixture.get("/profile?n=\(i)").json?[path: "code"] } }
            return await group.reduce(into: [JSONValue?]()) { $0.append($1) }
        }
        #expect(codes.count == 200)
        #expect(codes.allSatisfy { $0 == 200 })
        #expect(fixture.transport.calls(to: "/token/refresh") == 1)
        await fixture.finish()
    }

    @Test("a logout code on a request sent with an old token does not drop the session a new login made meanwhile")
    func logoutRace() async throws {
        let (arrived, arrival) = AsyncStream<Void>.makeStream()
        let (gate, opener) = AsyncStream<Void>.makeStream()
        let fixture = try StageFixture { _ throws(UpstreamFailure) in
            arrival.yield()
            for await _ in gate { break }
            return ScriptedTransport.json(["code": 802, "msg": "logged out elsewhere"])
        }
        try await fixture.login("alice", access: "at-old")
        let sent = Task { await fixture.get("/profile") }
        for await _ in arrived { break }
        // The request has left with at-old; a new login lands before its reply is judged.
        try await fixture.login("bob", access: "at-new")
        opener.yield()
        let answer = await sent.value
        #expect(answer.json?[path: "code"] == 802)
        #expect(fixture.session.current?.userID == "bob")
        #expect(fixture.stats.value(.logouts) == 0)
        await fixture.finish()
    }

    @Test("a logout code ends the session it was sent with: session dropped, counted once")
    func logoutCode() async throws {
        let fixture = try StageFixture { _ throws(UpstreamFailure) in
            ScriptedTransport.json(["code": 802, "msg": "logged out elsewhere"])
        }
        try await fixture.login("alice")
        let answer = await fixture.get("/profile")
        #expect(answer.json?[path: "code"] == 802)
        #expect(answer.report.succeeded == false)
        #expect(fixture.session.current == nil)
        #expect(fixture.stats.value(.logouts) == 1)
        await fixture.finish()
    }

    @Test("a warning code with logout ends the session and removes that user's entries, not the shared ones")
    func warningLogout() async throws {
        let fixture = try StageFixture { request throws(UpstreamFailure) in
            if URLComponents(string: request.url)?.path == "/items" { return ScriptedTransport.json(["code": 200, "data": []]) }
            return ScriptedTransport.query("n", of: request) == "warn"
                ? ScriptedTransport.json(["code": 901, "msg": "account locked"]) : ScriptedTransport.json(["code": 200, "data": "alice"])
        }
        try await fixture.login("alice")
        #expect(await fixture.get("/profile").report.cache == .miss)
        #expect(await fixture.get("/items").report.cache == .miss)
        await fixture.cache.flush()
        #expect(fixture.cache.entryCount == 2)
        let warned = await fixture.get("/profile?n=warn")
        #expect(warned.json?[path: "code"] == 901)
        #expect(fixture.session.current == nil)
        await fixture.cache.flush()
        #expect(fixture.cache.entryCount == 1)
        #expect(await fixture.get("/items").report.cache == .hit)
        await fixture.finish()
    }

    @Test("concurrent misses on one key make one upstream call")
    func coalescing() async throws {
        let fixture = try StageFixture { _ throws(UpstreamFailure) in
            try? await Task.sleep(for: .milliseconds(20))
            return ScriptedTransport.json(["code": 200, "data": [1, 2]])
        }
        let statuses = await withTaskGroup(of: CacheStatus?.self) { group in
            for _ in 0..<50 { group.addTask { await fixture.get("/items").report.cache } }
            return await group.reduce(into: [CacheStatus?]()) { $0.append($1) }
        }
        #expect(statuses.count == 50)
        #expect(statuses.allSatisfy { $0 == .miss || $0 == .hit })
        #expect(fixture.transport.calls(to: "/items") == 1)
        await fixture.finish()
    }

    @Test("an unreachable upstream is upstreamDown: 502, nothing stored, counted once")
    func unreachable() async throws {
        let fixture = try StageFixture { _ throws(UpstreamFailure) in throw .unreachable("connection refused") }
        let answer = await fixture.get("/items")
        #expect(answer.reply.status == 502)
        #expect(answer.reply.headers.first(name: "Cache-Status") == "concierge; fwd=miss")
        #expect(fixture.stats.value(.upstreamErrors) == 1)
        await fixture.cache.flush()
        #expect(fixture.cache.entryCount == 0)
        await fixture.finish()
    }
}
