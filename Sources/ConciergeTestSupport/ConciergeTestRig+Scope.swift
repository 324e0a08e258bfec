import ConciergeCore
import ConciergeSampleAPI
import ConciergeServer
import ConciergeStorage
import Foundation
import Synchronization

/// What a rig starts from: the test config (``TestConfig/yaml(apiPort:directory:endpoints:extra:)``),
/// the API it fronts and its state directory.
public struct RigSetup: Sendable {
    /// YAML list items placed under `endpoints:` (indented by the caller or not; each line is
    /// indented by 2); `nil`: ``TestConfig/defaultEndpoints``.
    public var endpoints: String?
    /// Further top-level YAML (session, envelope, signing, hooks…); replaces the defaults of the same sections.
    public var extra: String
    /// An API the rig fronts and leaves running; `nil`: the rig starts one (`apiConfiguration`)
    /// and shuts it down when its scope ends.
    public var api: RunningSampleAPI?
    public var apiConfiguration: SampleAPIConfiguration
    /// The state directory (created, and removed when the scope ends); `nil`: a fresh temp directory.
    public var directory: String?
    /// Rewrites the config's text before it is loaded.
    public var configTransform: (@Sendable (String) -> String)?
    /// The `${VAR}` values the config is loaded with.
    public var environment: [String: String]
    /// The clock the daemon stores and judges entries by, when the test moves time itself.
    public var clock: ManualClock?

    public init(endpoints: String? = nil, extra: String = "", api: RunningSampleAPI? = nil, apiConfiguration: SampleAPIConfiguration = .init(),
                directory: String? = nil, configTransform: (@Sendable (String) -> String)? = nil, environment: [String: String] = [:],
                clock: ManualClock? = nil) {
        (self.endpoints, self.extra, self.api, self.apiConfiguration) = (endpoints, extra, api, apiConfiguration)
        (self.directory, self.configTransform, self.environment, self.clock) = (directory, configTransform, environment, clock)
    }
}

extension ConciergeTestRig {
    /// Runs `body` with a rig set up from `setup`. The daemon runs as a child of a task group
    /// beside `body`; when `body` ends or throws it is shut down gracefully and waited for (at
    /// most 20 s, then its log's end is printed and it is cancelled), the API is shut down when
    /// the rig started it, and the directory is removed.
    public static func with(_ setup: RigSetup, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await running(count: 1, { _ in try await RigLaunch.prepare(setup) }) { try await body($0[0]) }
    }

    /// ``with(_:_:)`` with the fields of a ``RigSetup``.
    public static func with(endpoints: String? = nil, extra: String = "", api: RunningSampleAPI? = nil,
                            apiConfiguration: SampleAPIConfiguration = .init(), directory: String? = nil,
                            configTransform: (@Sendable (String) -> String)? = nil, environment: [String: String] = [:],
                            clock: ManualClock? = nil, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await with(RigSetup(endpoints: endpoints, extra: extra, api: api, apiConfiguration: apiConfiguration, directory: directory,
                                configTransform: configTransform, environment: environment, clock: clock), body)
    }

    /// Runs `body` with `count` rigs (a fleet), rig `n` set up from `setup(n)`: their daemons run
    /// in one task group beside `body`, started in order (each listening before the next
    /// starts), and are stopped in that order when `body` ends or throws, as ``with(_:_:)`` stops one.
    public static func withFleet(count: Int, setup: (Int) -> RigSetup, _ body: ([ConciergeTestRig]) async throws -> Void) async throws {
        try await running(count: count, { try await RigLaunch.prepare(setup($0)) }, body)
    }

    /// Stops this rig's daemon (if it still runs) and runs `body` with a new one on the same
    /// directory, config file (rewritten by `configTransform` first) and API, loaded with
    /// `environment`. The new daemon is stopped when `body` ends or throws; the directory and the
    /// API stay for this rig's scope.
    public func withRestart(configTransform: (@Sendable (String) -> String)? = nil, environment: [String: String] = [:],
                            _ body: (ConciergeTestRig) async throws -> Void) async throws {
        await stop()
        if let configTransform {
            let text = try String(contentsOfFile: configPath, encoding: .utf8)
            try configTransform(text).write(toFile: configPath, atomically: true, encoding: .utf8)
        }
        let launch = RigLaunch(config: try ConfigLoader.load(path: configPath, environment: environment), configPath: configPath, api: api,
                               directory: directory, clock: clock, ownsAPI: false, ownsDirectory: false)
        try await Self.running(count: 1, { _ in launch }) { try await body($0[0]) }
    }

    /// The scope every rig lives in: `count` daemons (launch `n` from `launch(n)`) as children of
    /// one task group, `body` beside them; then each daemon stopped (``DaemonRun/stop()``), any
    /// that outlived its wait cancelled, all waited for, and their APIs and directories released.
    static func running<T>(count: Int, _ launch: (Int) async throws -> RigLaunch,
                           _ body: ([ConciergeTestRig]) async throws -> T) async throws -> T {
        let outcome = await withTaskGroup(of: Void.self, returning: Result<T, any Error>.self) { group in
            var runs: [DaemonRun] = []
            let outcome: Result<T, any Error>
            do {
                var rigs: [ConciergeTestRig] = []
                for n in 0..<count {
                    let prepared = try await launch(n)
                    let run: DaemonRun
                    do { run = try DaemonRun(launch: prepared) } catch { await prepared.cleanUp(); throw error }
                    runs.append(run)
                    group.addTask { await run.run() }
                    rigs.append(ConciergeTestRig(run: run, ports: try await run.ready()))
                }
                outcome = .success(try await body(rigs))
            } catch {
                outcome = .failure(error)
            }
            for run in runs { await run.stop() }
            group.cancelAll()
            await group.waitForAll()
            for run in runs { await run.launch.cleanUp() }
            return outcome
        }
        return try outcome.get()
    }
}

/// A daemon's config written and loaded, and the API and directory it uses.
struct RigLaunch: Sendable {
    let config: ConciergeConfig
    let configPath: String
    let api: RunningSampleAPI
    let directory: String
    let clock: ManualClock?
    /// Whether the scope that ends this daemon shuts the API down / removes the directory (a
    /// restart's scope leaves both to the rig's).
    let ownsAPI: Bool
    let ownsDirectory: Bool

    /// Starts the API unless given, writes the config into the directory and loads it; on a
    /// failure, releases what it took.
    static func prepare(_ setup: RigSetup) async throws -> RigLaunch {
        let api: RunningSampleAPI
        if let given = setup.api { api = given } else { api = try await SampleAPI.start(configuration: setup.apiConfiguration) }
        let directory = setup.directory
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("concierge-test-\(UUID().uuidString)").path
        let configPath = directory + "/concierge.yaml"
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            var yaml = TestConfig.yaml(apiPort: api.port, directory: directory, endpoints: setup.endpoints ?? TestConfig.defaultEndpoints,
                                       extra: setup.extra)
            if let transform = setup.configTransform { yaml = transform(yaml) }
            try yaml.write(toFile: configPath, atomically: true, encoding: .utf8)
            let config = try ConfigLoader.load(path: configPath, environment: setup.environment)
            return RigLaunch(config: config, configPath: configPath, api: api, directory: directory, clock: setup.clock,
                             ownsAPI: setup.api == nil, ownsDirectory: true)
        } catch {
            if setup.api == nil { await api.shutdown() }
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    func cleanUp() async {
        if ownsAPI { await api.shutdown() }
        if ownsDirectory { try? FileManager.default.removeItem(atPath: directory) }
    }
}

/// One daemon running as a child of its scope's task group (``run()``), and how it ended.
final class DaemonRun: Sendable {
    let launch: RigLaunch
    let daemon: ConciergeDaemon
    let logs: LogSink
    private let state = Mutex(State())

    private struct State {
        var ended = false
        var failure: (any Error)?
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
        var adminPort: Int?
        /// A stop waited its 20 s in vain: later stops do not wait again.
        var gaveUp = false
    }

    init(launch: RigLaunch) throws {
        let logs = LogSink(capturing: true)
        daemon = try ConciergeDaemon(config: launch.config, configPath: launch.configPath, logSink: logs, environment: [:],
                                     clock: launch.clock?.wallClock ?? .system)
        (self.launch, self.logs) = (launch, logs)
    }

    /// The child task's work: the daemon until it stops, then its end told to whoever waits.
    func run() async {
        var failure: (any Error)?
        do { try await daemon.run(handleSignals: false) } catch { failure = error }
        let waiters = state.withLock { state in
            (state.ended, state.failure) = (true, failure)
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// The ports once both listeners are up; what ended the daemon if it ended before, or
    /// ``TimeoutError`` after 10 s.
    func ready() async throws -> (proxy: Int, admin: Int?) {
        let daemon = self.daemon
        do {
            let ports = try await withTimeout(.seconds(10)) { await daemon.waitUntilReady() }
            state.withLock { $0.adminPort = ports.admin }
            return ports
        } catch {
            if let failure = state.withLock({ $0.failure }) { throw failure }
            throw error
        }
    }

    /// Starts a graceful shutdown and waits until the daemon has stopped, at most 20 s: past that,
    /// prints the end of its log (its scope cancels it as it ends).
    func stop() async {
        daemon.shutdown()
        guard !state.withLock({ $0.gaveUp }) else { return }
        do {
            try await Deadline.race(.seconds(20), clock: ContinuousClock(), exceeded: { TimeoutError() }) { await self.ended() }
        } catch is TimeoutError {
            let port = state.withLock { state in
                state.gaveUp = true
                return state.adminPort.map(String.init) ?? "?"
            }
            FileHandle.standardError.write(Data("ConciergeTestRig: the daemon on admin port \(port) did not stop within 20 s; its log ends:\n\(logs.lines.suffix(30).joined(separator: "\n"))\n".utf8))
        } catch {
            // The waiting test was cancelled: its scope goes on ending.
        }
    }

    /// Returns once the daemon's run has ended, or at once when the waiting task is cancelled.
    private func ended() async {
        let id = state.withLock { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = self.state.withLock { state in
                    if state.ended || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            self.state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
