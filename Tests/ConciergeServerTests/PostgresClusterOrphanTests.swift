@testable import ConciergeTestSupport
import Foundation
import Testing

/// The test clusters of a killed suite (``PostgresCluster/reclaimOrphans(in:)``): stopped and
/// removed by the next test process, while the clusters of a running one are left alone.
@Suite("Test clusters of a killed suite are reclaimed", .serialized,
       .enabled(if: PostgresCluster.isAvailable || ProcessInfo.processInfo.environment["CI"] != nil))
struct PostgresClusterOrphanTests {
    @Test("a cluster whose test process is gone is stopped and its directory removed; one whose process runs answers on")
    func orphansReclaimed() async throws {
        let orphan = try await PostgresCluster.start()
        let kept = try await PostgresCluster.start()
        do {
            try await Self.reclaim(orphan, keeping: kept)
        } catch {
            await kept.stop()
            await orphan.stop()
            throw error
        }
        await kept.stop()
        await orphan.stop()
    }

    static func reclaim(_ orphan: PostgresCluster, keeping kept: PostgresCluster) async throws {
        // The orphan's owner: a process that has ended (and was reaped), as a killed suite's.
        let ended = try ChildProcess(["/bin/true"])
        #expect(await ended.wait(limit: .seconds(10)) == 0)
        try Data("\(ended.pid)\n".utf8).write(to: URL(fileURLWithPath: orphan.directory).appendingPathComponent(PostgresCluster.ownerFile))
        let postmaster = try #require(orphan.postmasterPID)
        #expect(PostgresCluster.isRunning(postmaster))

        let removed = await PostgresCluster.reclaimOrphans()
        #expect(removed.contains(orphan.directory))
        #expect(!removed.contains(kept.directory))
        #expect(!FileManager.default.fileExists(atPath: orphan.directory))
        // `pg_ctl -w` returned once the postmaster removed its pid file; its exit follows.
        let deadline = ContinuousClock.now + .seconds(10)
        while PostgresCluster.isRunning(postmaster), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(!PostgresCluster.isRunning(postmaster))
        #expect(try await kept.sql("SELECT 1").trimmingCharacters(in: .whitespacesAndNewlines) == "1")
    }
}
