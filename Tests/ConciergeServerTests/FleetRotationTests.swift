import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import Synchronization
import Testing

/// A fleet in front of a real OAuth2 provider that rotates refresh tokens (django-oauth-toolkit,
/// ``OAuthProvider``): each refresh token is good for one refresh, so two nodes that renew the
/// same token each on their own get one success and one `invalid_grant`.
extension FleetTests {
    static let providerAvailable = OAuthProvider.python != nil || ProcessInfo.processInfo.environment["CI"] != nil

    /// A node's config in front of `provider` (RealProviderTests' session) in the fleet `name`.
    static func providerConfig(_ provider: OAuthProvider, cluster: PostgresCluster, node: String,
                               timeout: String) -> (endpoints: String, extra: String) {
        let (endpoints, extra) = RealProviderTests.config(port: provider.port)
        let fleet = "fleet:\n  postgres: \"\(cluster.url)\"\n  name: rotation\n  node: \(node)\n  key_file: \(cluster.directory)-fleet.key\n"
            + "  timeout: \(timeout)\n"
        return (endpoints, extra + "\n" + fleet)
    }

    /// Points a test config's upstreams at the provider (as RealProviderTests does).
    static func toProvider(_ provider: OAuthProvider) -> @Sendable (String) -> String {
        let base = provider.baseURL
        return { yaml in
            yaml.replacingOccurrences(of: "upstreams:\n", with: "upstreams:\n  idp: \(base)\n")
                .replacingOccurrences(of: "environment: debug\n", with: "environment: idp\n")
        }
    }

    /// `nodes` daemons in this process on one throwaway cluster, in front of a provider with the
    /// given grace period for rotated refresh tokens.
    static func withProviderFleet(nodes: Int, graceSeconds: Int = 0, timeout: String = "200ms",
                                  _ body: ([ConciergeTestRig], PostgresCluster, OAuthProvider) async throws -> Void) async throws {
        let cluster = try await PostgresCluster.start()
        let provider = try await OAuthProvider.start(refreshGraceSeconds: graceSeconds)
        let api = try await SampleAPI.start()
        FileManager.default.createFile(atPath: cluster.directory + "-fleet.key", contents: Data((0..<32).map { _ in UInt8.random(in: 0...255) }),
                                       attributes: [.posixPermissions: 0o600])
        func tearDown() async {
            await api.shutdown()
            await provider.stop()
            await cluster.stop()
            try? FileManager.default.removeItem(atPath: cluster.directory + "-fleet.key")
        }
        do {
            try await ConciergeTestRig.withFleet(count: nodes, setup: { node in
                let (endpoints, extra) = providerConfig(provider, cluster: cluster, node: "node-\(node)", timeout: timeout)
                return RigSetup(endpoints: endpoints, extra: extra, api: api, configTransform: toProvider(provider))
            }) { rigs in
                do {
                    for rig in rigs { #expect(try await fleetIsUp(rig), "node \(rig.adminPort) never reached PostgreSQL") }
                    try await body(rigs, cluster, provider)
                } catch {
                    printLogs(rigs)
                    throw error
                }
            }
        } catch {
            await tearDown()
            throw error
        }
        await tearDown()
    }

    /// Logs in through the first node and waits (bounded) until every node serves the user.
    static func logInEverywhere(_ rigs: [ConciergeTestRig]) async throws {
        #expect(try await RealProviderTests.login(rigs[0]).status == 200)
        for rig in rigs { #expect(try await eventually { try await rig.get("/api/me").status == 200 }) }
    }

    /// One round: `perNode` concurrent requests on every node; the statuses.
    static func round(_ rigs: [ConciergeTestRig], perNode: Int, tag: String) async throws -> [Int] {
        try await withThrowingTaskGroup(of: Int.self) { group in
            for rig in rigs {
                for i in 0..<perNode { group.addTask { try await rig.get("/api/me?\(tag)=\(i)").status } }
            }
            var statuses: [Int] = []
            for try await status in group { statuses.append(status) }
            return statuses
        }
    }

    static func everyoneLoggedIn(_ rigs: [ConciergeTestRig]) async throws -> Bool {
        for rig in rigs {
            if try await rig.admin(.GET, "/session").json?[path: "logged_in"] != true { return false }
        }
        return true
    }

    static func counted(_ statuses: [Int]) -> String {
        Dictionary(grouping: statuses, by: { $0 }).mapValues(\.count).sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " ")
    }

    @Test("PostgreSQL killed or frozen while the provider's rotating refresh token expires: no 401 during or after, every node logged in at the end",
          .enabled(if: providerAvailable), arguments: ["killed", "frozen"])
    func outageDuringExpiryLogsNoOneOut(outage: String) async throws {
        try await Self.withProviderFleet(nodes: 3) { rigs, cluster, provider in
            try await Self.logInEverywhere(rigs)
            let asked = RealProviderTests.int(try await provider.stats(), "refresh_requests")
            if outage == "killed" { try await cluster.kill() } else { try cluster.freeze() }
            try await provider.expireAccessTokens()
            // During the outage: 4 s of rounds of 5 requests per node.
            var during: [Int] = []
            let began = ContinuousClock.now
            do {
                while ContinuousClock.now - began < .seconds(4) {
                    during += try await Self.round(rigs, perNode: 5, tag: "during")
                    try await Task.sleep(for: .milliseconds(100))
                }
            } catch {
                if outage == "frozen" { try? cluster.thaw() }
                throw error
            }
            let renewals = RealProviderTests.int(try await provider.stats(), "refresh_requests") - asked
            if outage == "killed" { try await cluster.startServer() } else { try cluster.thaw() }
            // After: rounds until every node answers and holds the session (bounded).
            let restored = ContinuousClock.now
            var after: [Int] = []
            var converged = false
            let deadline = ContinuousClock.now + .seconds(30)
            while !converged, ContinuousClock.now < deadline {
                let statuses = try await Self.round(rigs, perNode: 5, tag: "after")
                after += statuses
                converged = try await Self.everyoneLoggedIn(rigs) && statuses.allSatisfy { $0 == 200 }
                if !converged { try await Task.sleep(for: .milliseconds(100)) }
            }
            let convergedAfter = ContinuousClock.now - restored
            let stats = try await provider.stats()
            let total = RealProviderTests.int(stats, "refresh_requests") - asked
            print("fleet outage (\(outage)) during a rotating expiry: token requests \(renewals) during, \(total) in all; "
                  + "during: \(Self.counted(during)); after: \(Self.counted(after)) (converged \(convergedAfter) after PostgreSQL was back); "
                  + "refused \(RealProviderTests.int(stats, "refresh_refused"))")
            if !converged || during.contains(401) || after.contains(401) { Self.printLogs(rigs) }
            #expect(converged, "every node logged in and answering at the end")
            #expect(!during.contains(401), "no 401 during the outage: \(Self.counted(during))")
            #expect(!after.contains(401), "no 401 after it: \(Self.counted(after))")
            // Each node renewed alone at most once: the refused ones waited for the fleet's token.
            #expect(total <= rigs.count, "\(total) token requests")
            var tokens = Set<String>()
            for rig in rigs { tokens.insert(try await rig.admin(.GET, "/session").json?[path: "access_token"]?.stringValue ?? "-") }
            #expect(tokens.count == 1, "every node holds the fleet's one token: \(tokens)")
            let logouts = rigs.flatMap { $0.logText.split(separator: "\n").filter { $0.contains("session dropped") } }
            #expect(logouts.isEmpty, "\(logouts)")
        }
    }
}

/// A node killed (SIGKILL) while its refresh grant is under way, after the provider rotated the
/// refresh token: the new one dies with it. The node that takes over presents the old one.
extension FleetTests {
    @Test("a holder killed mid-refresh: without a grace period at the provider the fleet logs out with reason refresh_lost; with a 10 s grace period no one is logged out",
          .enabled(if: providerAvailable), arguments: [0, 10])
    func killedHolderMidRefresh(graceSeconds: Int) async throws {
        try await Self.withProviderFleet(nodes: 1, graceSeconds: graceSeconds, timeout: "1s") { rigs, cluster, provider in
            let taker = rigs[0]
            let logouts = Mutex<[JSONValue]>([])
            taker.daemon.events.addObserver { event in
                if event.type == "session.logout" { logouts.withLock { $0.append(event.data[path: "reason"] ?? .null) } }
            }
            // The holder: a daemon process of the same fleet.
            let dir = try TempDir()
            let (endpoints, extra) = Self.providerConfig(provider, cluster: cluster, node: "node-holder", timeout: "1s")
            let text = Self.toProvider(provider)(TestConfig.yaml(apiPort: taker.api.port, directory: dir.path, endpoints: endpoints, extra: extra))
            let holder = try DaemonProcess.start(binary: ProcessTests.binary, config: text)
            let ports = try await holder.ports()
            let holderAdmin = "http://127.0.0.1:\(ports.admin)"
            let auth = [("Authorization", "Bearer \(ConciergeTestRig.adminToken)")]
            #expect(try await eventually(.seconds(20)) {
                try await ConciergeTestRig.send(.GET, holderAdmin + "/fleet", headers: auth).json?[path: "state"] == "ok"
            })
            #expect(try await RealProviderTests.login(taker).status == 200)
            #expect(try await eventually {
                try await ConciergeTestRig.send(.GET, holderAdmin + "/session", headers: auth).json?[path: "logged_in"] == true
            })
            // The provider rotates at once and holds its reply back for 5 s: the holder dies meanwhile.
            try await provider.setRefreshHold(5)
            try await provider.expireAccessTokens()
            let spent = RealProviderTests.int(try await provider.stats(), "refresh_grants")
            let held = Task { try? await ConciergeTestRig.send(.GET, "http://127.0.0.1:\(ports.proxy)/api/me?held=1") }
            #expect(try await eventually { RealProviderTests.int(try await provider.stats(), "refresh_grants") > spent },
                    "the holder's refresh grant rotated the refresh token")
            holder.signal(SIGKILL)
            _ = await held.value
            _ = try? await holder.wait(limit: .seconds(10))
            try await provider.setRefreshHold(0)
            // The taker sees the expired token, takes the fleet's lock and presents the old refresh token.
            let reply = try await taker.get("/api/me?after=kill")
            let session = try await taker.admin(.GET, "/session").json
            let reasons = logouts.withLock { $0 }
            print("fleet: holder killed mid-refresh, grace \(graceSeconds) s: reply \(reply.status), logouts \(reasons), "
                  + "refused \(RealProviderTests.int(try await provider.stats(), "refresh_refused"))")
            if graceSeconds == 0 {
                #expect(reply.status == 401 && reply.json?[path: "error"] == "not_logged_in", "\(reply.status) \(reply.text)")
                #expect(session?[path: "logged_in"] == false)
                #expect(reasons == [.string("refresh_lost")])
                #expect(taker.logText.contains("reason=refresh_lost"),
                        "the logout is logged with its own reason")
            } else {
                #expect(reply.status == 200, "\(reply.status) \(reply.text)")
                #expect(session?[path: "logged_in"] == true)
                #expect(reasons.isEmpty, "\(reasons)")
            }
        }
    }
}
