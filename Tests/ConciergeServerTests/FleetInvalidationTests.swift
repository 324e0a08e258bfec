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

    @Test("an invalidation on one node removes the entries of the others; 1,000 of mixed kinds in a row: delay until applied everywhere")
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
            for i in 0..<1_000 {
                let published = try await Self.invalidate(rigs[0], kinds[i % kinds.count])
                let seq = try #require(published.seq)
                let began = ContinuousClock.now
                for rig in rigs.dropFirst() { #expect(try await eventually { try await Self.appliedSeq(rig) >= seq }) }
                delays.append(ContinuousClock.now - began)
            }
            delays.sort()
            print("fleet invalidation delay over 1,000 (until 2 other nodes applied, polled over HTTP): p50 \(delays[500]), p99 \(delays[990]), max \(delays[999])")
            #expect(try await Self.appliedSeq(rigs[2]) == 1_001)
            for rig in rigs.dropFirst() {
                let measured = try await rig.admin(.GET, "/fleet").json?[path: "apply_delay_ms"]
                print("fleet invalidation delay, commit to applied on \(rig.adminPort): \(measured?.serialized ?? "-")")
                #expect(measured?[path: "count"] == 1_000, "the last 1,000 are kept")
                // From the commit to the application on this node: reported (printed above and in
                // docs/fleet.md, p99 well under 100 ms on an idle machine), not asserted as a time:
                // the rest of the suite loads the same two cores. That each was applied is proven
                // by the sequence numbers above.
                let p99 = measured?[path: "p99"].flatMap { if case .double(let d) = $0 { d } else { $0.intValue.map(Double.init) } }
                #expect(p99.map { $0 >= 0 } == true, "a p99 in milliseconds")
                let metrics = try await rig.admin(.GET, "/metrics").text
                #expect(metrics.contains("concierge_fleet_up 1"))
                #expect(metrics.contains("concierge_fleet_applied_seq 1001"))
                #expect(metrics.contains("concierge_fleet_invalidation_delay_seconds_count 1001"), "\(metrics.split(separator: "\n").filter { $0.contains("fleet") })")
            }
        }
    }

    @Test("by tags and soft: made on one node, applied on the others (a soft purge marks, the next request there is a miss without a stale window)")
    func tagsAndSoftReachEveryNode() async throws {
        try await Self.withFleet { rigs, _, _ in
            for rig in rigs { _ = try await rig.get("/cgi-bin/items?shared=7") }
            #expect(try await rigs[2].get("/cgi-bin/items?shared=7").header("X-Cache") == "HIT")
            let byTag = try await Self.invalidate(rigs[0], ["tags": ["q:7"]])
            let seq = try #require(byTag.seq)
            for rig in rigs.dropFirst() {
                #expect(try await eventually { try await Self.appliedSeq(rig) >= seq })
                #expect(try await rig.get("/cgi-bin/items?shared=7").header("X-Cache") == "MISS")
            }
            #expect(try await rigs[1].get("/cgi-bin/items?shared=7").header("X-Cache") == "HIT")
            _ = try await rigs[0].get("/cgi-bin/items?shared=7")
            let soft = try await rigs[0].admin(.POST, "/cache/invalidate", json: ["tags": ["items"], "soft": true])
            #expect(soft.json?[path: "marked"] == 1 && soft.json?[path: "removed"] == 0)
            let softSeq = try #require(soft.json?[path: "fleet.seq"]?.intValue)
            for rig in rigs.dropFirst() {
                #expect(try await eventually { try await Self.appliedSeq(rig) >= Int64(softSeq) })
                #expect(try await rig.get("/cgi-bin/items?shared=7").header("X-Cache") == "MISS", "marked stale, no window")
            }
        }
    }

    @Test("the listeners' connections cut (pg_terminate_backend) twice during 1,000 invalidations of mixed kinds: none lost")
    func cutConnectionsLoseNothing() async throws {
        try await Self.withFleet(nodes: 2) { rigs, cluster, _ in
            var last: Int64 = 0
            for i in 0..<1_000 {
                let kind: JSONValue = i % 10 == 9 ? ["endpoint": "items"] : i % 25 == 24 ? ["all": true] : ["pattern": .string("n=\(i)$")]
                last = try #require(try await Self.invalidate(rigs[0], kind).seq)
                if i == 300 || i == 600 {
                    let cut = try await cluster.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'")
                    #expect(Int(cut.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 >= 1)
                }
            }
            #expect(last == 1_000)
            #expect(try await eventually(.seconds(20)) { try await Self.appliedSeq(rigs[1]) == 1_000 })
        }
    }

    @Test("?wait=fleet answers once every node applied it; GET /fleet lists the nodes; a stopped node is listed as lagging, then silent")
    func waitForTheFleet() async throws {
        try await Self.withFleet { rigs, _, _ in
            for rig in rigs { #expect(try await rig.get("/cgi-bin/items?waited=1").status == 200) }
            // Every node reports within a second of starting.
            #expect(try await eventually { try await rigs[0].admin(.GET, "/fleet").json?[path: "nodes"]?.arrayValue?.count == 3 })
            let waited = try await rigs[0].admin(.POST, "/cache/invalidate?wait=fleet", json: ["pattern": "waited=1"])
            #expect(waited.status == 200)
            #expect(waited.json?[path: "fleet.lagging"] == [], "\(waited.text)")
            let seq = try #require(waited.json?[path: "fleet.seq"]?.intValue)
            // No polling: the reply came after both others applied it.
            for rig in rigs.dropFirst() {
                #expect(try await Self.appliedSeq(rig) >= Int64(seq))
                #expect(try await rig.get("/cgi-bin/items?waited=1").header("X-Cache") == "MISS")
            }
            let listed = try await rigs[1].admin(.GET, "/fleet").json
            #expect(listed?[path: "seq"]?.intValue == seq)
            let nodes = listed?[path: "nodes"]?.arrayValue ?? []
            #expect(nodes.compactMap { $0[path: "node"]?.stringValue } == ["node-0", "node-1", "node-2"])
            #expect(nodes.allSatisfy { $0[path: "state"] == "ok" && $0[path: "applied_seq"]?.intValue == seq && $0[path: "last_seen"]?.stringValue != nil },
                    "\(nodes)")
            #expect(try await rigs[0].admin(.POST, "/cache/invalidate?wait=soon", json: ["all": true]).status == 400)
            // A node stopped: still seen in the last minute, so waited for, and named after 5 s.
            await rigs[2].stop()
            let began = ContinuousClock.now
            let lagging = try await rigs[0].admin(.POST, "/cache/invalidate?wait=fleet", json: ["pattern": "waited=2"])
            let took = ContinuousClock.now - began
            #expect(lagging.json?[path: "fleet.lagging"] == ["node-2"], "\(lagging.text)")
            #expect(took >= .seconds(5) && took < .seconds(7), "\(took)")
            let silent = try await rigs[0].admin(.GET, "/fleet").json?[path: "nodes"]?.arrayValue?.last
            #expect(silent?[path: "node"] == "node-2")
            #expect(silent?[path: "state"] == "silent")
        }
    }

    @Test("a node stopped during invalidations catches up at start; one away longer than the log empties its cache")
    func stoppedNodeCatchesUp() async throws {
        try await Self.withFleet(nodes: 2) { rigs, cluster, _ in
            #expect(try await rigs[1].get("/cgi-bin/items?kept=1").status == 200)
            // Restarted, then stopped.
            try await rigs[1].withRestart(environment: DialectTestConfig.environment) { _ in }
            for i in 0..<20 { _ = try await Self.invalidate(rigs[0], ["pattern": .string("absent=\(i)")]) }
            try await rigs[1].withRestart(environment: DialectTestConfig.environment) { back async throws in
                #expect(try await eventually(.seconds(20)) { try await Self.appliedSeq(back) == 20 })
                #expect(try await back.get("/cgi-bin/items?kept=1").header("X-Cache") == "HIT", "patterns that match nothing here remove nothing")
            }
            // Away while the log lost rows it had not applied (as after `retention`): its cache is emptied.
            for i in 0..<5 { _ = try await Self.invalidate(rigs[0], ["pattern": .string("absent=more\(i)")]) }
            try await cluster.sql("DELETE FROM concierge.invalidation WHERE seq <= 22")
            try await rigs[1].withRestart(environment: DialectTestConfig.environment) { late async throws in
                #expect(try await eventually(.seconds(20)) { try await Self.appliedSeq(late) == 25 })
                #expect(try await late.get("/cgi-bin/items?kept=1").header("X-Cache") == "MISS")
            }
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
