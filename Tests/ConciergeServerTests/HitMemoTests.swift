import ConciergeCore
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import ConciergeServer

/// The hit memo: a recipe is reused only for the very same request under the same route and
/// session, and only while its entry is a fresh hot hit.
@Suite("Hit memo")
struct HitMemoTests {
    static let yaml = """
        upstreams:
          api: http://upstream.test
        environment: api
        endpoints:
          - name: items
            match: GET /items
            cache: { ttl: 60s }
        """

    let runtime: Runtime
    let route: PreparedRequest.Route
    let user = SessionTokens(accessToken: "at", refreshToken: nil, userID: "u1", setAt: Date(timeIntervalSince1970: 1))

    init() throws {
        runtime = Runtime(config: try ConfigLoader.parse(yaml: Self.yaml))
        route = runtime.route(method: "GET", target: "/items?a=1")
    }

    func request(_ target: String = "/items?a=1", headers: HTTPHeaders = ["Host": "h"], body: String? = nil) -> IncomingRequest {
        IncomingRequest(method: "GET", target: target, headers: headers, body: .buffered(ByteBuffer(string: body ?? "")))
    }

    func remembered(_ memo: HitMemo) {
        memo.remember(request(), route: route, session: user, key: "K", endpoint: route.endpoint)
    }

    @Test("the same method, target, headers, route and session find the recipe")
    func same() {
        let memo = HitMemo()
        remembered(memo)
        #expect(memo.recipe(for: request(), route: runtime.route(method: "GET", target: "/items?a=1"), session: user)?.key == "K")
    }

    @Test("another target, header value, header name case or added header: no recipe")
    func otherRequest() {
        let memo = HitMemo()
        remembered(memo)
        #expect(memo.recipe(for: request("/items?a=2"), route: route, session: user) == nil)
        #expect(memo.recipe(for: request(headers: ["Host": "h2"]), route: route, session: user) == nil)
        #expect(memo.recipe(for: request(headers: ["host": "h"]), route: route, session: user) == nil)
        #expect(memo.recipe(for: request(headers: ["Host": "h", "X-Concierge-Cache": "bypass"]), route: route, session: user) == nil)
    }

    @Test("another session (logout, another user, a renewed token) or none: no recipe")
    func otherSession() {
        let memo = HitMemo()
        remembered(memo)
        var renewed = user
        renewed.accessToken = "at-2"
        #expect(memo.recipe(for: request(), route: route, session: nil) == nil)
        #expect(memo.recipe(for: request(), route: route, session: renewed) == nil)
    }

    @Test("a reloaded configuration (a new object, even with the same content) or another environment: no recipe")
    func otherConfiguration() throws {
        let memo = HitMemo()
        remembered(memo)
        runtime.replace(with: try ConfigLoader.parse(yaml: Self.yaml))
        #expect(memo.recipe(for: request(), route: runtime.route(method: "GET", target: "/items?a=1"), session: user) == nil)
        let elsewhere = PreparedRequest.Route(method: "GET", target: "/items?a=1", config: route.config, environment: "other")
        #expect(memo.recipe(for: request(), route: elsewhere, session: user) == nil)
    }

    @Test("a request with a body is neither remembered nor looked up")
    func body() {
        let memo = HitMemo()
        memo.remember(request(body: "x=1"), route: route, session: user, key: "K", endpoint: route.endpoint)
        #expect(memo.count == 0)
        remembered(memo)
        #expect(memo.recipe(for: request(body: "x=1"), route: route, session: user) == nil)
    }

    @Test("at most capacity recipes: a full memo starts over")
    func bounded() {
        let memo = HitMemo()
        for i in 0..<(HitMemo.capacity + 10) {
            memo.remember(request("/items?n=\(i)"), route: route, session: user, key: HashedKey("K\(i)"), endpoint: route.endpoint)
        }
        #expect(memo.count <= HitMemo.capacity)
        #expect(memo.count == 10)
    }
}

/// The fast path with the memo, over the pipeline's real stages and cache.
@Suite("Fast path with the hit memo")
struct FastPathMemoTests {
    static func items(_ request: UpstreamRequest) -> UpstreamResponse {
        let user = ScriptedTransport.query("accessToken", of: request) ?? "anonymous"
        return ScriptedTransport.json(["code": 200, "data": ["for": .string(user)]])
    }

    func fastHit(_ fixture: StageFixture, _ target: String) -> EncodedHit? {
        let incoming = IncomingRequest(method: "GET", target: target, headers: ["Host": "127.0.0.1"])
        if case .encodedHit(let hit, _) = fixture.pipeline.plan(incoming, encoded: true) { return hit }
        return nil
    }

    @Test("a repeated hit is remembered; the remembered hit is the same bytes")
    func repeated() async throws {
        let fixture = try StageFixture(encodedHits: true) { Self.items($0) }
        _ = await fixture.get("/items?a=1")
        let first = try #require(fastHit(fixture, "/items?a=1"))
        #expect(fixture.pipeline.hitMemos.current.count == 1)
        let second = try #require(fastHit(fixture, "/items?a=1"))
        #expect(second.body == first.body && second.head == first.head)
        #expect(fixture.transport.calls(to: "/items") == 1)
        await fixture.finish()
    }

    @Test("after a logout and a login as another user, a per-user entry (login: required) is not served from the recipe")
    func sessionChange() async throws {
        let fixture = try StageFixture(encodedHits: true) { Self.items($0) }
        try await fixture.login("alice", access: "token-alice")
        _ = await fixture.get("/profile?a=1")
        let alice = try #require(fastHit(fixture, "/profile?a=1"))
        #expect(String(buffer: alice.body).contains("token-alice"))
        try await fixture.login("bob", access: "token-bob")
        #expect(fastHit(fixture, "/profile?a=1") == nil, "bob has no entry yet: the full path, a miss")
        _ = await fixture.get("/profile?a=1")
        let bob = try #require(fastHit(fixture, "/profile?a=1"))
        #expect(String(buffer: bob.body).contains("token-bob"))
        await fixture.finish()
    }

    @Test("after a reload, the recipe of the old configuration is not used")
    func reload() async throws {
        let fixture = try StageFixture(encodedHits: true) { Self.items($0) }
        _ = await fixture.get("/items?a=1")
        #expect(fastHit(fixture, "/items?a=1") != nil)
        #expect(fastHit(fixture, "/items?a=1") != nil)
        // The reloaded file bumps the cache version: the old entry is not the new key's.
        let bumped = StageFixture.yaml + "\ncache:\n  version: 2\nstorage:\n  path: \(fixture.directory.path)/c.sqlite\n"
        fixture.runtime.replace(with: try ConfigLoader.parse(yaml: bumped))
        #expect(fastHit(fixture, "/items?a=1") == nil)
        await fixture.finish()
    }
}
