import ConciergeCore
import ConciergeSampleAPI
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import NIOCore
import Testing

@testable import ConciergeServer

/// `per_client` instances stored in SQLite: read on first use off the event loop, logged out
/// when idle whether loaded or not, and the requests recognised by their bytes
/// (``ProxyPipeline/replayedHit(of:listenerSession:)``) judged by their own session's tokens.
@Suite("Per-client instances: first use, idle sweep and replayed hits")
struct PerClientInstanceTests {
    static let alice = PerClientSessionTests.alice
    static let bob = PerClientSessionTests.bob

    /// The stage fixture's configuration with `per_client` on `default`, and a session `shop`
    /// used by the endpoint `shopItems`.
    static let yaml = StageFixture.yaml
        .replacingOccurrences(of: "\nsession:\n", with: "\nsession:\n  per_client: { header: Concierge-Session, max: 10, idle: 1h }\n")
        + """

        sessions:
          shop:
            inject: [{ query: accessToken }]
        """
    static let shopEndpoint = "  - name: shopItems\n    match: GET /shop/items\n    session: shop\n    login: required\n    cache: { ttl: 60s }\n"

    static func fixture() throws -> StageFixture {
        try StageFixture(yaml: yaml.replacingOccurrences(of: "endpoints:\n", with: "endpoints:\n" + shopEndpoint), encodedHits: true) { request in
            ScriptedTransport.json(["code": 200, "data": ["token": .string(ScriptedTransport.query("accessToken", of: request) ?? "-")]])
        }
    }

    static func incoming(_ target: String, id: String?) -> IncomingRequest {
        var headers: [(String, String)] = [("Host", "127.0.0.1")]
        if let id { headers.append(("Concierge-Session", id)) }
        return IncomingRequest(method: "GET", target: target, headers: .init(headers))
    }

    static func head(_ target: String, id: String?) -> ByteBuffer {
        ByteBuffer(string: "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (id.map { "Concierge-Session: \($0)\r\n" } ?? "") + "\r\n")
    }

    /// A head answered as a hit through a recipe, as the connection handler remembers it.
    struct Remembered {
        let bytes: ByteBuffer
        let incoming: IncomingRequest
        let recipe: HitMemo.Recipe

        /// The replayed hit of these bytes. Each thread has its own memo and a test resumes
        /// on any thread after an `await`: the bytes are remembered on this one first, with no
        /// suspension before the replay is asked for.
        func replay(_ fixture: StageFixture, listenerSession: String? = nil) -> (hit: EncodedHit, incoming: IncomingRequest)? {
            fixture.pipeline.rememberReplay(bytes, incoming: incoming, recipe: recipe)
            return fixture.pipeline.replayedHit(of: bytes, listenerSession: listenerSession)
        }
    }

    /// Answers `target` (a miss, stored), then plans it again as the event loop does: a hit as
    /// ready bytes, with its recipe.
    static func rememberHit(_ fixture: StageFixture, _ target: String, id: String?) async throws -> Remembered {
        _ = await fixture.pipeline.handle(incoming(target, id: id))
        guard case .encodedHit(_, let recipe?) = fixture.pipeline.plan(incoming(target, id: id), encoded: true) else {
            Issue.record("no hit as ready bytes for \(target)")
            throw CancellationError()
        }
        return Remembered(bytes: head(target, id: id), incoming: incoming(target, id: id), recipe: recipe)
    }

    @Test("the first use of an instance not loaded is planned as a task that reads it, never read in the plan made on the event loop")
    func firstUseOffTheLoop() async throws {
        let fixture = try Self.fixture()
        let key = SessionUnit.instanceKey(session: "default", id: Self.alice)
        try await SessionStore(database: fixture.cache.database, key: key)
            .save(SessionTokens(accessToken: "at-alice", refreshToken: "rt-alice", userID: "alice"))
        let table = try #require(fixture.sessions.defaultUnit.instances)
        let plan = fixture.pipeline.plan(Self.incoming("/profile", id: Self.alice), encoded: true)
        guard case .task(let task) = plan, case .firstUse = task else {
            Issue.record("planned \(plan), not the first use")
            return
        }
        #expect(table.loadedCount == 0, "planning read nothing")
        let answer = await fixture.pipeline.run(task)
        #expect(answer.reply.status == 200)
        #expect(answer.json?[path: "data.token"] == "at-alice")
        #expect(table.loadedCount == 1)
        if case .task(.firstUse) = fixture.pipeline.plan(Self.incoming("/profile", id: Self.alice), encoded: true) {
            Issue.record("loaded, yet planned as a first use again")
        }
        await fixture.finish()
    }

    @Test("a replayed hit of an instance is judged by the instance's tokens: none after it logs in, none once its table forgot it")
    func replayedHitOfInstance() async throws {
        let fixture = try Self.fixture()
        let registry = fixture.sessions
        let instance = try #require(try await registry.instance(of: registry.defaultUnit, id: Self.alice))
        let remembered = try await Self.rememberHit(fixture, "/items?a=1", id: Self.alice)
        #expect(remembered.replay(fixture) != nil, "logged out, as when it was remembered")
        // `default` itself stays logged out: its tokens equal the remembered ones, the instance's do not.
        try await instance.lifecycle.login(byHand: SessionTokens(accessToken: "at-alice", refreshToken: "rt", userID: "alice"))
        #expect(fixture.session.current == nil)
        #expect(remembered.replay(fixture) == nil, "the instance logged in since")

        let again = try await Self.rememberHit(fixture, "/items?a=1", id: Self.alice)
        #expect(again.replay(fixture) != nil)
        registry.defaultUnit.instances?.forget(SessionUnit.instanceKey(session: "default", id: Self.alice))
        #expect(again.replay(fixture) == nil, "a forgotten instance no longer answers")
        await fixture.finish()
    }

    @Test("the hit memo tells the same request of two instances apart by their session, so the requests of many instances spread over its buckets")
    func memoProbesBySession() async throws {
        let fixture = try Self.fixture()
        let registry = fixture.sessions
        let a = try #require(try await registry.instance(of: registry.defaultUnit, id: Self.alice))
        let b = try #require(try await registry.instance(of: registry.defaultUnit, id: Self.bob))
        let incoming = Self.incoming("/items?a=1", id: nil)
        let (probeA, probeB) = (HitMemo.Probe(incoming, slot: a), HitMemo.Probe(incoming, slot: b))
        #expect(probeA == HitMemo.Probe(incoming, slot: a))
        #expect(probeA != probeB)
        #expect(probeA.hashValue != probeB.hashValue)
        await fixture.finish()
    }

    @Test("a replayed hit of a named session is judged by that session's tokens, never default's, and only on the listener it came on")
    func replayedHitOfNamedSession() async throws {
        let fixture = try Self.fixture()
        let shop = try #require(fixture.sessions.unit(named: "shop"))
        try await shop.lifecycle.login(byHand: SessionTokens(accessToken: "at-shop-1", refreshToken: nil, userID: "shop"))
        let remembered = try await Self.rememberHit(fixture, "/shop/items?a=1", id: nil)
        let replayed = try #require(remembered.replay(fixture))
        #expect(String(buffer: replayed.hit.body).contains("at-shop-1"))
        #expect(remembered.replay(fixture, listenerSession: "shop") == nil, "remembered on a listener without a session")
        try await fixture.login("bob", access: "at-default")
        #expect(remembered.replay(fixture) != nil, "default's login changes nothing for shop")
        try await shop.lifecycle.login(byHand: SessionTokens(accessToken: "at-shop-2", refreshToken: nil, userID: "shop"))
        #expect(remembered.replay(fixture) == nil, "shop's tokens changed")
        await fixture.finish()
    }

    @Test("idle: a stored instance not loaded, unused for longer than idle, is logged out and revoked; one used since is kept (a manual clock)")
    func idleStoredInstances() async throws {
        let clock = ManualClock()
        let revoke = """
              revoke:
                method: POST
                path: /oauth/revoke
                encoding: form
                body: { token: "{refresh_token}", client_id: "${OAUTH_CLIENT_ID}", client_secret: "${OAUTH_CLIENT_SECRET}" }
            """
        let extra = DialectTestConfig.oauth2(sessionExtra: "  per_client: { header: Concierge-Session, max: 10, idle: 1h }\n" + revoke)
        try await ConciergeTestRig.with(endpoints: DialectTestConfig.oauth2Endpoints, extra: extra,
                                        apiConfiguration: SampleAPIConfiguration(dialect: .oauth2),
                                        environment: DialectTestConfig.environment, clock: clock) { rig in
            #expect(try await PerClientSessionTests.login(rig, "alice", id: Self.alice).status == 200)
            #expect(try await PerClientSessionTests.login(rig, "bob", id: Self.bob).status == 200)
            #expect(rig.api.state.liveRefreshTokens == 2)
            try await rig.withRestart(environment: DialectTestConfig.environment) { rig in
                let table = try #require(rig.daemon.sessions.defaultUnit.instances)
                #expect(table.loadedCount == 0 && table.liveCount == 2, "stored, not loaded")
                clock.advance(by: 1800)
                #expect(try await PerClientSessionTests.me(rig, id: Self.bob).json?[path: "id"] == "bob")
                #expect(table.loadedCount == 1)
                clock.advance(by: 1860)
                await rig.daemon.sessions.sweepIdle(now: clock.wallClock.date)
                #expect(table.liveCount == 1)
                #expect(try await PerClientSessionTests.me(rig, id: Self.alice).status == 401)
                #expect(try await PerClientSessionTests.me(rig, id: Self.bob).json?[path: "id"] == "bob")
                let api = rig.api
                #expect(try await eventually { api.state.liveRefreshTokens == 1 }, "alice's refresh token revoked")
                #expect(rig.logText.contains("per-client instance idle: logged out"))
            }
        }
    }

    @Test("the last use of stored instances: recorded, never moved back; a row without one counts from when its tokens were set")
    func storedLastUse() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-lastuse-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let database = try StorageDatabase(path: directory + "/c.sqlite", logger: .init(label: "test"))
        let old = Date(timeIntervalSince1970: 1_000_000)
        let (a, b) = ("portal#aaaa", "portal#bbbb")
        for key in [a, b] {
            try await SessionStore(database: database, key: key).save(SessionTokens(accessToken: "at", refreshToken: "rt", userID: "u", setAt: old))
        }
        let cutoff = old.addingTimeInterval(3600)
        #expect(try await SessionStore.instanceKeys(database, session: "portal", unusedSince: cutoff).sorted() == [a, b])
        try await SessionStore.recordLastUse(database, [(key: b, at: cutoff.addingTimeInterval(60))])
        try await SessionStore.recordLastUse(database, [(key: b, at: old)])
        #expect(try await SessionStore.instanceKeys(database, session: "portal", unusedSince: cutoff) == [a])
        #expect(try await SessionStore(database: database, key: b).loadOnReader().lastUsed == cutoff.addingTimeInterval(60))
        #expect(try await SessionStore.instanceKeys(database, session: "other", unusedSince: .distantFuture).isEmpty)
    }
}
