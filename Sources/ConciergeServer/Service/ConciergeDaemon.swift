import ConciergeCore
import ConciergeStorage
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// The whole daemon: storage, session, pipeline, listeners, and the services that run
/// them as one `ServiceGroup` (`concierge serve`).
///
/// Shutdown order (reverse of start): the cache's scans end at once (a listing or pattern
/// invalidation under way answers `503`), the proxy stops accepting and finishes requests in
/// flight, then the admin listener, the sweeper and notifier stop, and last the cache
/// writer commits what is queued before SQLite is closed.
public final class ConciergeDaemon: Sendable {
    public let runtime: Runtime
    public let database: StorageDatabase
    public let cache: CacheStore
    public let session: SessionState
    public let stats: ProxyStats
    public let events: EventBus
    public let client: UpstreamClient
    /// Buffered exchanges through Concierge's own connection pool, streamed ones through `client`.
    public let transport: PooledUpstreamTransport
    public let pipeline: ProxyPipeline
    /// The one owner of session side effects (login, renewal, logout) of `default`.
    let lifecycle: SessionLifecycle
    /// Every live session by name, and the instances of `per_client` ones.
    let sessions: SessionRegistry
    /// Revokes the tokens of a logout at the provider (`session.revoke`).
    let revocation: TokenRevocation
    public let configPath: String?
    public let logger: Logger
    let logSink: LogSink
    let group: any EventLoopGroup
    let notifier: SystemdNotifier
    let hooks: HookDispatcher
    /// With `telemetry.traces`: the tracer requests start their spans with, and the service
    /// exporting them.
    let tracing: (tracer: RequestTracer, export: any Service)?
    private let readiness = Readiness()
    /// The running service group's ``ShutdownRequestService``, told by ``shutdown()``.
    private let shutdownRequests = Mutex<AsyncStream<Void>.Continuation?>(nil)
    private let shutdownRequested = Mutex(false)

    /// Opens storage and builds the pipeline; throws ``StorageError`` when the state path
    /// is unusable.
    /// `clock`: the wall clock entries are stored and judged by (tests pass a ``ManualClock``'s).
    public init(config: ConciergeConfig, configPath: String?, logSink: LogSink = .standardOutput,
                environment: [String: String] = ProcessInfo.processInfo.environment, clock: WallClock = .system) throws {
        self.configPath = configPath
        self.logSink = logSink
        let journald = environment["JOURNAL_STREAM"].map { !$0.isEmpty } ?? false
        let level = Self.level(config.log.level)
        let format: ConciergeLogHandler.Format = config.log.format == .json ? .json : .text
        let scrubber = SecretScrubber()
        func makeLogger(_ label: String) -> Logger {
            Logger(label: label) { label in
                ConciergeLogHandler(label: label, level: level, format: format, journald: journald, sink: logSink, scrubber: scrubber)
            }
        }
        logger = makeLogger("concierge")
        // Token-file problems are config errors (78), found before storage is touched.
        adminToken = try Self.adminToken(config)
        group = MultiThreadedEventLoopGroup.singleton
        notifier = SystemdNotifier(environment: environment)
        runtime = Runtime(config: config)
        database = try StorageDatabase(path: config.storage.path, logger: logger)
        cache = try CacheStore(database: database, maxBytes: config.storage.maxBytes, memoryBytes: config.storage.memoryBytes, logger: logger,
                               keepsAttachments: true, clock: clock)
        session = try SessionState(store: SessionStore(database: database), logger: logger)
        stats = ProxyStats()
        events = EventBus()
        client = UpstreamClient(eventLoopGroup: group)
        transport = PooledUpstreamTransport(group: group, client: client) { [runtime] in runtime.current.settings.upstreams }
        revocation = TokenRevocation(transport: transport, runtime: runtime, logger: logger)
        var lifecycle = SessionLifecycle(session: session, cache: cache, stats: stats, events: events, logger: logger, revocation: revocation,
                                         clock: clock)
        lifecycle.fleet = try Self.fleetSession(config, session: session, stats: stats, events: events, logger: logger, clock: clock)
        if let fleet = lifecycle.fleet {
            stats.enableFleetMetrics()
            lifecycle.fleetInvalidations = FleetInvalidations(stats: stats, database: fleet.database, local: FleetLocalStore(database: database, fleet: fleet.config.name),
                                                              cache: cache, config: fleet.config, logger: logger)
        }
        sessions = try SessionRegistry(parts: .init(database: database, cache: cache, transport: transport, runtime: runtime, logger: logger),
                                       base: lifecycle, perClientDefault: config.session.perClient)
        self.lifecycle = sessions.defaultUnit.lifecycle
        let registry = sessions
        runtime.bind { name, settings in registry.bind(name, settings) }
        tracing = try Self.tracing(config, stats: stats, logger: logger)
        pipeline = Self.makePipeline(runtime: runtime, sessions: sessions, transport: transport, logger: logger)
        hooks = HookDispatcher(runtime: runtime, client: client, logger: logger)
        let hooks = self.hooks
        events.addObserver { hooks.deliver($0) }
        requestLogger = makeLogger("concierge.request")
        let runtime = self.runtime
        let sessions = self.sessions
        scrubber.addSource { runtime.current.settings.secretValues }
        scrubber.addSource(feed: SessionState.secretFeed) { sessions.secretsForLogs }
        if let password = config.fleet?.postgres.password, !password.isEmpty { scrubber.addSource { [password] } }
    }

    /// The fleet's side of the session, with `fleet:`; a key file that cannot be used is a
    /// config error (exit 78).
    static func fleetSession(_ config: ConciergeConfig, session: SessionState, stats: ProxyStats, events: EventBus,
                             logger: Logger, clock: WallClock = .system) throws -> FleetSession? {
        guard let fleet = config.fleet else { return nil }
        let seal: TokenSeal
        do {
            seal = try TokenSeal.load(keyFile: fleet.keyFile)
        } catch {
            throw ConfigError(file: nil, issues: [ConfigIssue(path: "fleet.key_file", line: nil, message: error.description)])
        }
        if !seal.seals { logger.warning("fleet: no fleet.key_file: tokens are stored in PostgreSQL in clear") }
        logger.info("fleet", metadata: ["name": "\(fleet.name)", "node": "\(fleet.node)", "postgres": "\(fleet.postgres.masked)"])
        return FleetSession(database: try FleetDatabase(config: fleet, logger: logger), seal: seal, config: fleet, session: session,
                            stats: stats, events: events, logger: logger, clock: clock)
    }

    /// The tracer and its export service, with `telemetry.traces`.
    static func tracing(_ config: ConciergeConfig, stats: ProxyStats, logger: Logger) throws -> (tracer: RequestTracer, export: any Service)? {
        guard let traces = config.telemetry.traces else { return nil }
        do {
            let made = try RequestTracer.make(traces, fleet: config.fleet, stats: stats, logger: logger)
            logger.info("traces", metadata: ["endpoint": "\(traces.tracesURL)", "sample_ratio": "\(traces.sampleRatio)"])
            return (made.0, made.1)
        } catch {
            throw ConfigError(file: nil, issues: [ConfigIssue(path: "telemetry.traces", line: nil, message: "\(error)")])
        }
    }

    let requestLogger: Logger
    /// Read once at start (a reload does not change the admin token).
    let adminToken: String?

    /// The request path's stages, each given only what it needs.
    static func makePipeline(runtime: Runtime, sessions: SessionRegistry, transport: any UpstreamTransport,
                             logger: Logger) -> ProxyPipeline {
        let (lifecycle, refresher, cache) = (sessions.defaultUnit.lifecycle, sessions.defaultUnit.refresher, sessions.parts.cache)
        let (stats, events) = (lifecycle.stats, lifecycle.events)
        let health = UpstreamHealth(events: events)
        let exchange = UpstreamExchange(transport: transport, refresher: refresher, lifecycle: lifecycle,
                                        success: EnvelopeSuccess(lifecycle: lifecycle, stats: stats, logger: logger),
                                        health: health, logger: logger)
        var shared: FleetSharedCache? = nil
        if let fleet = lifecycle.fleet, fleet.config.sharedCache, let invalidations = lifecycle.fleetInvalidations {
            shared = FleetSharedCache(fleet: fleet, invalidations: invalidations)
        }
        return ProxyPipeline(runtime: runtime, cache: cache, exchange: exchange, revalidation: RevalidationService(), shared: shared,
                             sessions: sessions)
    }

    static func level(_ level: ConciergeConfig.Log.Level) -> Logger.Level {
        switch level {
        case .debug: return .debug
        case .info: return .info
        case .warning: return .warning
        case .error: return .error
        }
    }

    /// Ports actually bound (useful with port 0); waits until both listeners are up.
    public func waitUntilReady() async -> (proxy: Int, admin: Int?) {
        await readiness.wait()
    }

    /// Starts a graceful shutdown, as SIGTERM does.
    public func shutdown() {
        shutdownRequested.withLock { $0 = true }
        shutdownRequests.withLock { $0 }?.yield()
    }

    /// Runs until SIGTERM/SIGINT (when `handleSignals`) or ``shutdown()``.
    public func run(handleSignals: Bool = true) async throws {
        let config = runtime.current.settings
        let context = ProxyServerContext(pipeline: pipeline, stats: stats, requestLog: RequestLog(logger: requestLogger), tracer: tracing?.tracer)
        let readiness = self.readiness
        let connections = OpenConnections()
        let proxy = ProxyListener(context: context, listeners: config.listen.proxyListeners, group: group, logger: logger,
                                  onBound: { readiness.proxyBound($0) }, connections: connections)

        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        func add(_ service: any Service) {
            services.append(.init(service: service, successTerminationBehavior: .gracefullyShutdownGroup, failureTerminationBehavior: .gracefullyShutdownGroup))
        }
        // First: the group stops services in reverse order, so the spans of the last requests
        // are exported and hooks are delivered to the end.
        if let tracing { add(tracing.export) }
        add(hooks)
        add(CacheWriterService(cache: cache, logger: logger))
        if let fleet = lifecycle.fleet, let invalidations = lifecycle.fleetInvalidations {
            // The pool before its users: it stops after them.
            add(fleet.database.client)
            add(FleetService(fleet: fleet, invalidations: invalidations, sessions: sessions, sharedCache: pipeline.shared))
        }
        // After the writer: the group stops services in reverse order, so refreshes end first.
        add(pipeline.revalidation)
        add(revocation)
        add(SweeperService(daemon: self))
        add(StorageRecoveryService(daemon: self))
        add(MemoryReturnService(connections: connections))
        add(NotifierService(daemon: self, readiness: readiness))
        if handleSignals { add(ReloadSignalService(daemon: self)) }
        if let admin = try makeAdminService() {
            add(admin)
        } else {
            readiness.adminBound(nil)
        }
        add(proxy)
        add(ScanStopService(cache: cache))
        let (requests, requested) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        add(ShutdownRequestService(requests: requests))
        var configuration = ServiceGroupConfiguration(services: services, logger: logger)
        if handleSignals { configuration.gracefulShutdownSignals = [.sigterm, .sigint] }
        let serviceGroup = ServiceGroup(configuration: configuration)
        shutdownRequests.withLock { $0 = requested }
        if shutdownRequested.withLock({ $0 }) { requested.yield() }
        defer { shutdownRequests.withLock { $0 = nil } }
        do {
            try await serviceGroup.run()
        } catch {
            await transport.shutdown()
            try? database.pool.close()
            throw error
        }
        await transport.shutdown()
        events.closeAll()
        try? database.pool.close()
        logger.info("stopped")
    }

    /// The admin token from `admin.token`, `admin.token_file` or `CONCIERGE_ADMIN_TOKEN`.
    /// - Throws: ``ConfigError`` naming `admin.token_file` when that file is missing,
    ///   unreadable, empty or readable by group or others.
    public static func adminToken(_ config: ConciergeConfig) throws(ConfigError) -> String? {
        if let token = config.admin.token { return token }
        if let file = config.admin.tokenFile {
            switch AdminTokenFile.read(file) {
            case .success(let token): return token
            case .failure(let problem): throw problem.configError
            }
        }
        return nil
    }

    /// Loopback addresses the admin listener may bind without a warning.
    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }

    private func makeAdminService() throws -> (any Service)? {
        let config = runtime.current.settings
        guard let token = adminToken else {
            logger.error("admin listener not started: no admin token (set admin.token, admin.token_file or CONCIERGE_ADMIN_TOKEN)")
            return nil
        }
        let router = AdminAPI(control: adminControl, token: token).makeRouter()
        let address: BindAddress
        let socketPath: String?
        switch config.listen.admin {
        case .tcp(let host, let port):
            address = .hostname(host, port: port)
            socketPath = nil
            if !Self.isLoopback(host) {
                logger.warning("admin listener bound to a non-loopback address: anyone who can reach it can try the token; prefer 127.0.0.1 or a unix socket",
                               metadata: ["address": "\(host):\(port)"])
            }
        case .unix(let path):
            socketPath = path
            unlink(path)
            address = .unixDomainSocket(path: path)
        }
        let readiness = self.readiness
        var adminLogger = logger
        adminLogger.logLevel = max(logger.logLevel, .warning)
        let logger = self.logger
        let acceptFailures = AcceptFailureLog(logger: logger, listener: "admin")
        return Application(router: router, configuration: .init(address: address, serverName: "concierge-admin"),
                           onServerRunning: { channel in
                               // Hummingbird's bootstrap takes no server channel handler of ours:
                               // the accept back-off goes first in its pipeline once it is bound.
                               try? await channel.eventLoop.submit {
                                   try channel.pipeline.syncOperations.addHandler(acceptFailures.backoffHandler(), position: .first)
                               }.get()
                               if let socketPath { chmod(socketPath, 0o600) }
                               logger.info("admin listening", metadata: ["address": "\(socketPath.map { "unix:\($0)" } ?? "\(channel.localAddress?.description ?? "?")")"])
                               readiness.adminBound(channel.localAddress?.port ?? 0)
                           },
                           eventLoopGroupProvider: .shared(group), logger: adminLogger)
    }

    // MARK: Control (admin API, signals)

    public enum ReloadResult: Sendable {
        case success(String)
        case failure(ConfigError)
    }

    /// Re-reads the config file; an invalid file keeps the running config.
    public func reload() async -> ReloadResult {
        guard let configPath else {
            return .failure(ConfigError(file: nil, issues: [ConfigIssue(path: "", line: nil, message: "no configuration file to reload (started without --config)")]))
        }
        notifier.notify("RELOADING=1\nMONOTONIC_USEC=\(Self.monotonicMicroseconds())")
        defer { notifier.notify("READY=1\nSTATUS=\(statusLine())") }
        do {
            let config = try ConfigLoader.load(path: configPath)
            let old = runtime.current.settings
            var notes: [String] = []
            if config.listen.proxyListeners != old.listen.proxyListeners || config.listen.admin != old.listen.admin {
                notes.append("listen addresses change only on restart")
            }
            if config.storage.path != old.storage.path { notes.append("storage.path changes only on restart") }
            if config.storage.memoryBytes != old.storage.memoryBytes { notes.append("storage.memory_bytes changes only on restart") }
            if config.storage.maxBytes != old.storage.maxBytes { cache.limit(toBytes: config.storage.maxBytes) }
            await sessions.retire(keeping: config)
            runtime.replace(with: config)
            let message = "configuration reloaded from \(configPath)" + (notes.isEmpty ? "" : " (\(notes.joined(separator: "; ")))")
            logger.info("\(message)")
            return .success(message)
        } catch {
            logger.error("reload failed; the running configuration stays", metadata: ["error": "\(error.description)"])
            return .failure(error)
        }
    }

    static func monotonicMicroseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }

    func statusLine() -> String {
        String(format: "%d requests, hit ratio %.1f%%, %d entries", stats.value(.requests), stats.hitRatio * 100, cache.entryCount)
    }

    func refreshCacheGauges() {
        stats.setCacheSize(entries: cache.entryCount, bytes: cache.byteCount)
        stats.setStorageHealth(degraded: storageDegraded, failedWrites: database.health.failureCount)
        if let fleet = lifecycle.fleet {
            stats.setFleet(up: fleet.isReachable, appliedSeq: lifecycle.fleetInvalidations?.appliedSeq ?? 0)
        }
    }

    /// Writes to SQLite are failing, or the live session is not saved yet.
    var storageDegraded: Bool { database.health.isDegraded || database.health.hasUnsavedSession }

    /// The parts of the daemon the admin API reads and steers.
    var adminControl: AdminControl {
        AdminControl(runtime: runtime, lifecycle: lifecycle, logger: logger,
                     storageDegraded: { self.storageDegraded }, refreshGauges: { self.refreshCacheGauges() },
                     reload: { await self.reload() }, downUpstreams: { self.pipeline.exchange.health.downUpstreams },
                     sessions: sessions)
    }
}

/// Collects the bound ports; `READY=1` waits on it.
final class Readiness: Sendable {
    private struct State {
        var proxy: Int?
        var admin: Int??
        var waiters: [CheckedContinuation<(proxy: Int, admin: Int?), Never>] = []
    }

    private let state = Mutex(State())

    func proxyBound(_ port: Int) { update { $0.proxy = port } }
    func adminBound(_ port: Int?) { update { $0.admin = .some(port) } }

    private func update(_ change: (inout State) -> Void) {
        let (ready, waiters) = state.withLock { s -> ((Int, Int?)?, [CheckedContinuation<(proxy: Int, admin: Int?), Never>]) in
            change(&s)
            guard let proxy = s.proxy, let admin = s.admin else { return (nil, []) }
            defer { s.waiters.removeAll() }
            return ((proxy, admin), s.waiters)
        }
        if let ready { for w in waiters { w.resume(returning: ready) } }
    }

    func wait() async -> (proxy: Int, admin: Int?) {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { s -> (Int, Int?)? in
                if let proxy = s.proxy, let admin = s.admin { return (proxy, admin) }
                s.waiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
