import ConciergeCore
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import Testing

@testable import ConciergeServer

/// The admin router's collaborators over a real SQLite file in a temp directory, with the
/// real cache store (writer loop running), session, logout path, counters and events: no
/// listener, no daemon.
final class AdminRouterFixture: Sendable {
    static let token = "router-test-token"
    static let yaml = """
        listen:
          proxy: 127.0.0.1:0
          admin: 127.0.0.1:0
        upstreams:
          api: http://upstream.test
          other: http://other.test
        environment: api
        endpoints:
          - { name: profile, match: GET /profile, login: required, cache: { ttl: 60s } }
          - { name: items, match: GET /items, cache: { ttl: 60s } }
        """

    let directory: URL
    let database: StorageDatabase
    let cache: CacheStore
    let session: SessionState
    let stats = ProxyStats()
    let events = EventBus()
    let runtime: Runtime
    let writer: Task<Void, Never>
    /// What `/health` is told about storage; tests flip it.
    let storageFault = StorageFault()
    let control: AdminControl

    final class StorageFault: Sendable {
        let degraded = Atomic<Bool>(false)
        var isDegraded: Bool { degraded.load(ordering: .relaxed) }
    }

    /// - Parameter yaml: the configuration (storage path added).
    init(yaml: String = AdminRouterFixture.yaml) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-admin-router-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let logger = Logger(label: "admin-router") { _ in SwiftLogNoOpLogHandler() }
        let path = "\(directory.path)/concierge.sqlite"
        runtime = Runtime(config: try ConfigLoader.parse(yaml: yaml + "\nstorage:\n  path: \(path)\n"))
        let database = try StorageDatabase(path: path, logger: logger)
        let cache = try CacheStore(database: database, maxBytes: 64 << 20, memoryBytes: 8 << 20, logger: logger)
        let session = try SessionState(store: SessionStore(database: database), logger: logger)
        (self.database, self.cache, self.session) = (database, cache, session)
        writer = Task { await cache.run() }
        let (stats, events, fault) = (stats, events, storageFault)
        control = AdminControl(
            runtime: runtime,
            lifecycle: SessionLifecycle(session: session, cache: cache, stats: stats, events: events, logger: logger),
            logger: logger,
            storageDegraded: { fault.isDegraded },
            refreshGauges: {
                stats.setCacheSize(entries: cache.entryCount, bytes: cache.byteCount)
                stats.setStorageHealth(degraded: fault.isDegraded, failedWrites: database.health.failureCount)
            },
            reload: { .success("not reloaded: no configuration file in this test") })
    }

    /// Runs `body` with a router-mode client of the admin API. The router test client always
    /// sends `localhost` as the authority; `authority` replaces it, as a browser on another
    /// origin would.
    func test(authority: String? = nil, _ body: @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let router = AdminAPI(control: control, token: Self.token).makeRouter()
        let logger = Logger(label: "admin-router-app") { _ in SwiftLogNoOpLogHandler() }
        if let authority {
            let responder = AuthorityReplacingResponder(authority: authority, wrapped: router.buildResponder())
            try await Application(responder: responder, logger: logger).test(.router, body)
        } else {
            try await Application(router: router, logger: logger).test(.router, body)
        }
    }

    /// Stores an entry and waits until the writer has committed it.
    func store(key: String, endpoint: String, user: String?) async {
        let body = ByteBuffer(string: #"{"code":200,"data":{}}"#)
        let entry = CacheEntry(key: key, endpoint: endpoint, userID: user, status: 200, headers: ["Content-Type": "application/json"],
                               body: body, storedAt: Date().timeIntervalSince1970, ttl: 60, staleWhileRevalidate: 0, staleIfError: 0,
                               version: 1)
        _ = cache.store(entry)
        await cache.flush()
    }

    /// The keys of every stored entry, sorted.
    func keys() async throws -> [String] {
        try await cache.entries(pattern: nil, limit: 1000, cursor: nil).entries.map(\.key).sorted()
    }

    /// The next `count` events published since `subscription` began (bounded wait).
    func events(_ count: Int, of subscription: AsyncStream<ConciergeEvent>) async throws -> [ConciergeEvent] {
        try await withTimeout(.seconds(5)) {
            var received: [ConciergeEvent] = []
            for await event in subscription.prefix(count) { received.append(event) }
            return received
        }
    }

    /// Ends the writer loop (after it commits what is queued), waits for it, removes the files.
    func finish() async {
        cache.finish()
        await writer.value
        try? database.pool.close()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Hands each request on with another `:authority` (the `Host` a client sent).
struct AuthorityReplacingResponder<Wrapped: HTTPResponder>: HTTPResponder {
    let authority: String
    let wrapped: Wrapped

    func respond(to request: Request, context: Wrapped.Context) async throws -> Response {
        var head = request.head
        head.authority = authority
        return try await wrapped.respond(to: Request(head: head, body: request.body), context: context)
    }
}

extension TestClientProtocol {
    /// Sends a request with the admin token (or `token`, or none) and an optional JSON body.
    func admin(_ method: HTTPRequest.Method, _ uri: String, token: String? = AdminRouterFixture.token,
               json: JSONValue? = nil, rawBody: String? = nil) async throws -> (status: Int, headers: HTTPFields, json: JSONValue?, text: String) {
        var headers: HTTPFields = [:]
        if let token { headers[.authorization] = "Bearer \(token)" }
        var body: ByteBuffer? = nil
        if let json {
            headers[.contentType] = "application/json"
            body = ByteBuffer(bytes: json.serializedBytes)
        } else if let rawBody {
            body = ByteBuffer(string: rawBody)
        }
        let response = try await executeRequest(uri: uri, method: method, headers: headers, body: body)
        return (Int(response.status.code), response.headers, JSONValue.parse(response.body.readableBytesView), String(buffer: response.body))
    }
}

@Suite("Admin API in process (router test client)")
struct AdminRouterTests {
    @Test("/health needs no token; every other route is 401 without the token or with a wrong one, 200 with it")
    func authentication() async throws {
        let fixture = try AdminRouterFixture()
        try await fixture.test { client in
            let health = try await client.admin(.get, "/health", token: nil)
            #expect(health.status == 200)
            #expect(health.json == ["status": "ok"])
            for (method, uri) in [(HTTPRequest.Method.get, "/stats"), (.get, "/session"), (.delete, "/session"), (.get, "/metrics"),
                                  (.post, "/cache/invalidate"), (.get, "/cache/entries")] {
                let missing = try await client.admin(method, uri, token: nil)
                #expect(missing.status == 401, "\(method) \(uri) without a token")
                #expect(missing.json == ["error": "missing or invalid admin token"])
                #expect(missing.headers[.wwwAuthenticate] == "Bearer")
            }
            #expect(try await client.admin(.get, "/stats", token: "wrong").status == 401)
            #expect(try await client.admin(.get, "/stats", token: AdminRouterFixture.token + "x").status == 401)
            #expect(try await client.admin(.get, "/stats", token: String(AdminRouterFixture.token.dropLast())).status == 401)
            #expect(try await client.admin(.get, "/stats").status == 200)
        }
        await fixture.finish()
    }

    @Test("the Bearer scheme is matched in any case, before one or more spaces; another scheme or no space is 401")
    func bearerScheme() async throws {
        let fixture = try AdminRouterFixture()
        let token = AdminRouterFixture.token
        try await fixture.test { client in
            for value in ["bearer \(token)", "BEARER \(token)", "Bearer   \(token)"] {
                let reply = try await client.executeRequest(uri: "/stats", method: .get, headers: [.authorization: value], body: nil)
                #expect(reply.status == .ok, "\(value)")
            }
            for value in ["Bearer\(token)", "Basic \(token)", "Bearer ", "Bearer", "Bearerx \(token)", token] {
                let reply = try await client.executeRequest(uri: "/stats", method: .get, headers: [.authorization: value], body: nil)
                #expect(reply.status == .unauthorized, "\(value)")
            }
        }
        await fixture.finish()
    }

    @Test("a foreign Host is refused with 403 before authentication, on every route; loopback and upstream hosts are answered")
    func hostCheck() async throws {
        let fixture = try AdminRouterFixture()
        try await fixture.test(authority: "evil.example:8081") { client in
            for uri in ["/health", "/stats", "/session"] {
                let refused = try await client.admin(.get, uri)
                #expect(refused.status == 403, "\(uri)")
                #expect(refused.json == ["error": "host not allowed: evil.example"])
            }
            #expect(try await client.admin(.delete, "/session").status == 403)
        }
        for allowed in ["127.0.0.1:8081", "localhost", "[::1]:8081", "upstream.test"] {
            try await fixture.test(authority: allowed) { client in
                let answered = try await client.admin(.get, "/stats")
                #expect(answered.status == 200, "\(allowed)")
            }
        }
        await fixture.finish()
    }

    @Test("/health is ok, and says storage is degraded (still 200) while writes fail")
    func health() async throws {
        let fixture = try AdminRouterFixture()
        try await fixture.test { client in
            #expect(try await client.admin(.get, "/health").json == ["status": "ok"])
            fixture.storageFault.degraded.store(true, ordering: .relaxed)
            let degraded = try await client.admin(.get, "/health")
            #expect(degraded.status == 200)
            #expect(degraded.json == ["status": "ok", "storage": "degraded"])
            #expect(degraded.headers[.contentType] == "application/json")
        }
        await fixture.finish()
    }

    @Test("/stats is one JSON object of integer counters with the documented names, entries and bytes from the cache")
    func statsShape() async throws {
        let fixture = try AdminRouterFixture()
        await fixture.store(key: "GET http://upstream.test/items v=1", endpoint: "items", user: nil)
        await fixture.store(key: "GET http://upstream.test/profile user=ann v=1", endpoint: "profile", user: "ann")
        fixture.stats.increment(.logouts)
        try await fixture.test { client in
            let stats = try await client.admin(.get, "/stats")
            #expect(stats.status == 200)
            #expect(stats.headers[.contentType] == "application/json")
            guard case .object(let fields)? = stats.json else {
                Issue.record("not a JSON object: \(stats.text)")
                return
            }
            let documented: Set = ["requests", "hits", "misses", "stale", "bypass", "refreshes", "replays", "logouts",
                                   "upstream_errors", "entries", "bytes"]
            #expect(documented.isSubset(of: Set(fields.keys)))
            #expect(fields.values.allSatisfy { $0.typeName == "number" && ($0.intValue ?? -1) >= 0 })
            #expect(fields["entries"] == .int(2))
            #expect(fields["bytes"] == .int(Int64(fixture.cache.byteCount)))
            #expect(fixture.cache.byteCount > 0)
            #expect(fields["logouts"] == .int(1))
            #expect(fields["requests"] == .int(0))
        }
        await fixture.finish()
    }

    @Test("POST /cache/invalidate by pattern, endpoint and all removes exactly the matching entries and returns the count")
    func invalidation() async throws {
        let fixture = try AdminRouterFixture()
        for i in 0..<4 { await fixture.store(key: "GET http://upstream.test/items?limit=\(i) v=1", endpoint: "items", user: nil) }
        await fixture.store(key: "GET http://upstream.test/profile user=ann v=1", endpoint: "profile", user: "ann")
        await fixture.store(key: "GET http://upstream.test/profile user=bob v=1", endpoint: "profile", user: "bob")
        let subscription = fixture.events.subscribe()
        try await fixture.test { client in
            let byPattern = try await client.admin(.post, "/cache/invalidate", json: ["pattern": "limit=[0-1] "])
            #expect(byPattern.status == 200)
            #expect(byPattern.json == ["removed": 2])
            #expect(try await fixture.keys() == ["GET http://upstream.test/items?limit=2 v=1", "GET http://upstream.test/items?limit=3 v=1",
                                                 "GET http://upstream.test/profile user=ann v=1", "GET http://upstream.test/profile user=bob v=1"])
            let byEndpoint = try await client.admin(.post, "/cache/invalidate", json: ["endpoint": "profile"])
            #expect(byEndpoint.json == ["removed": 2])
            #expect(try await fixture.keys() == ["GET http://upstream.test/items?limit=2 v=1", "GET http://upstream.test/items?limit=3 v=1"])
            let all = try await client.admin(.post, "/cache/invalidate", json: ["all": true])
            #expect(all.json == ["removed": 2])
            #expect(try await fixture.keys().isEmpty)
            #expect(try await client.admin(.get, "/stats").json?[path: "entries"] == .int(0))
        }
        #expect(fixture.stats.value(.invalidations) == 3)
        let published = try await fixture.events(3, of: subscription)
        #expect(published.map(\.type) == ["cache.invalidated", "cache.invalidated", "cache.invalidated"])
        #expect(published.map(\.data) == [["by": "pattern", "removed": 2], ["by": "endpoint", "removed": 2], ["by": "all", "removed": 2]])
        await fixture.finish()
    }

    @Test("POST /cache/invalidate refuses bad input: a bad regex (400, with the reason), no or two criteria, non-JSON (400), an unknown endpoint (404)")
    func invalidationErrors() async throws {
        let fixture = try AdminRouterFixture()
        await fixture.store(key: "GET http://upstream.test/items v=1", endpoint: "items", user: nil)
        try await fixture.test { client in
            let badRegex = try await client.admin(.post, "/cache/invalidate", json: ["pattern": "([unclosed"])
            #expect(badRegex.status == 400)
            #expect(badRegex.json?[path: "error"]?.stringValue?.hasPrefix("invalid regex: ") == true)
            // PCRE2's own words and where, not Foundation's "The value is invalid".
            let unclosedGroup = try await client.admin(.post, "/cache/invalidate", json: ["pattern": "(a"])
            #expect(unclosedGroup.json?[path: "error"] == "invalid regex: missing closing parenthesis at offset 2")
            let listed = try await client.admin(.get, "/cache/entries?pattern=a%7B2,1%7D")
            #expect(listed.status == 400)
            #expect(listed.json?[path: "error"]?.stringValue?.contains("numbers out of order in {} quantifier") == true)
            for body: JSONValue in [["all": true, "pattern": "x"], [:], ["all": false], ["pattern": 3], ["everything": true], ["a", "b"]] {
                let refused = try await client.admin(.post, "/cache/invalidate", json: body)
                #expect(refused.status == 400, "\(body.serialized)")
                #expect(refused.json?[path: "error"]?.stringValue?.isEmpty == false)
            }
            let notJSON = try await client.admin(.post, "/cache/invalidate", rawBody: "all=true")
            #expect(notJSON.status == 400)
            #expect(notJSON.json == ["error": "body must be JSON"])
            let unknown = try await client.admin(.post, "/cache/invalidate", json: ["endpoint": "nope"])
            #expect(unknown.status == 404)
            #expect(unknown.json == ["error": "no endpoint named 'nope'"])
        }
        #expect(try await fixture.keys() == ["GET http://upstream.test/items v=1"])
        #expect(fixture.stats.value(.invalidations) == 0)
        await fixture.finish()
    }

    @Test("with session.app_token, PUT /session sets the app token (kind app, no user), and GET /session shows it")
    func putAppToken() async throws {
        let yaml = AdminRouterFixture.yaml
            + "\nsession:\n  inject: [{ query: access_token }]\n  app_token: { path: /cgi-bin/token, access_token: access_token }\n"
        let fixture = try AdminRouterFixture(yaml: yaml)
        try await fixture.test { client in
            #expect(try await client.admin(.get, "/session").json == ["logged_in": false, "kind": "app", "expires_at": nil])
            let set = try await client.admin(.put, "/session", json: ["access_token": "app-token-1234", "user_id": 42])
            #expect(set.status == 200)
            #expect(set.json?[path: "logged_in"] == true)
            #expect(set.json?[path: "kind"] == "app")
            #expect(set.json?[path: "user_id"] == .null)
            #expect(try await client.admin(.get, "/session").json == set.json)
        }
        #expect(fixture.session.current?.kind == .app)
        #expect(fixture.session.current?.accessToken == "app-token-1234")
        #expect(fixture.session.current?.userID == nil)
        await fixture.finish()
    }

    @Test("GET /session shows who and when with tokens masked; PUT /session sets it and publishes session.login; a bad body is 400")
    func sessionGetAndPut() async throws {
        let fixture = try AdminRouterFixture()
        let subscription = fixture.events.subscribe()
        try await fixture.test { client in
            #expect(try await client.admin(.get, "/session").json == ["logged_in": false, "kind": "user", "expires_at": nil])
            let set = try await client.admin(.put, "/session", json: ["access_token": "secret-access-1234", "refresh_token": "secret-refresh-5678",
                                                                      "user_id": 42])
            #expect(set.status == 200)
            #expect(set.json?[path: "logged_in"] == true)
            #expect(set.json?[path: "user_id"] == "42")
            #expect(set.json?[path: "kind"] == "user")
            #expect(set.json?[path: "set_at"]?.stringValue != nil)
            #expect(!set.text.contains("secret-access-1234") && !set.text.contains("secret-refresh-5678"))
            #expect(set.json?[path: "access_token"] == .string(TokenMask.mask("secret-access-1234")))
            let shown = try await client.admin(.get, "/session")
            #expect(shown.json == set.json)
            for body: JSONValue in [[:], ["access_token": ""], ["access_token": 7], ["access_token": "a", "refresh_token": 1], ["access_token": "a", "user_id": true]] {
                #expect(try await client.admin(.put, "/session", json: body).status == 400, "\(body.serialized)")
            }
        }
        #expect(fixture.session.current?.accessToken == "secret-access-1234")
        #expect(fixture.session.current?.userID == "42")
        let published = try await fixture.events(1, of: subscription)
        #expect(published.map(\.type) == ["session.login"])
        #expect(published.first?.data == ["user": "42", "session": "default"])
        await fixture.finish()
    }

    @Test("DELETE /session logs out: the session and that user's entries go, shared and other users' entries stay, one logout counted and published")
    func sessionDelete() async throws {
        let fixture = try AdminRouterFixture()
        try await fixture.session.set(SessionTokens(accessToken: "at-ann", refreshToken: "rt-ann", userID: "ann"))
        await fixture.store(key: "GET http://upstream.test/profile user=ann v=1", endpoint: "profile", user: "ann")
        await fixture.store(key: "GET http://upstream.test/profile?tab=2 user=ann v=1", endpoint: "profile", user: "ann")
        await fixture.store(key: "GET http://upstream.test/profile user=bob v=1", endpoint: "profile", user: "bob")
        await fixture.store(key: "GET http://upstream.test/items v=1", endpoint: "items", user: nil)
        let subscription = fixture.events.subscribe()
        try await fixture.test { client in
            let deleted = try await client.admin(.delete, "/session")
            #expect(deleted.status == 200)
            #expect(deleted.json == ["logged_out": true])
            #expect(try await client.admin(.get, "/session").json?[path: "logged_in"] == false)
            #expect(try await client.admin(.get, "/stats").json?[path: "entries"] == .int(2))
            let again = try await client.admin(.delete, "/session")
            #expect(again.json == ["logged_out": false])
        }
        #expect(fixture.session.current == nil)
        #expect(try await fixture.keys() == ["GET http://upstream.test/items v=1", "GET http://upstream.test/profile user=bob v=1"])
        #expect(fixture.stats.value(.logouts) == 1)
        let published = try await fixture.events(1, of: subscription)
        #expect(published.map(\.type) == ["session.logout"])
        #expect(published.first?.data == ["user": "ann", "reason": "admin", "session": "default"])
        await fixture.finish()
    }

    @Test("/metrics is Prometheus text (text/plain; version=0.0.4) with every counter and cache gauges brought up to date")
    func metrics() async throws {
        let fixture = try AdminRouterFixture()
        await fixture.store(key: "GET http://upstream.test/items v=1", endpoint: "items", user: nil)
        fixture.stats.increment(.logouts)
        try await fixture.test { client in
            let metrics = try await client.admin(.get, "/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.headers[.contentType] == "text/plain; version=0.0.4")
            for counter in ProxyStats.Counter.allCases {
                #expect(metrics.text.contains("# TYPE \(counter.metricName) counter\n"), "\(counter.metricName)")
            }
            #expect(metrics.text.contains("\nconcierge_logouts_total 1\n"))
            #expect(metrics.text.contains("\nconcierge_cache_entries 1.0\n"))
            #expect(metrics.text.contains("\nconcierge_storage_degraded 0.0\n"))
            fixture.storageFault.degraded.store(true, ordering: .relaxed)
            #expect(try await client.admin(.get, "/metrics").text.contains("\nconcierge_storage_degraded 1.0\n"))
        }
        await fixture.finish()
    }
}
