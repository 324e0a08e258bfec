import ConciergeCore
import ConciergeTestSupport
import Foundation
import Testing

/// SPEC §10 storage faults: a full disk under a running daemon. Mounts a 2 MB tmpfs, so it
/// runs only as root (skipped otherwise).
@Suite("Fault injection: disk full", .serialized, .enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
struct DiskFullTests {
    @Test("disk full: bob is served as bob, logout takes effect, /health degraded, errors logged once a minute, stored only when queued")
    func diskFull() async throws {
        let mount = try Tmpfs(sizeKB: 2048)
        defer { mount.unmount() }
        try await ConciergeTestRig.with(directory: mount.path + "/state") { rig in
            try await rig.login("alice")
            #expect(try await rig.get("/api/user/info").json?[path: "data.result.userId"] == "alice")

            try mount.fill()
            // Cache writes until SQLite runs out of room (the WAL has to grow).
            var degraded = false
            for i in 0..<2000 where !degraded {
                _ = try await rig.get("/api/items?fill=\(i)")
                if i % 10 == 9 { degraded = try await rig.admin(.GET, "/health", token: nil).json?[path: "storage"] == "degraded" }
            }
            #expect(degraded)
            let afterFailure = try await rig.get("/api/items?after=1")
            #expect(afterFailure.status == 200)
            #expect(afterFailure.header("Cache-Status")?.contains("stored") == false)

            let bob = try await rig.login("bob")
            #expect(bob.json?[path: "data.result.userId"] == "bob")
            let info = try await rig.get("/api/user/info")
            #expect(info.json?[path: "data.result.userId"] == "bob")
            #expect(try await rig.admin(.GET, "/session").json?[path: "user_id"] == "bob")

            let logout = try await rig.admin(.DELETE, "/session")
            #expect(logout.status == 200)
            #expect(logout.json == ["logged_out": true])
            #expect(try await rig.get("/api/user/info").status == 401)

            let health = try await rig.admin(.GET, "/health", token: nil)
            #expect(health.status == 200)
            #expect(health.json == ["status": "ok", "storage": "degraded"])
            let metrics = try await rig.admin(.GET, "/metrics").text
            #expect(metrics.contains("concierge_storage_degraded 1"))

            // An admin call whose SQLite write fails is a JSON error, not an empty 500.
            let invalidate = try await rig.admin(.POST, "/cache/invalidate", json: ["all": true])
            if invalidate.status != 200 {
                #expect(invalidate.json?[path: "error"]?.stringValue?.isEmpty == false, "\(invalidate.status) \(invalidate.text)")
            }

            let errorLines = rig.logs.lines.filter { $0.contains("ERROR") }
            print("disk full: \(errorLines.count) ERROR lines; invalidate answered \(invalidate.status) \(invalidate.text)")
            #expect(errorLines.count < 5, "\(errorLines.count) error lines: \(errorLines.prefix(5))")

            // Room again: storage recovers by itself and the logout reaches SQLite.
            mount.emptyFiller()
            let recovered = try await eventually(.seconds(30)) {
                try await rig.admin(.GET, "/health", token: nil).json == ["status": "ok"]
            }
            #expect(recovered)
            try await rig.withRestart { restarted async throws in
                #expect(try await restarted.admin(.GET, "/session").json?[path: "logged_in"] == false)
            }
        }
    }
}

/// A small tmpfs mounted for one test, with a filler file that takes every free byte.
final class Tmpfs: Sendable {
    let path: String
    var fillerPath: String { path + "/filler" }

    init(sizeKB: Int) throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-tmpfs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let status = try Self.run(["/bin/mount", "-t", "tmpfs", "-o", "size=\(sizeKB)k,mode=0700", "tmpfs", path])
        guard status == 0 else {
            try? FileManager.default.removeItem(atPath: path)
            throw DaemonError("mount tmpfs failed with \(status)")
        }
    }

    /// Writes the filler until the file system says it is full.
    func fill() throws {
        let fd = open(fillerPath, O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DaemonError("cannot create \(fillerPath)") }
        defer { close(fd) }
        for chunk in [65536, 4096, 512, 1] {
            let bytes = [UInt8](repeating: 0, count: chunk)
            // Bounded: the file system is a few MB at most.
            for _ in 0..<(1 << 16) {
                if write(fd, bytes, chunk) != chunk { break }
            }
        }
    }

    func emptyFiller() {
        truncate(fillerPath, 0)
    }

    func unmount() {
        _ = try? Self.run(["/bin/umount", "-l", path])
        try? FileManager.default.removeItem(atPath: path)
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        try ChildProcess(arguments).waitBlocking() ?? -1
    }
}
