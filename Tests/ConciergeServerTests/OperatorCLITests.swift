import ConciergeCore
import ConciergeTestSupport
import Foundation
import Testing

/// The operator's command-line tools as real processes: `--version` and `stats --watch`.
@Suite("Operator CLI")
struct OperatorCLITests {
    @Test("--version prints ConciergeVersion.current, the version the package carries")
    func version() async throws {
        let result = try await DaemonProcess.run([ProcessTests.binary, "--version"])
        #expect(result.status == 0)
        #expect(result.output.trimmingCharacters(in: .whitespacesAndNewlines) == ConciergeVersion.current)
    }

    @Test("stats --watch into a pipe: one plain line per interval with totals, per-second rates and the hit ratio; SIGINT ends it")
    func statsWatchPlainLines() async throws {
        try await ConciergeTestRig.with { rig in
            let watcher = try DaemonProcess(
                arguments: [ProcessTests.binary, "stats", "--watch", "0.2", "--admin", "127.0.0.1:\(rig.adminPort)",
                            "--token", ConciergeTestRig.adminToken],
                configPath: "/nonexistent/stats-watch", environment: [:])
            @Sendable func lines() -> [Substring] { watcher.output.split(separator: "\n") }
            #expect(await eventually { lines().count >= 1 })
            #expect(lines()[0].contains("requests=0 requests_per_s=-"))
            #expect(lines()[0].contains("hit_ratio=- "))

            _ = try await rig.get("/api/items?limit=1")  // MISS
            _ = try await rig.get("/api/items?limit=1")  // HIT
            // The entry count follows once the cache writer has committed: wait for that line.
            @Sendable func counted(_ line: Substring) -> Bool { line.contains(" hits=1 ") && line.contains(" misses=1 ") && line.contains("entries=1") }
            #expect(await eventually { lines().contains(where: counted) })
            let line = try #require(lines().first(where: counted))
            #expect(line.contains("hit_ratio=50.0%"))
            #expect(!line.contains("requests_per_s=-"))
            #expect(!line.contains("entries_per_s"))
            #expect(!watcher.output.contains("\u{1B}["))

            watcher.signal(SIGINT)
            _ = try await watcher.wait()
            #expect(watcher.endedBySignal)
        }
    }

    @Test("an interval without --watch is a usage error")
    func intervalNeedsWatch() async throws {
        let result = try await DaemonProcess.run([ProcessTests.binary, "stats", "2", "--admin", "127.0.0.1:1", "--token", "x"])
        #expect(result.status == 64)
    }
}
