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
    /// The last use stored in SQLite (``SessionStore/recordLastUse(_:_:)``), in seconds since 1970.
    private let lastUseStored: Atomic<Int64>
    /// An instance its table no longer holds (idle, logged out): a request finds a new one.
    private let forgotten = Atomic(false)

    init(name: String, maskedInstance: String? = nil, state: SessionState, lifecycle: SessionLifecycle, refresher: TokenRefresher,
         instances: InstanceTable? = nil, cacheIdentity: String?, now: Date, storedUse: Date? = nil) {
        (self.name, self.maskedInstance, self.state, self.lifecycle, self.refresher) = (name, maskedInstance, state, lifecycle, refresher)
        (self.instances, self.cacheIdentity) = (instances, cacheIdentity)
        lastUsed = Atomic(Int64(now.timeIntervalSince1970))
        lastUseStored = Atomic(Int64((storedUse ?? now).timeIntervalSince1970))
    }

    var currentTokens: SessionTokens? { state.current }

    /// Marks a use now (an instance is logged out after `per_client.idle` without one).
    func touch(_ now: Date) { lastUsed.store(Int64(now.timeIntervalSince1970), ordering: .relaxed) }
    var lastUsedAt: Date { Date(timeIntervalSince1970: Double(lastUsed.load(ordering: .relaxed))) }

    /// The last use, when it is newer than the one stored; then counted as stored.
    func takeUnstoredUse() -> Date? {
        let used = lastUsed.load(ordering: .relaxed)
        guard lastUseStored.exchange(used, ordering: .relaxed) < used else { return nil }
        return Date(timeIntervalSince1970: Double(used))
    }

    /// Whether its table forgot it (``InstanceTable/forget(_:)``): a replayed hit made under it
    /// no longer speaks for the caller's instance.
    var isForgotten: Bool { forgotten.load(ordering: .relaxed) }
    fileprivate func markForgotten() { forgotten.store(true, ordering: .relaxed) }

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

    /// The instance of `key` if it is loaded: no I/O, callable on an event loop.
    func loaded(key: String) -> SessionUnit? { loaded.withLock { $0[key] } }

    /// The instance of `key`, made by `make` (which reads its stored tokens on a storage
    /// reader) on first use; two first uses at once keep the one made first.
    nonisolated(nonsending) func instance(key: String, make: () async throws -> SessionUnit) async throws -> SessionUnit {
        if let unit = loaded(key: key) { return unit }
        let unit = try await make()
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
    func forget(_ key: String) { loaded.withLock { $0.removeValue(forKey: key) }?.markForgotten() }
}
