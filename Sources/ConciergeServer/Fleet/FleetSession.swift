import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import Synchronization

/// This node's side of one session the fleet shares (docs/fleet.md): `default`, a named session
/// or one `per_client` instance, each with its own row (``key``). Local changes (a login, tokens
/// set by hand, a logout) are written to the session's row and announced; changes announced by
/// other nodes are adopted; and a token renewal runs under the row's lock, so however many
/// nodes see one token expire, one token request is made and the others adopt its result.
///
/// PostgreSQL being down or frozen never fails a request: each call has a deadline, after which
/// the node acts alone (renews locally, keeps its change pending) and catches up when the
/// database answers again.
final class FleetSession: Sendable {
    let database: FleetDatabase
    /// The session's row: `default`, the session's name, or an instance's `name#digest`.
    let key: String
    let seal: TokenSeal
    let config: ConciergeConfig.Fleet
    let session: SessionState
    let stats: ProxyStats
    let events: EventBus
    let logger: Logger
    /// The wall clock the pacing of token requests is judged by (the session lifecycle's).
    let clock: WallClock
    /// The last version of the fleet's row this node wrote or adopted.
    let applied = Mutex<Int64>(0)
    /// A local change the fleet has not stored yet (written on reconnection).
    let pending = Mutex(false)
    /// Whether PostgreSQL answered the last call, and when that was last warned of: one for
    /// every session of the node.
    let reachability: FleetReachability
    /// A refusal of a token this node renewed alone, held instead of a logout until the fleet's
    /// token is known (FleetSessionChanges.swift).
    let heldRefusal = Mutex<RefusalHold?>(nil)
    /// When the fleet's loop guard last refused a token request (FleetSession+Renewal.swift).
    let throttledWarning = Mutex<ContinuousClock.Instant?>(nil)
    /// Renewals in progress on this node, told when another node's new token is adopted
    /// (``adopted(_:)``): what they wait for may come that way first.
    let renewals = Mutex<(next: Int, waiting: [Int: AsyncStream<RenewalSignal>.Continuation])>((0, [:]))

    init(database: FleetDatabase, seal: TokenSeal, config: ConciergeConfig.Fleet, session: SessionState, stats: ProxyStats, events: EventBus,
         logger: Logger, clock: WallClock = .system, key: String = FleetDatabase.defaultSessionKey,
         reachability: FleetReachability = FleetReachability()) {
        (self.database, self.seal, self.config, self.session, self.stats, self.logger) = (database, seal, config, session, stats, logger)
        (self.events, self.clock, self.key, self.reachability) = (events, clock, key, reachability)
    }

    /// The fleet's side of another session or instance of this node (row `key`), sharing this
    /// one's database, seal and reachability.
    func forSession(key: String, session: SessionState, logger: Logger) -> FleetSession {
        FleetSession(database: database, seal: seal, config: config, session: session, stats: stats, events: events, logger: logger,
                     clock: clock, key: key, reachability: reachability)
    }

    var isReachable: Bool { reachability.reachable.withLock { $0 } }
    var isPending: Bool { pending.withLock { $0 } }
    var appliedVersion: Int64 { applied.withLock { $0 } }

    // MARK: Sealing

    func sealed(_ tokens: SessionTokens?) -> String? {
        guard let tokens, let json = try? JSONEncoder().encode(tokens) else { return nil }
        return seal.seal(String(decoding: json, as: UTF8.self))
    }

    func opened(_ text: String?) -> SessionTokens? {
        guard let text else { return nil }
        do {
            return try JSONDecoder().decode(SessionTokens.self, from: Data(seal.open(text).utf8))
        } catch {
            warn("the fleet's session does not open on this node", error)
            return nil
        }
    }

    func adopt(_ tokens: SessionTokens, version: Int64) async throws {
        if session.current != tokens {
            try await session.set(tokens)
            logger.info("fleet: session adopted", metadata: ["version": "\(version)", "user": "\(tokens.userID ?? "-")"])
        }
        applied.withLock { $0 = max($0, version) }
    }

    /// Set while a renewal runs under the row's lock: a logout or renewal it causes is stored by
    /// the lock's transaction, not published again.
    @TaskLocal static var renewing = false

    // MARK: Reachability

    func markReachable() {
        let was = reachability.reachable.withLock { r in defer { r = true }; return r }
        if !was { logger.info("fleet: PostgreSQL answers", metadata: ["fleet": "\(config.name)", "node": "\(config.node)"]) }
    }

    func markUnreachable(_ what: String, _ error: any Error) {
        reachability.reachable.withLock { $0 = false }
        warn(what, error)
    }

    /// At most one warning a minute: a database that is down fails every call.
    func warn(_ what: String, _ error: any Error) {
        if Self.due(reachability.lastWarning, every: .seconds(60)) {
            logger.warning("fleet: \(what)", metadata: ["error": "\(FleetDatabase.describe(error).prefix(200))"])
        }
    }

    /// Whether a line rate-limited by `last` may be logged now (at most once `every`); if so,
    /// `last` becomes now.
    static func due(_ last: borrowing Mutex<ContinuousClock.Instant?>, every interval: Duration) -> Bool {
        let now = ContinuousClock.now
        return last.withLock { last in
            guard last.map({ now - $0 >= interval }) ?? true else { return false }
            last = now
            return true
        }
    }
}

/// Whether the fleet's PostgreSQL answered this node's last call, shared by the node's sessions
/// (one warning a minute for all of them when it does not).
final class FleetReachability: Sendable {
    let reachable = Mutex(false)
    let lastWarning = Mutex<ContinuousClock.Instant?>(nil)
}
