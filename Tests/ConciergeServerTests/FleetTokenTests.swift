import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import Testing

/// A fleet's token requests after failures, and its revocations: three daemons and one real
/// PostgreSQL, in front of the sample API's WeChat dialect (a wrong secret) or a real OAuth2
/// provider (django-oauth-toolkit, counting the revocations it receives).
@Suite("Fleet: token pacing and revocation", .serialized,
       .enabled(if: PostgresCluster.isAvailable || ProcessInfo.processInfo.environment["CI"] != nil))
struct FleetTokenTests {
    /// Starts `nodes` daemons of one fleet on `cluster`, each from `endpoints` and `extra`, and
    /// waits until each has reached PostgreSQL; stops them all after `body`, whatever it did.
    static func withNodes(_ nodes: Int = 3, cluster: PostgresCluster, endpoints: String, extra: String, api: RunningSampleAPI,
                          environment: [String: String] = DialectTestConfig.environment,
                          configTransform: (@Sendable (String) -> String)? = nil, clock: ManualClock? = nil,
                          _ body: ([ConciergeTestRig]) async throws -> Void) async throws {
        try await ConciergeTestRig.withFleet(count: nodes, setup: { node in
            let fleet = "fleet:\n  postgres: \"\(cluster.url)\"\n  name: test\n  node: node-\(node)\n  timeout: 1s\n"
            return RigSetup(endpoints: endpoints, extra: extra + "\n" + fleet, api: api, configTransform: configTransform,
                            environment: environment, clock: clock)
        }) { rigs in
            for rig in rigs { #expect(try await FleetTests.fleetIsUp(rig), "node \(rig.adminPort) never reached PostgreSQL") }
            try await body(rigs)
        }
    }

    @Test("a fleet of 3 with a wrong secret paces as one: 3 × 100 requests in 3 s make at most 4 token requests, every reply unavailable with Retry-After")
    func wrongSecretPacedAsOne() async throws {
        try await PostgresCluster.withAPI(SampleAPIConfiguration(dialect: .wechat)) { cluster, api in
            // One clock for the three nodes (as one wall clock for a real fleet), moved by the test.
            let clock = ManualClock()
            try await Self.withNodes(cluster: cluster, endpoints: DialectTestConfig.weChatEndpoints, extra: DialectTestConfig.weChat(),
                                     api: api, environment: TokenPacingTests.wrongSecret, clock: clock) { rigs in
                let answers = try await TokenPacingTests.spread(300, over: .seconds(3), clock: clock, batch: 15) { i in
                    try await rigs[i % rigs.count].get("/cgi-bin/items?i=\(i)")
                }
                let fetches = api.state.tokenCalls
                print("fleet of 3, wrong WeChat secret, 300 requests in 3 s: \(fetches) token requests")
                #expect(answers.allSatisfy { $0.status == 502 }, "\(Dictionary(grouping: answers.map(\.status), by: { $0 }).mapValues(\.count))")
                #expect(answers.allSatisfy { ($0.retryAfter ?? 0) >= 1 }, "every reply has Retry-After")
                #expect(fetches <= 4, "\(fetches) token requests (one daemon alone makes 3 or 4)")
                if fetches > 4 { FleetTests.printLogs(rigs) }
            }
        }
    }

    /// Whether every node reports `logged_in` as `expected` (bounded wait).
    static func everyNode(_ rigs: [ConciergeTestRig], loggedIn expected: Bool) async throws -> Bool {
        try await eventually {
            for rig in rigs where try await rig.admin(.GET, "/session").json?[path: "logged_in"] != .bool(expected) { return false }
            return true
        }
    }

    @Test("in a fleet only the node that performs a logout revokes (1 revoke call per DELETE /session); a logout after a failed refresh revokes nothing",
          .enabled(if: OAuthProvider.python != nil || ProcessInfo.processInfo.environment["CI"] != nil))
    func oneRevocationPerFleetLogout() async throws {
        let cluster = try await PostgresCluster.start()
        let provider = try await OAuthProvider.start()
        let api = try await SampleAPI.start()
        let (endpoints, extra) = RealProviderTests.config(port: provider.port)
        let idp = provider.baseURL
        do {
            try await Self.withNodes(cluster: cluster, endpoints: endpoints, extra: extra, api: api, configTransform: { yaml in
                yaml.replacingOccurrences(of: "upstreams:\n", with: "upstreams:\n  idp: \(idp)\n")
                    .replacingOccurrences(of: "environment: debug\n", with: "environment: idp\n")
            }) { rigs in
                @Sendable func revokeCalls() async throws -> Int { RealProviderTests.int(try await provider.stats(), "revoke_calls") }
                // A DELETE /session on node 0: every node logs out, one revocation.
                #expect(try await RealProviderTests.login(rigs[0]).status == 200)
                #expect(try await Self.everyNode(rigs, loggedIn: true))
                #expect(try await rigs[0].admin(.DELETE, "/session").status == 200)
                #expect(try await Self.everyNode(rigs, loggedIn: false))
                #expect(try await eventually { try await revokeCalls() == 1 })
                // A marker: the next logout's revocation comes after any the first one caused.
                #expect(try await RealProviderTests.login(rigs[1]).status == 200)
                #expect(try await Self.everyNode(rigs, loggedIn: true))
                #expect(try await rigs[1].admin(.DELETE, "/session").status == 200)
                #expect(try await Self.everyNode(rigs, loggedIn: false))
                #expect(try await eventually { try await revokeCalls() >= 2 })
                let perLogout = try await revokeCalls()
                print("fleet of 3: \(perLogout) revoke calls for 2 logouts")
                #expect(perLogout == 2, "one revoke call per fleet logout")

                // A refresh refused with invalid_grant on node 2: every node logs out, nothing is revoked.
                #expect(try await RealProviderTests.login(rigs[2]).status == 200)
                #expect(try await Self.everyNode(rigs, loggedIn: true))
                try await provider.expireAccessTokens()
                try await provider.setFault("invalid_grant")
                #expect(try await rigs[2].get("/api/me").status == 401)
                #expect(try await Self.everyNode(rigs, loggedIn: false))
                try await provider.setFault(nil)
                #expect(try await RealProviderTests.login(rigs[0]).status == 200)
                #expect(try await Self.everyNode(rigs, loggedIn: true))
                #expect(try await rigs[0].admin(.DELETE, "/session").status == 200)
                #expect(try await eventually { try await revokeCalls() >= 3 })
                #expect(try await revokeCalls() == 3, "the failed refresh's logout revoked nothing on any node")
            }
        } catch {
            await api.shutdown()
            await provider.stop()
            await cluster.stop()
            throw error
        }
        await api.shutdown()
        await provider.stop()
        await cluster.stop()
    }
}
