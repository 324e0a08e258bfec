import ConciergeCore
import ConciergeTestSupport
import Foundation
import Testing

/// The fleet's invalidation stream: made on one node, applied on every node, in order, none
/// lost to a cut connection, a stopped node or a database that was down.
extension FleetTests {
    static func appliedSeq(_ rig: ConciergeTestRig) async throws -> Int64 {
        Int64(try await rig.admin(.GET, "/fleet").json?[path: "applied_seq"]?.intValue ?? -1)
    }

    static func invalidate(_ rig: ConciergeTestRig, _ body: JSONValue) async throws -> (status: Int, seq: Int64?) {
        let reply = try await rig.admin(.POST, "/cache/invalidate", json: body)
        return (reply.status, reply.json?[path: "fleet.seq"]?.intValue.map(Int64.init))
    }

    @Test("an invalidation on one node removes the entries of the others; 200 in a row: delay until applied everywhere")
    func invalidationsReachEveryNode() async throws {
        try await Self.withFleet { rigs, _, _ in
            for rig in rigs { #expect(try await rig.get("/cgi-bin/items?shared=1").status == 200) }
            #expect(try await rigs[1].get("/cgi-bin/items?shared=1").header("X-Cache") == "HIT")
            let first = try await Self.invalidate(rigs[0], ["pattern": "shared=1 "])
            #expect(first.status == 200)
            let seq = try #require(first.seq)
            for rig in rigs.dropFirst() {
                #expect(try await eventually { try await Self.appliedSeq(rig) >= seq })
                #expect(try await rig.get("/cgi-bin/items?shared=1").header("X-Cache") == "MISS")
            }
            // Mixed kinds, one after another: each measured until both other nodes applied it.
            let kinds: [JSONValue] = [["pattern": "x=1"], ["endpoint": "items"], ["all": true], ["pattern": "^GET .*/cgi-bin/user"]]
            var delays: [Duration] = []
            for i in 0..<200 {
                let published = try await Self.invalidate(rigs[0], kinds[i % kinds.count])
                let seq = try #require(published.seq)
                let began = ContinuousClock.now
                for rig in rigs.dropFirst() { #expect(try await eventually { try await Self.appliedSeq(rig) >= seq }) }
                delays.append(ContinuousClock.now - began)
            }
            delays.sort()
            print("fleet invalidation delay over 200 (until 2 other nodes applied, polled over HTTP): p50 \(delays[100]), p99 \(delays[197]), max \(delays[199])")
            #expect(try await Self.appliedSeq(rigs[2]) == 201)
            for rig in rigs.dropFirst() {
                let measured = try await rig.admin(.GET, "/fleet").json?[path: "apply_delay_ms"]
                print("fleet invalidation delay, commit to applied on \(rig.adminPort): \(measured?.serialized ?? "-")")
                #expect(measured?[path: "count"] == 201)
            }
        }
    }

    @Test("the listeners' connections cut (pg_terminate_backend) during 300 invalidations: none lost")
    func cutConnectionsLoseNothing() async throws {
        try await Self.withFleet(nodes: 2) { rigs, cluster, _ in
            var last: Int64 = 0
            for i in 0..<300 {
                last = try #require(try await Self.invalidate(rigs[0], ["pattern": .string("n=\(i)$")]).seq)
                if i == 100 || i == 200 {
                    let cut = try await cluster.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'")
                    #expect(Int(cut.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 >= 1)
                }
            }
            #expect(last == 300)
            #expect(try await eventually(.seconds(20)) { try await Self.appliedSeq(rigs[1]) == 300 })
        }
    }

    @Test("a node stopped during invalidations catches up at start; one away longer than the log empties its cache")
    func stoppedNodeCatchesUp() async throws {
        try await Self.withFleet(nodes: 2) { rigs, cluster, _ in
            #expect(try await rigs[1].get("/cgi-bin/items?kept=1").status == 200)
            let restarted = try await rigs[1].restart(environment: DialectTestConfig.environment)
            await restarted.stop(keepAPI: true, removeDirectory: false)
            for i in 0..<20 { _ = try await Self.invalidate(rigs[0], ["pattern": .string("absent=\(i)")]) }
            let back = try await restarted.restart(environment: DialectTestConfig.environment)
            #expect(try await eventually(.seconds(20)) { try await Self.appliedSeq(back) == 20 })
            #expect(try await back.get("/cgi-bin/items?kept=1").header("X-Cache") == "HIT", "patterns that match nothing here remove nothing")
            // Away while the log lost rows it had not applied (as after `retention`): its cache is emptied.
            await back.stop(keepAPI: true, removeDirectory: false)
            for i in 0..<5 { _ = try await Self.invalidate(rigs[0], ["pattern": .string("absent=more\(i)")]) }
            try await cluster.sql("DELETE FROM concierge.invalidation WHERE seq <= 22")
            let late = try await back.restart(environment: DialectTestConfig.environment)
            #expect(try await eventually(.seconds(20)) { try await Self.appliedSeq(late) == 25 })
            #expect(try await late.get("/cgi-bin/items?kept=1").header("X-Cache") == "MISS")
            await late.stop(keepAPI: true)
        }
    }

    @Test("PostgreSQL down: an invalidation is applied here and answered 202 pending, then delivered to the others once it is back")
    func pendingInvalidationDelivered() async throws {
        try await Self.withFleet(nodes: 2) { rigs, cluster, _ in
            #expect(try await rigs[1].get("/cgi-bin/items?later=1").status == 200)
            try await cluster.kill()
            let reply = try await rigs[0].admin(.POST, "/cache/invalidate", json: ["pattern": "later=1"])
            #expect(reply.status == 202)
            #expect(reply.json?[path: "fleet"] == "pending")
            try await cluster.startServer()
            #expect(try await eventually(.seconds(30)) { try await Self.appliedSeq(rigs[1]) >= 1 })
            #expect(try await rigs[1].get("/cgi-bin/items?later=1").header("X-Cache") == "MISS")
        }
    }
}
