import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import Synchronization

/// One live session: `default`, a named session (`sessions.NAME`) or one instance of a
/// `per_client` session, each with everything a session has (its tokens in a
/// ``SessionState``, its ``SessionLifecycle``, and its ``TokenRefresher`` with its own single
/// flight, loop guard and pacing). The ``SessionRegistry`` owns them.
final class SessionUnit: SessionSlot {
    /// The session's name (an instance's is its session's).
    let name: String
    /// An instance's id, masked (first 4 characters and the length); `nil` for a session.
    let maskedInstance: String?
    let state: SessionState
    let lifecycle: SessionLifecycle
    let refresher: TokenRefresher
    /// With `per_client`: the session's instances.
    let instances: InstanceTable?
    let cacheIdentity: String?
    /// When a request last used it (an instance's idle time), in seconds since 1970.
    private let lastUsed: Atomic<Int64>

    init(name: String, maskedInstance: String? = nil, state: SessionState, lifecycle: SessionLifecycle, refresher: TokenRefresher,
         instances: InstanceTable? = nil, cacheIdentity: String?, now: Date) {
        (self.name, self.maskedInstance, self.state, self.lifecycle, self.refresher) = (name, maskedInstance, state, lifecycle, refresher)
        (self.instances, self.cacheIdentity) = (instances, cacheIdentity)
        lastUsed = Atomic(Int64(now.timeIntervalSince1970))
    }

    var currentTokens: SessionTokens? { state.current }

    /// Marks a use now (an instance is logged out after `per_client.idle` without one).
    func touch(_ now: Date) { lastUsed.store(Int64(now.timeIntervalSince1970), ordering: .relaxed) }
    var lastUsedAt: Date { Date(timeIntervalSince1970: Double(lastUsed.load(ordering: .relaxed))) }

    /// `user` or `app` under `config`.
    func kind(_ config: RuntimeConfig) -> SessionTokens.Kind { config.sessionSettings(name).kind }

    /// The store key of an instance (``SessionInstance/key(session:id:)``).
    static func instanceKey(session: String, id: String) -> String { SessionInstance.key(session: session, id: id) }

    /// Whether `id` is a valid instance id (``SessionInstance/isValidID(_:)``).
    static func isInstanceID(_ id: String) -> Bool { SessionInstance.isValidID(id) }
}

extension PreparedRequest {
    /// The live session this request uses; `nil` when no registry bound its configuration
    /// (unit tests): the pipeline's own then.
    var sessionUnit: SessionUnit? { sessionSlot as? SessionUnit }
}

/// The instances of one `per_client` session, by the digest of their id: loaded from SQLite
/// on first use, at most `max` of them holding tokens.
final class InstanceTable: Sendable {
    let session: String
    private let loaded = Mutex<[String: SessionUnit]>([:])
    /// Stored instances with tokens, counted at start from SQLite and kept up to date.
    private let live: Atomic<Int>

    init(session: String, storedCount: Int) {
        self.session = session
        live = Atomic(storedCount)
    }

    /// The instance of `id`, made by `make` (which loads its stored tokens) on first use.
    func instance(key: String, make: () throws -> SessionUnit) rethrows -> SessionUnit {
        if let unit = loaded.withLock({ $0[key] }) { return unit }
        let unit = try make()
        return loaded.withLock { table in
            if let existing = table[key] { return existing }
            table[key] = unit
            return unit
        }
    }

    /// The instances loaded now.
    var all: [SessionUnit] { loaded.withLock { Array($0.values) } }
    var loadedCount: Int { loaded.withLock { $0.count } }
    /// Instances holding tokens (loaded or not).
    var liveCount: Int { live.load(ordering: .relaxed) }

    /// An instance that held no tokens holds some now (a login).
    func started() { live.wrappingAdd(1, ordering: .relaxed) }

    /// An instance that held tokens holds none any more.
    func ended() { live.wrappingSubtract(1, ordering: .relaxed) }

    /// Forgets a loaded instance (logged out and idle).
    func forget(_ key: String) { loaded.withLock { _ = $0.removeValue(forKey: key) } }
}
