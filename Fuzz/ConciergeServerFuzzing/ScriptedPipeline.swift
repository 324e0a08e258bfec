import ConciergeCore
import ConciergeStorage
@testable import ConciergeServer
import Foundation
import Logging

/// The request path over a scripted upstream, with no sockets: the pipeline the daemon builds
/// (``ConciergeDaemon/makePipeline(runtime:sessions:transport:logger:)``) over `transport`, a
/// real SQLite file in a fresh temp directory, and the real session, refresher and counters.
/// The one construction behind the fuzz target's rigs (``MissPathRig``) and the tests' stage
/// fixture (`StageFixture`, which imports this module `@testable`). The cache's writer is the
/// owner's to run (``CacheStore/run()``) and end (``CacheStore/finish()``).
final class ScriptedPipeline: Sendable {
    let directory: URL
    let cache: CacheStore
    let session: SessionState
    let stats: ProxyStats
    let events: EventBus
    let runtime: Runtime
    let sessions: SessionRegistry
    let pipeline: ProxyPipeline

    /// - Parameters:
    ///   - yaml: the configuration (`storage.path`, in `directory`, is added).
    ///   - label: the temp directory's prefix and the (silent) logger's label.
    ///   - encodedHits: hot entries get their head encoded, as in the daemon (hits as ready bytes).
    ///   - clock: the wall clock the cache and the session judge entries and tokens by.
    init(yaml: String, label: String, transport: any UpstreamTransport, encodedHits: Bool, clock: WallClock = .system) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-\(label)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let logger = Logger(label: label) { _ in SwiftLogNoOpLogHandler() }
        let config = try ConfigLoader.parse(yaml: yaml + "\nstorage:\n  path: \(directory.path)/c.sqlite\n")
        let database = try StorageDatabase(path: "\(directory.path)/c.sqlite", logger: logger)
        cache = try CacheStore(database: database, maxBytes: 64 << 20, memoryBytes: 8 << 20, logger: logger,
                               keepsAttachments: encodedHits, clock: clock)
        session = try SessionState(store: SessionStore(database: database), logger: logger)
        (stats, events) = (ProxyStats(), EventBus())
        var lifecycle = SessionLifecycle(session: session, cache: cache, stats: stats, events: events, logger: logger)
        lifecycle.clock = clock
        runtime = Runtime(config: config)
        sessions = try SessionRegistry(parts: .init(database: database, cache: cache, transport: transport, runtime: runtime, logger: logger),
                                       base: lifecycle, perClientDefault: config.session.perClient)
        runtime.bind(sessions.bind)
        pipeline = ConciergeDaemon.makePipeline(runtime: runtime, sessions: sessions, transport: transport, logger: logger)
    }

    /// Removes the SQLite files (after the cache's writer has finished).
    func removeFiles() {
        try? FileManager.default.removeItem(at: directory)
    }
}
