import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import Testing

/// Several sessions in a fleet (docs/sessions.md, docs/fleet.md): each named session and each
/// `per_client` instance has its own row in PostgreSQL, so the fleet makes one token request
/// per expiry per session, and a login or logout of one reaches every node without touching
/// another. Three daemons and one real PostgreSQL.
@Suite("Fleet: named sessions and per_client instances", .serialized,
       .enabled(if: PostgresCluster.isAvailable || ProcessInfo.processInfo.environment["CI"] != nil))
struct FleetSessionsTests {
    /// Three nodes in front of the sample API's WeChat dialect with two app ids, the sessions
    /// `wx-news` and `wx-shop` (no `default`), chosen by `Concierge-Session-Name`; with
    /// `sealed`, the fleet's tokens are sealed with a key file.
    static func withNamedSessions(sealed: Bool, _ body: ([ConciergeTestRig], PostgresCluster, RunningSampleAPI) async throws -> Void)
        async throws {
        let cluster = try await PostgresCluster.start()
        var configuration = SampleAPIConfiguration(refreshDelay: .milliseconds(50), dialect: .wechat)
        configuration.moreAppIDs = SeveralAppTokenSessionsTests.apps
        let api = try await SampleAPI.start(configuration: configuration)
        let keyFile = cluster.directory + "-fleet.key"
        _ = FileManager.default.createFile(atPath: keyFile, contents: Data((0..<32).map { _ in UInt8.random(in: 0...255) }),
                                       attributes: [.posixPermissions: 0o600])
        let keyLine = sealed ? "  key_file: \(keyFile)\n" : ""
        do {
            try await FleetTokenTests.withNodes(cluster: cluster, endpoints: SeveralAppTokenSessionsTests.endpoints,
                                                extra: SeveralAppTokenSessionsTests.extra(withDefault: false), api: api,
                                                configTransform: { yaml in
                yaml.replacingOccurrences(of: "listen:\n", with: "listen:\n  session_header: true\n")
                    .replacingOccurrences(of: "  timeout: 1s\n", with: "  timeout: 1s\n" + keyLine)
            }) { rigs in try await body(rigs, cluster, api) }
        } catch {
            await api.shutdown()
            await cluster.stop()
            try? FileManager.default.removeItem(atPath: keyFile)
            throw error
        }
        await api.shutdown()
        await cluster.stop()
        try? FileManager.default.removeItem(atPath: keyFile)
    }

    /// `count` concurrent requests on each node for each of the two sessions; the replies by session.
    static func storm(_ rigs: [ConciergeTestRig], count: Int = 50, tag: String) async throws -> [(String, TestResponse)] {
        try await withThrowingTaskGroup(of: (String, TestResponse).self) { group in
            for (n, rig) in rigs.enumerated() {
                for session in ["wx-news", "wx-shop"] {
                    for i in 0..<count {
                        group.addTask {
                            (session, try await rig.get("/cgi-bin/user/info?\(tag)=\(n)-\(i)", headers: [("Concierge-Session-Name", session)]))
                        }
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    /// The app each session's token belongs to.
    static let appOf = ["wx-news": "news-app", "wx-shop": "shop-app"]

    /// The fleet's token requests by session key, as PostgreSQL counted them.
    static func tokenRequests(_ cluster: PostgresCluster) async throws -> String {
        try await cluster.sql("SELECT string_agg(session_key || '=' || n, ',' ORDER BY session_key) FROM "
            + "(SELECT session_key, count(*) AS n FROM concierge.token_request GROUP BY session_key) c")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("two named sessions on three nodes: 3 × 2 × 50 requests, first need then an expiry: one token request per session each time, nobody logged out")
    func oneTokenRequestPerSessionPerExpiry() async throws {
        try await Self.withNamedSessions(sealed: false) { rigs, cluster, api in
            let first = try await Self.storm(rigs, tag: "first")
            #expect(first.allSatisfy { $0.1.status == 200 && $0.1.json?[path: "app"] == .string(Self.appOf[$0.0]!) },
                    "\(Dictionary(grouping: first.map(\.1.status), by: { $0 }).mapValues(\.count))")
            #expect(api.state.tokenCalls(app: "news-app") == 1)
            #expect(api.state.tokenCalls(app: "shop-app") == 1)
            // Every token expires at the API: all three nodes see it on both sessions at once.
            api.state.expireAllAccessTokens()
            let second = try await Self.storm(rigs, tag: "expired")
            #expect(second.allSatisfy { $0.1.status == 200 && $0.1.json?[path: "app"] == .string(Self.appOf[$0.0]!) },
                    "\(Dictionary(grouping: second.map(\.1.status), by: { $0 }).mapValues(\.count))")
            let (news, shop) = (api.state.tokenCalls(app: "news-app"), api.state.tokenCalls(app: "shop-app"))
            print("fleet of 3, two sessions, 300 requests on an expired token: \(news) news-app and \(shop) shop-app token requests in all")
            #expect(news == 2, "one token request per expiry for wx-news, fleet-wide")
            #expect(shop == 2, "one token request per expiry for wx-shop, fleet-wide")
            let counted = try await Self.tokenRequests(cluster)
            print("the fleet's token requests by session: \(counted)")
            #expect(counted == "wx-news=2,wx-shop=2")
            // Nobody logged out: every node holds both sessions, with the same token.
            for rig in rigs {
                let sessions = try await rig.admin(.GET, "/sessions").text
                #expect(!sessions.contains("logged_out"), "\(sessions)")
                #expect(!rig.logText.contains("session dropped"), "no logout on node \(rig.adminPort)")
            }
            if news != 2 || shop != 2 { FleetTests.printLogs(rigs) }
        }
    }

    @Test("with fleet.key_file, the PostgreSQL rows of named sessions hold sealed tokens only")
    func namedSessionsSealed() async throws {
        try await Self.withNamedSessions(sealed: true) { rigs, cluster, api in
            let replies = try await Self.storm(rigs, count: 5, tag: "sealed")
            #expect(replies.allSatisfy { $0.1.status == 200 })
            let rows = try await cluster.sql("SELECT session_key || ' ' || coalesce(tokens, '-') FROM concierge.session ORDER BY session_key")
            let lines = rows.split(separator: "\n").map(String.init)
            #expect(lines.map { $0.split(separator: " ").first.map(String.init) ?? "" } == ["wx-news", "wx-shop"])
            #expect(lines.allSatisfy { $0.split(separator: " ").last?.hasPrefix("gcm1:") == true }, "\(lines.map { $0.prefix(20) })")
            let issued = api.state.everyTokenIssued
            #expect(issued.count >= 2)
            let dump = try await cluster.dump()
            for token in issued {
                #expect(!rows.contains(token))
                #expect(!dump.contains(token))
            }
        }
    }

    // MARK: per_client

    /// Three nodes in front of the sample API's OAuth2 dialect, `default` with `per_client`.
    static func withInstances(_ body: ([ConciergeTestRig], PostgresCluster, RunningSampleAPI) async throws -> Void) async throws {
        try await PostgresCluster.withAPI(SampleAPIConfiguration(refreshDelay: .milliseconds(50), dialect: .oauth2)) { cluster, api in
            try await FleetTokenTests.withNodes(cluster: cluster, endpoints: DialectTestConfig.oauth2Endpoints,
                                                extra: DialectTestConfig.oauth2(sessionExtra: "  per_client: { header: Concierge-Session, max: 10, idle: 1h }"),
                                                api: api) { rigs in try await body(rigs, cluster, api) }
        }
    }

    /// Whether `/api/me` through `rig` as instance `id` answers as `user` (`nil`: not logged in), within a bounded wait.
    static func me(_ rigs: [ConciergeTestRig], id: String, is user: String?) async throws -> Bool {
        try await eventually {
            for rig in rigs {
                let reply = try await PerClientSessionTests.me(rig, id: id, "?check=\(UUID().uuidString)")
                if let user {
                    guard reply.status == 200, reply.json?[path: "id"] == .string(user) else { return false }
                } else if reply.status != 401 {
                    return false
                }
            }
            return true
        }
    }

    @Test("a per_client instance logged in on one node is used on the others; one refresh per instance fleet-wide; its logout reaches every node, another instance stays")
    func instancesAcrossNodes() async throws {
        let (alice, bob) = (PerClientSessionTests.alice, PerClientSessionTests.bob)
        try await Self.withInstances { rigs, cluster, api in
            #expect(try await PerClientSessionTests.login(rigs[0], "alice", id: alice).status == 200)
            #expect(try await PerClientSessionTests.login(rigs[2], "bob", id: bob).status == 200)
            #expect(try await Self.me(rigs, id: alice, is: "alice"), "alice's instance, logged in on node 0, is used on every node")
            #expect(try await Self.me(rigs, id: bob, is: "bob"), "bob's instance, logged in on node 2, is used on every node")
            #expect(api.state.tokenCalls == 0)

            // Both access tokens expire: a storm through the three nodes makes one refresh grant per instance.
            api.state.expireAllAccessTokens()
            let replies = try await withThrowingTaskGroup(of: TestResponse.self) { group in
                for (n, rig) in rigs.enumerated() {
                    for i in 0..<30 {
                        for id in [alice, bob] {
                            group.addTask { try await rig.get("/api/items?s=\(n)-\(i)", headers: [("Concierge-Session", id)]) }
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.allSatisfy { $0.status == 200 }, "\(Dictionary(grouping: replies.map(\.status), by: { $0 }).mapValues(\.count))")
            print("fleet of 3, two per_client instances, 180 requests on expired tokens: \(api.state.tokenCalls) refresh grants")
            #expect(api.state.tokenCalls == 2, "one refresh grant per instance, fleet-wide")
            let counted = try await cluster.sql("SELECT count(DISTINCT session_key) || '/' || count(*) FROM concierge.token_request")
            #expect(counted.trimmingCharacters(in: .whitespacesAndNewlines) == "2/2", "one token request for each of the two instances")

            // Alice's logout on node 1 reaches nodes 0 and 2; bob stays logged in everywhere.
            let dropped = try await rigs[1].admin(.DELETE, "/sessions/default/instances/\(alice)")
            #expect(dropped.json?[path: "logged_out"] == true)
            #expect(try await Self.me(rigs, id: alice, is: nil), "alice is logged out on every node")
            #expect(try await Self.me(rigs, id: bob, is: "bob"), "bob is still logged in on every node")
            // No instance id reaches a log or PostgreSQL in full.
            let keys = try await cluster.sql("SELECT string_agg(session_key, ' ') FROM concierge.session")
            #expect(!keys.contains(alice) && !keys.contains(bob))
            for rig in rigs {
                let lines = rig.logText.split(separator: "\n").filter { $0.contains(alice) || $0.contains(bob) }
                #expect(lines.isEmpty, "\(lines.prefix(3))")
            }
            if api.state.tokenCalls != 2 { FleetTests.printLogs(rigs) }
        }
    }

    // MARK: The schema of a fleet that shared `default` only

    @Test("a fleet's database of schema version 4 (one row per fleet) is migrated at start: its row becomes default's, adopted without a token request")
    func schemaVersion4Migrated() async throws {
        try await PostgresCluster.withAPI(SampleAPIConfiguration(dialect: .wechat)) { cluster, api in
            let (endpoints, extra) = (DialectTestConfig.weChatEndpoints, DialectTestConfig.weChat())
            try await FleetTokenTests.withNodes(1, cluster: cluster, endpoints: endpoints, extra: extra, api: api) { (rigs: [ConciergeTestRig]) async throws in
                #expect(try await rigs[0].get("/cgi-bin/items?before=1").status == 200)
            }
            #expect(api.state.tokenCalls == 1)
            let token = try #require(api.state.everyTokenIssued.last)
            // The database as schema version 4 left it: keyed by the fleet alone, no count of session changes.
            try await cluster.sql("""
                DROP TRIGGER session_change_insert ON concierge.session; DROP TRIGGER session_change_update ON concierge.session;
                DROP TRIGGER session_change_delete ON concierge.session; DROP FUNCTION concierge.count_session_changes();
                DROP TABLE concierge.session_change;
                ALTER TABLE concierge.session DROP CONSTRAINT session_pkey; ALTER TABLE concierge.session DROP COLUMN session_key;
                ALTER TABLE concierge.session ADD PRIMARY KEY (fleet);
                ALTER TABLE concierge.token_attempt DROP CONSTRAINT token_attempt_pkey; ALTER TABLE concierge.token_attempt DROP COLUMN session_key;
                ALTER TABLE concierge.token_attempt ADD PRIMARY KEY (fleet);
                ALTER TABLE concierge.token_request DROP COLUMN session_key; ALTER TABLE concierge.loop_signal DROP COLUMN session_key;
                UPDATE concierge.schema_version SET version = 4
                """)
            // Two new nodes (empty state directories): the migrated row is default's session.
            try await FleetTokenTests.withNodes(2, cluster: cluster, endpoints: endpoints, extra: extra, api: api) { (rigs: [ConciergeTestRig]) async throws in
                #expect(try await FleetTokenTests.everyNode(rigs, loggedIn: true), "every node adopts the migrated row")
                for (n, rig) in rigs.enumerated() { #expect(try await rig.get("/cgi-bin/items?after=\(n)").status == 200) }
                #expect(api.state.tokenCalls == 1, "the token stored before the migration is used, no token request")
                #expect(api.state.lastRequest("/cgi-bin/items")?.queryValue("access_token") == token)
            }
            let keys = try await cluster.sql("SELECT string_agg(session_key, ',') FROM concierge.session")
            #expect(keys.trimmingCharacters(in: .whitespacesAndNewlines) == "default")
            let version = try await cluster.sql("SELECT version FROM concierge.schema_version")
            #expect(version.trimmingCharacters(in: .whitespacesAndNewlines) == "6")
            let key = try await cluster.sql("""
                SELECT array_length(conkey, 1) FROM pg_constraint WHERE conrelid = 'concierge.session'::regclass AND contype = 'p'
                """)
            #expect(key.trimmingCharacters(in: .whitespacesAndNewlines) == "2", "the primary key is (fleet, session_key)")
        }
    }
}
