import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import Testing

/// A node that dies while it makes the fleet's token request: here a daemon process killed
/// with SIGKILL while it holds the session row's lock and waits on a slow token endpoint.
extension FleetTests {
    @Test("a daemon process killed (SIGKILL) while it holds the renewal lock: a waiter takes over, at most 2 token requests, every other request answered")
    func killedLockHolderProcess() async throws {
        try await Self.withFleet(nodes: 2, refreshDelay: .seconds(2)) { rigs, cluster, api in
            let dir = try TempDir()
            let fleet = "fleet:\n  postgres: \"\(cluster.url)\"\n  name: test\n  node: node-process\n  key_file: \(cluster.directory)-fleet.key\n"
            let text = TestConfig.yaml(apiPort: api.port, directory: dir.path, endpoints: DialectTestConfig.weChatEndpoints,
                                       extra: DialectTestConfig.weChat() + "\n" + fleet)
            let holder = try DaemonProcess.start(binary: ProcessTests.binary, config: text, environment: DialectTestConfig.environment)
            let ports = try await holder.ports()
            let admin = "http://127.0.0.1:\(ports.admin)"
            let auth = [("Authorization", "Bearer \(ConciergeTestRig.adminToken)")]
            #expect(try await eventually(.seconds(20)) {
                try await ConciergeTestRig.send(.GET, admin + "/fleet", headers: auth).json?[path: "state"] == "ok"
            })
            #expect(try await rigs[0].get("/cgi-bin/items?warm=1").status == 200)
            #expect(api.state.tokenCalls == 1)
            api.state.advanceClock(by: .seconds(3 * 3600))
            // The process asks first: it takes the row's lock and waits on the 2-second token endpoint.
            let held = Task { try? await ConciergeTestRig.send(.GET, "http://127.0.0.1:\(ports.proxy)/cgi-bin/items?held=1") }
            let holding = "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = 'concierge'"
            #expect(try await eventually { !(try await cluster.sql(holding)).isEmpty })
            async let storm = Self.storm(rigs, count: 30, tag: "killed")
            // Both in-process nodes queue on the lock behind it.
            let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = 'concierge'"
            #expect(try await eventually { Int(try await cluster.sql(waiting).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 >= 1 })
            let killedAt = ContinuousClock.now
            holder.signal(SIGKILL)
            let statuses = try await storm
            let over = ContinuousClock.now - killedAt
            _ = await held.value
            _ = try? await holder.wait(limit: .seconds(10))
            print("fleet: lock holder process killed; the storm ended \(over) later (token endpoint 2 s); token requests \(api.state.tokenCalls - 1)")
            #expect(statuses.allSatisfy { $0 == 200 }, "\(Dictionary(grouping: statuses, by: { $0 }).mapValues(\.count))")
            #expect(api.state.tokenCalls - 1 <= 2)
            // Taken over within 1 s of the kill: the waiter's own token request (2 s) ends the storm.
            #expect(over < .seconds(2) + .seconds(1) + .seconds(1), "\(over)")
        }
    }
}

extension FleetTests {
    @Test("a user PostgreSQL refuses, or sslmode=require against a server without TLS: logged as an error and retried; the daemon serves on, /fleet degraded")
    func refusedCredentialsAreErrors() async throws {
        let cluster = try await PostgresCluster.start()
        do {
            for (url, words) in [("postgresql://intruder:guess@127.0.0.1:\(cluster.port)/concierge?sslmode=disable", "refused the user or password"),
                                 ("postgresql://concierge:fleet-db-secret@127.0.0.1:\(cluster.port)/concierge?sslmode=require", "offers no TLS")] {
                let fleet = "fleet:\n  postgres: \"\(url)\"\n  name: test\n  node: refused\n"
                try await ConciergeTestRig.with(endpoints: DialectTestConfig.weChatEndpoints, extra: DialectTestConfig.weChat() + "\n" + fleet,
                                                apiConfiguration: SampleAPIConfiguration(dialect: .wechat),
                                                environment: DialectTestConfig.environment) { rig async throws in
                    #expect(try await eventually { rig.logText.contains(words) }, "\(rig.logText.split(separator: "\n").filter { $0.contains("PostgreSQL") && !$0.contains("Starting") })")
                    let line = rig.logText.split(separator: "\n").first { $0.contains(words) } ?? ""
                    #expect(line.contains("ERROR") && !line.contains("fleet-db-secret"), "\(line)")
                    #expect(try await rig.get("/cgi-bin/items?alone=1").status == 200)
                    #expect(try await rig.admin(.GET, "/fleet").json?[path: "state"] == "degraded")
                }
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }
}

extension FleetTests {
    @Test("a session set on one node 100 times in a row: delay until another node holds it (p50, p99, max)")
    func sessionPropagationDelay() async throws {
        try await Self.withFleet(nodes: 2) { rigs, _, _ in
            var delays: [Duration] = []
            for i in 0..<100 {
                // A distinct 4-character prefix each time: GET /session shows only "prefix…(length)".
                let token = String(format: "%04d", i) + "-token-set-by-hand"
                let shown = try #require(try await rigs[0].admin(.PUT, "/session", json: ["access_token": .string(token)]).json?[path: "access_token"])
                let began = ContinuousClock.now
                #expect(try await eventually { try await rigs[1].admin(.GET, "/session").json?[path: "access_token"] == shown })
                delays.append(ContinuousClock.now - began)
            }
            delays.sort()
            print("fleet session delay over 100 (until the other node holds it, polled over HTTP): p50 \(delays[50]), p99 \(delays[99 - 1]), max \(delays[99])")
            // Reported, not asserted as a time (the rest of the suite loads the same two cores):
            // every one of the 100 reached the other node, which `eventually` proved above.
            #expect(delays.count == 100)
        }
    }
}
