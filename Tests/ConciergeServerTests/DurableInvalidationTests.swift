import ConciergeCore
import ConciergeSampleAPI
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Testing

/// SPEC §6: an acknowledged invalidation is durable. A real `concierge` process invalidates
/// more than 6,000 entries (by pattern, tag, endpoint, soft purge) and is killed with SIGKILL
/// at several moments after its `200`, or frozen and its files copied as a power cut would
/// leave them; the daemon started again never serves, lists or counts what it removed.
@Suite("Durable invalidations", .serialized)
struct DurableInvalidationTests {
    /// Entries written straight into the store, then a few through the proxy (those are asked for again).
    static let bulk = 6_400
    static let samples = 40

    enum Kind: String, CaseIterable, Sendable {
        case pattern, tags, endpoint, soft

        var body: String {
            switch self {
            case .pattern: #"{"pattern": "[?&]d="}"#
            case .tags: #"{"tags": ["durable"]}"#
            case .endpoint: #"{"endpoint": "items"}"#
            case .soft: #"{"pattern": "[?&]d=", "soft": true}"#
            }
        }
    }

    /// What the daemon started again shows of the invalidated entries.
    struct Aftermath: Sendable, CustomStringConvertible {
        var servedAgain = 0
        var listedAgain = 0
        var countedAgain = 0
        /// From starting the second daemon to its `/health`, with the replay pending.
        var startedIn = Duration.zero
        var description: String {
            "served \(servedAgain)/\(DurableInvalidationTests.samples), listed \(listedAgain), counted \(countedAgain); restart to /health \(startedIn)"
        }
    }

    static func config(storage: String, apiPort: Int) -> String {
        """
        listen: { proxy: 127.0.0.1:0, admin: 127.0.0.1:0 }
        admin: { token: proc-token }
        storage: { path: \(storage), memory_bytes: 4MB }
        upstreams: { debug: http://127.0.0.1:\(apiPort) }
        endpoints:
          - name: login
            match: POST /api/login
          - name: items
            match: GET /api/items
            cache: { ttl: 1h, tags: ["durable"] }
        \(TestConfig.defaultSession)
        limits: { shutdown_grace: 5s }

        """
    }

    /// A database holding ``bulk`` fresh entries of the endpoint `items`, tagged `durable`,
    /// each key with a `d=` parameter: what every kind of invalidation here selects.
    static func seed(_ path: String) async throws {
        let logger = Logger(label: "seed") { _ in SwiftLogNoOpLogHandler() }
        let database = try StorageDatabase(path: path, logger: logger)
        let cache = try CacheStore(database: database, maxBytes: 1 << 30, memoryBytes: 1 << 20, logger: logger)
        let writer = Task { await cache.run() }
        let now = Date().timeIntervalSince1970
        for i in 0..<bulk {
            var entry = CacheEntry(key: "GET http://127.0.0.1:1/api/items?d=bulk\(i) v=1", endpoint: "items", userID: nil, status: 200,
                                   headers: ["Content-Type": "application/json"], body: ByteBuffer(string: #"{"n":\#(i)}"#),
                                   storedAt: now, ttl: 3600, staleWhileRevalidate: 0, staleIfError: 0, version: 1)
            entry.tags = ["durable"]
            cache.store(entry)
            if i % 1000 == 999 { await cache.flush() }
        }
        await cache.flush()
        cache.finish()
        await writer.value
        try database.pool.close()
    }

    /// Copies the database and its WAL and shared-memory files (those that exist).
    static func copyDatabase(from source: String, to target: String) throws {
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: source + suffix) {
            try FileManager.default.copyItem(atPath: source + suffix, toPath: target + suffix)
        }
    }

    static let auth = ("Authorization", "Bearer proc-token")

    /// Starts a daemon on `storage` and waits for `/health`.
    static func start(storage: String, apiPort: Int) async throws -> (DaemonProcess, proxy: String, admin: String) {
        let daemon = try DaemonProcess.start(binary: ProcessTests.binary, config: config(storage: storage, apiPort: apiPort))
        let ports = try await daemon.ports()
        let admin = "http://127.0.0.1:\(ports.admin)"
        let healthy = await eventually { (try? await ConciergeTestRig.send(.GET, admin + "/health"))?.status == 200 }
        #expect(healthy)
        return (daemon, "http://127.0.0.1:\(ports.proxy)", admin)
    }

    /// One daemon invalidates by `kind`; `stop` ends it once the `200` is in; a second daemon
    /// starts on what it left (`restartOn`, or the same file) and is asked what it still has.
    static func round(_ kind: Kind, template: String, apiPort: Int,
                      stop: (DaemonProcess, _ storage: String) async throws -> String) async throws -> Aftermath {
        let dir = try TempDir()
        let storage = dir.path + "/state.sqlite"
        try copyDatabase(from: template, to: storage)
        let (first, proxy, admin) = try await start(storage: storage, apiPort: apiPort)
        for i in 0..<samples {
            let miss = try await ConciergeTestRig.send(.GET, proxy + "/api/items?d=s\(i)")
            #expect(miss.header("Cache-Status")?.hasSuffix("; stored") == true)
        }
        #expect(try await ConciergeTestRig.send(.GET, proxy + "/api/items?d=s0").header("X-Cache") == "HIT")
        let reply = try await ConciergeTestRig.send(.POST, admin + "/cache/invalidate", headers: [auth, ("Content-Type", "application/json")],
                                                    body: kind.body)
        #expect(reply.status == 200)
        let count = kind == .soft ? reply.json?[path: "marked"] : reply.json?[path: "removed"]
        #expect(count == .int(Int64(bulk + samples)), "\(kind): \(reply.text)")
        let restartOn = try await stop(first, storage)
        _ = try? await first.wait(limit: .seconds(10))

        let restarted = ContinuousClock.now
        let (second, proxyAgain, adminAgain) = try await start(storage: restartOn, apiPort: apiPort)
        defer { second.signal(SIGKILL) }
        var aftermath = Aftermath()
        aftermath.startedIn = ContinuousClock.now - restarted
        // Listed first: right after start-up, while a replay may still be deleting.
        let listed = try await ConciergeTestRig.send(.GET, adminAgain + "/cache/entries?limit=10000&pattern=d%3D", headers: [auth])
        guard case .array(let entries)? = listed.json?[path: "entries"] else { throw DaemonError("no listing: \(listed.text)") }
        // A soft purge keeps its rows, listed as stale (ttl ≤ 0); what else is listed came back.
        aftermath.listedAgain = entries.filter { kind != .soft || ($0[path: "ttl"]?.intValue ?? 1) > 0 }.count
        if kind != .soft {
            // Every entry there was is invalidated: any counted came back.
            let stats = try await ConciergeTestRig.send(.GET, adminAgain + "/stats", headers: [auth])
            aftermath.countedAgain = stats.json?[path: "entries"]?.intValue ?? -1
        }
        for i in 0..<samples {
            let again = try await ConciergeTestRig.send(.GET, proxyAgain + "/api/items?d=s\(i)")
            if again.header("X-Cache") != "MISS" { aftermath.servedAgain += 1 }
        }
        return aftermath
    }

    @Test("kill -9 at 0, 100 ms and 1 s after the 200 of a pattern, tag, endpoint or soft invalidation of 6,440 entries: none served, listed or counted again")
    func killNineMatrix() async throws {
        let api = try await SampleAPI.start()
        defer { Task { await api.shutdown() } }
        let seeded = try TempDir()
        let template = seeded.path + "/state.sqlite"
        try await Self.seed(template)
        var matrix: [String] = []
        for kind in Kind.allCases {
            for delay in [Duration.zero, .milliseconds(100), .seconds(1)] {
                let aftermath = try await Self.round(kind, template: template, apiPort: api.port) { daemon, storage in
                    if delay > .zero { try await Task.sleep(for: delay) }
                    daemon.signal(SIGKILL)
                    return storage
                }
                matrix.append("\(kind) +\(delay): \(aftermath)")
                #expect(aftermath.servedAgain == 0 && aftermath.listedAgain == 0 && aftermath.countedAgain == 0, "\(kind) killed \(delay) after the reply: \(aftermath)")
            }
        }
        print("kill -9 matrix (\(Self.bulk + Self.samples) entries each):\n" + matrix.joined(separator: "\n"))
    }

    @Test("a power cut right after the 200 (daemon frozen with SIGSTOP, its SQLite files copied, then SIGKILL): a daemon on the copy serves and lists none again")
    func powerCutCopy() async throws {
        let api = try await SampleAPI.start()
        defer { Task { await api.shutdown() } }
        let seeded = try TempDir()
        let template = seeded.path + "/state.sqlite"
        try await Self.seed(template)
        let copies = try TempDir()
        for kind in [Kind.pattern, .tags, .soft] {
            let aftermath = try await Self.round(kind, template: template, apiPort: api.port) { daemon, storage in
                daemon.signal(SIGSTOP)
                let copy = copies.path + "/\(kind).sqlite"
                try Self.copyDatabase(from: storage, to: copy)
                daemon.signal(SIGKILL)
                return copy
            }
            print("power cut after \(kind): \(aftermath)")
            #expect(aftermath.servedAgain == 0 && aftermath.listedAgain == 0 && aftermath.countedAgain == 0, "\(kind): \(aftermath)")
        }
    }
}
