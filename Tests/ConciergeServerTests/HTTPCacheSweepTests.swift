import ConciergeCore
import ConciergeTestSupport
import Foundation
import Testing

/// The sweeper and `cache.mode: http`: what decides that a stored reply goes is its own
/// freshness (and stale windows), for the top-level pass-through as for endpoints.
@Suite("HTTP cache sweep")
struct HTTPCacheSweepTests {
    @Test("a top-level mode:http entry with max-age=600 is still a HIT after two sweeps 31 s apart, and swept once past its freshness")
    func topLevelEntryOutlivesSweeps() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, n in
            .init(headers: [("Cache-Control", "max-age=600"), ("Date", HTTPDate.format(clock.now))], body: "\(request.path)#\(n)")
        }
        try await ConciergeTestRig.with(origin: origin, endpoints: "", extra: "cache: { mode: http }\n", asEnvironment: true,
                                        clock: clock) { rig in
            #expect(try await rig.get("/free/kept").header("X-Cache") == "MISS")
            await rig.daemon.cache.flush()
            let versions = rig.daemon.runtime.current.cacheVersions
            for _ in 0..<2 {
                clock.advance(by: 31)
                #expect(await rig.daemon.cache.sweep(currentVersions: versions) == 0)
            }
            // From SQLite too: the hot tier is dropped, so a HIT proves the row stayed.
            rig.daemon.cache.hot.removeAll()
            let hit = try await rig.get("/free/kept")
            #expect(hit.header("X-Cache") == "HIT" && hit.text == "/free/kept#0")
            #expect(origin.requests(path: "/free/kept").count == 1)
            clock.advance(by: 600)
            #expect(await rig.daemon.cache.sweep(currentVersions: versions) == 1, "past max-age with no stale window: swept")
        }
    }
}
