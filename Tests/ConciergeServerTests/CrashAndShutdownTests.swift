import ConciergeCore
import ConciergeSampleAPI
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import GRDB
import Logging
import NIOCore
import Synchronization
import Testing

/// SPEC §10: `max_bytes` bounds database + WAL; SIGTERM exits within `shutdown_grace` + 5 s whatever the cache
/// holds. Runs the real `concierge` binary.
@Suite("Fault injection: crash and shutdown", .serialized)
struct CrashAndShutdownTests {
    static func config(dir: String, apiPort: Int, maxBytes: String = "256MB", grace: String = "5s") -> String {
        """
        listen: { proxy: 127.0.0.1:0, admin: 127.0.0.1:0 }
        admin: { token: proc-token }
        storage: { path: \(dir)/state.sqlite, max_bytes: \(maxBytes), memory_bytes: 4MB }
        upstreams: { debug: http://127.0.0.1:\(apiPort) }
        endpoints:
          - name: login
            match: POST /api/login
          - name: userInfo
            match: GET /api/user/info
            login: required
          - name: items
            match: GET /api/items
            cache: { ttl: 1h }
        \(TestConfig.defaultSession)
        limits: { shutdown_grace: \(grace) }

        """
    }

    @Test("max_bytes lowered under a large cache: database + WAL shrink under it, and SIGTERM exits within grace + 5 s")
    func maxBytesShrinkAndBoundedShutdown() async throws {
        let api = try await SampleAPI.start()
        defer { Task { await api.shutdown() } }
        let dir = try TempDir()
        let path = dir.path + "/state.sqlite"
        // About 120 MB of entries written straight into the store.
        do {
            let logger = Logger(label: "fill") { _ in SwiftLogNoOpLogHandler() }
            let database = try StorageDatabase(path: path, logger: logger)
            let cache = try CacheStore(database: database, maxBytes: 1 << 30, memoryBytes: 1 << 20, logger: logger)
            let writer = Task { await cache.run() }
            let body = ByteBuffer(repeating: UInt8(ascii: "x"), count: 64 << 10)
            let now = Date().timeIntervalSince1970
            for i in 0..<1920 {
                cache.store(CacheEntry(key: "GET http://127.0.0.1:\(api.port)/api/items?fill=\(i) v=1", endpoint: "items", userID: nil, status: 200,
                                       headers: [("Content-Type", "application/json")], body: body, storedAt: now, ttl: 3600,
                                       staleWhileRevalidate: 0, staleIfError: 0, version: 1))
                if i % 64 == 63 { await cache.flush() }
            }
            await cache.flush()
            cache.finish()
            await writer.value
            try database.pool.close()
        }
        let before = Self.fileBytes(path)
        #expect(before > 100 << 20)

        // SIGTERM while the shrink is under way.
        let grace = 2
        let shrinking = try DaemonProcess.start(binary: ProcessTests.binary,
                                                config: Self.config(dir: dir.path, apiPort: api.port, maxBytes: "16MB", grace: "\(grace)s"))
        _ = try await shrinking.ports()
        let termStart = ContinuousClock.now
        shrinking.signal(SIGTERM)
        let status = try await shrinking.wait(limit: .seconds(grace + 10))
        let termTime = ContinuousClock.now - termStart
        #expect(status == 0)
        #expect(termTime < .seconds(grace + 5), "SIGTERM took \(termTime)")

        // Left running, the files get under max_bytes.
        let daemon = try DaemonProcess.start(binary: ProcessTests.binary, config: Self.config(dir: dir.path, apiPort: api.port, maxBytes: "16MB"))
        _ = try await daemon.ports()
        let shrinkStart = ContinuousClock.now
        let shrunk = await eventually(.seconds(60)) { Self.fileBytes(path) <= 16 << 20 }
        let shrinkTime = ContinuousClock.now - shrinkStart
        let after = Self.fileBytes(path)
        #expect(shrunk, "database + WAL still \(after) bytes")
        daemon.signal(SIGTERM)
        #expect(try await daemon.wait() == 0)
        print("max_bytes 16MB over \(before >> 20) MB: database + WAL \(after >> 20) MB after \(shrinkTime); SIGTERM mid-shrink exited in \(termTime) (grace \(grace) s)")
    }

    static func fileBytes(_ path: String) -> Int {
        [path, path + "-wal"].reduce(0) { total, p in
            total + (((try? FileManager.default.attributesOfItem(atPath: p))?[.size] as? NSNumber)?.intValue ?? 0)
        }
    }
}

