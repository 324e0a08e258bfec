@testable import ConciergeServer
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// The fleet's shared cache: within a TTL the upstream sees a key once for the whole fleet, and
/// an invalidation on any node removes the shared entry in the transaction that logs it.
extension FleetTests {
    static func sharedRows(_ cluster: PostgresCluster, like fragment: String = "") async throws -> Int {
        let text = try await cluster.sql("SELECT count(*) FROM concierge.cache WHERE key LIKE '%\(fragment)%'")
        return Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    @Test("shared cache: a key fetched on one node is a HIT (detail=fleet) on the others; cold start of 3 nodes over 50 keys: one upstream call per key")
    func sharedCacheServesTheFleet() async throws {
        try await Self.withFleet(sharedCache: true) { rigs, cluster, api in
            let first = try await rigs[0].get("/cgi-bin/items?k=1")
            #expect(first.header("X-Cache") == "MISS")
            #expect(try await eventually { try await Self.sharedRows(cluster, like: "k=1&") == 1 }, "the fill reaches PostgreSQL")
            for rig in rigs.dropFirst() {
                let reply = try await rig.get("/cgi-bin/items?k=1")
                #expect(reply.header("X-Cache") == "HIT")
                #expect(reply.header("Cache-Status")?.contains("detail=fleet") == true, "\(reply.header("Cache-Status") ?? "-")")
                #expect(reply.json == first.json)
                // Kept locally: the next hit does not ask PostgreSQL.
                #expect(try await rig.get("/cgi-bin/items?k=1").header("Cache-Status")?.contains("detail=fleet") == false)
            }
            #expect(api.state.calls("/cgi-bin/items") == 1)
            // Cold start: every key asked on each node in turn.
            let before = api.state.calls("/cgi-bin/items")
            for key in 0..<50 {
                #expect(try await rigs[0].get("/cgi-bin/items?cold=\(key)").status == 200)
                #expect(try await eventually { try await Self.sharedRows(cluster, like: "cold=\(key)&") == 1 })
                for rig in rigs.dropFirst() { #expect(try await rig.get("/cgi-bin/items?cold=\(key)").header("X-Cache") == "HIT") }
            }
            let perKey = Double(api.state.calls("/cgi-bin/items") - before) / 50
            print("fleet shared cache: upstream calls per key over 3 nodes: \(perKey) (without it: 3)")
            #expect(perKey == 1)
        }
    }

    @Test("shared cache: an invalidation on any node deletes the shared entry with the log row; a fill that raced an invalidation is not stored")
    func sharedCacheInvalidation() async throws {
        try await Self.withFleet(nodes: 2, sharedCache: true) { rigs, cluster, api in
            #expect(try await rigs[0].get("/cgi-bin/items?gone=1").status == 200)
            #expect(try await rigs[0].get("/cgi-bin/items?kept=1").status == 200)
            #expect(try await eventually { try await Self.sharedRows(cluster) == 2 })
            let reply = try await rigs[1].admin(.POST, "/cache/invalidate", json: ["pattern": "gone=1&"])
            #expect(reply.json?[path: "fleet.seq"] != nil, "\(reply.text)")
            // Deleted in the logging transaction: gone as soon as the admin call answers.
            #expect(try await Self.sharedRows(cluster, like: "gone=1&") == 0)
            #expect(try await Self.sharedRows(cluster, like: "kept=1&") == 1)
            #expect(try await eventually { try await Self.appliedSeq(rigs[0]) >= 1 })
            #expect(try await rigs[1].get("/cgi-bin/items?gone=1").header("X-Cache") == "MISS")
            #expect(api.state.calls("/cgi-bin/items") == 3)
            // Endpoint and all: the shared rows go too.
            _ = try await rigs[0].admin(.POST, "/cache/invalidate", json: ["endpoint": "items"])
            #expect(try await Self.sharedRows(cluster) == 0)

            // A fill whose upstream call began before an invalidation was logged is not stored.
            let database = try #require(rigs[0].daemon.lifecycle.fleet?.database)
            let entry = CacheEntry(key: "GET http://127.0.0.1:1/cgi-bin/items?raced=1 v=1", endpoint: "items", userID: nil, status: 200,
                                   headers: ["Content-Type": "application/json"], body: ByteBuffer(string: #"{"errcode":0}"#),
                                   storedAt: Date().timeIntervalSince1970, ttl: 60, staleWhileRevalidate: 0, staleIfError: 0, version: 1)
            let seen = try #require(try await database.logBounds()?.newest)
            _ = try await rigs[1].admin(.POST, "/cache/invalidate", json: ["pattern": "unrelated"])
            #expect(try await database.storeShared(entry, ifNoInvalidationAfter: seen) == false)
            #expect(try await database.storeShared(entry, ifNoInvalidationAfter: seen + 1) == true)
            let read = try #require(try await database.sharedEntry(entry.key))
            #expect(read.body == entry.body && read.headers["Content-Type"] == ["application/json"] && read.ttl == 60)
        }
    }

    @Test("shared cache with PostgreSQL killed: misses go to the upstream without waiting past fleet.timeout, and nothing fails")
    func sharedCacheWithoutPostgres() async throws {
        try await Self.withFleet(nodes: 2, sharedCache: true, timeout: "200ms") { rigs, cluster, api in
            #expect(try await rigs[0].get("/cgi-bin/items?before=1").status == 200)
            try await cluster.kill()
            var slowest = Duration.zero
            for i in 0..<20 {
                let began = ContinuousClock.now
                let reply = try await rigs[1].get("/cgi-bin/items?down=\(i)")
                slowest = max(slowest, ContinuousClock.now - began)
                #expect(reply.status == 200 && reply.header("X-Cache") == "MISS")
            }
            print("fleet shared cache, PostgreSQL down: slowest miss \(slowest)")
            #expect(slowest < .seconds(2), "a miss never waits long on a database that is down")
            #expect(api.state.calls("/cgi-bin/items") == 21)
            try await cluster.startServer()
        }
    }
}
