import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import Synchronization

/// The live sessions of the daemon by name (`default`, `sessions.NAME`), and the instances of
/// each `per_client` session: made when a configuration names them (``bind(_:_:)``, given to
/// ``Runtime/bind(_:)``, so each configuration view holds its session and a request that
/// chose its session at routing looks nothing up), kept across reloads (a reload that
/// changes a session's settings keeps its tokens), and logged out when a reload removes them
/// (``retire(keeping:)``).
final class SessionRegistry: Sendable {
    /// What every unit shares: storage, counters, events, the revocation service, the clock.
    struct Parts: Sendable {
        let database: StorageDatabase
        let cache: CacheStore
        let transport: any UpstreamTransport
        let runtime: Runtime
        let logger: Logger
    }

    let parts: Parts
    /// `default` (with the fleet's side of it, when there is a fleet).
    let defaultUnit: SessionUnit
    private let units: Mutex<[String: SessionUnit]>
    /// ``all`` for the configuration it was listed under.
    private let listed = Mutex<(config: RuntimeConfig?, units: [SessionUnit])>((nil, []))

    /// - Parameter base: the lifecycle of `default`, whose parts every session shares.
    init(parts: Parts, base: SessionLifecycle, perClientDefault: ConciergeConfig.PerClient?) throws {
        self.parts = parts
        var lifecycle = base
        lifecycle.logger[metadataKey: "session"] = "default"
        // The instances of a `per_client` default count themselves; the session does not.
        let instances = try perClientDefault.map { _ in try Self.instanceTable("default", parts.database) }
        let refresher = TokenRefresher(session: base.session, transport: parts.transport, runtime: parts.runtime, stats: base.stats,
                                       events: base.events, lifecycle: lifecycle, logger: lifecycle.logger)
        defaultUnit = SessionUnit(name: "default", state: base.session, lifecycle: lifecycle, refresher: refresher,
                                  instances: instances, cacheIdentity: nil, now: base.clock.date)
        units = Mutex(["default": defaultUnit])
    }

    private static func instanceTable(_ name: String, _ database: StorageDatabase) throws -> InstanceTable {
        InstanceTable(session: name, storedCount: try SessionStore.instanceKeys(database, session: name).count)
    }

    /// The live session of `name` under a new configuration: the one already there (its
    /// tokens kept), or a new one loaded from SQLite. Given to ``Runtime/bind(_:)``.
    func bind(_ name: String, _ settings: ConciergeConfig.Session) -> (any SessionSlot)? {
        if name == "default" { return defaultUnit }
        if let unit = units.withLock({ $0[name] }), (unit.instances != nil) == (settings.perClient != nil) { return unit }
        do {
            let instances = try settings.perClient.map { _ in try Self.instanceTable(name, parts.database) }
            let state = try SessionState(store: SessionStore(database: parts.database, key: name), logger: logger(name, masked: nil))
            let unit = makeUnit(name: name, state: state, instances: instances, cacheIdentity: name)
            units.withLock { $0[name] = unit }
            return unit
        } catch {
            parts.logger.error("could not open the stored session; it starts logged out", metadata: ["session": "\(name)", "error": "\(error)"])
            return nil
        }
    }

    private var clock: WallClock { defaultUnit.lifecycle.clock }

    /// The logger of a session or instance: every line carries `session` (and the masked id).
    private func logger(_ name: String, masked: String?) -> Logger {
        var logger = parts.logger
        logger[metadataKey: "session"] = "\(name)"
        if let masked { logger[metadataKey: "instance"] = "\(masked)" }
        return logger
    }

    /// A unit over `state` (a stored session or instance), sharing the parts of `default`.
    /// `lastUsed`, `storedUse`: an instance's last use, and the one SQLite holds.
    private func makeUnit(name: String, state: SessionState, instances: InstanceTable?, cacheIdentity: String, table: InstanceTable? = nil,
                          masked: String? = nil, lastUsed: Date? = nil, storedUse: Date? = nil) -> SessionUnit {
        let logger = state.logger
        let base = defaultUnit.lifecycle
        var lifecycle = SessionLifecycle(session: state, cache: base.cache, stats: base.stats, events: base.events, logger: logger,
                                         revocation: base.revocation, clock: base.clock)
        (lifecycle.name, lifecycle.cacheIdentity, lifecycle.instances) = (name, cacheIdentity, table)
        lifecycle.fleetInvalidations = base.fleetInvalidations
        // In a fleet: the session's own row, keyed like its SQLite row (an instance's by the digest of its id).
        lifecycle.fleet = base.fleet?.forSession(key: cacheIdentity, session: state, logger: logger)
        let refresher = TokenRefresher(session: state, transport: parts.transport, runtime: parts.runtime, stats: base.stats,
                                       events: base.events, lifecycle: lifecycle, logger: logger)
        return SessionUnit(name: name, maskedInstance: masked, state: state, lifecycle: lifecycle, refresher: refresher,
                           instances: instances, cacheIdentity: cacheIdentity, now: lastUsed ?? base.clock.date, storedUse: storedUse)
    }

    /// The instance `key` of `session`, its tokens and last use read from SQLite on one of its
    /// reader threads (never the caller's: a request's task runs on its event loop).
    /// `used`: a request uses it now; `nil`: its last use is the stored one.
    private func loadInstance(_ session: SessionUnit, table: InstanceTable, key: String, masked: String, used: Date?) async throws -> SessionUnit {
        let store = SessionStore(database: parts.database, key: key)
        let (tokens, storedUse) = try await store.loadOnReader()
        let state = SessionState(store: store, loaded: tokens, logger: logger(session.name, masked: masked))
        return makeUnit(name: session.name, state: state, instances: nil, cacheIdentity: key, table: table, masked: masked,
                        lastUsed: used ?? storedUse, storedUse: storedUse ?? .distantPast)
    }

    /// The instance of a `per_client` session for the caller's `id` (valid, see
    /// ``SessionUnit/isInstanceID(_:)``) if it is loaded, marked used; `nil` when it must be
    /// read from SQLite first (``instance(of:id:)``). No I/O: callable on an event loop.
    func loadedInstance(of session: SessionUnit, id: String) -> SessionUnit? {
        guard let unit = session.instances?.loaded(key: SessionUnit.instanceKey(session: session.name, id: id)) else { return nil }
        unit.touch(clock.date)
        return unit
    }

    /// The instance of a `per_client` session for the caller's `id` (valid), read from SQLite
    /// on a storage reader on first use, marked used; `nil` for a session without instances.
    func instance(of session: SessionUnit, id: String) async throws -> SessionUnit? {
        guard let table = session.instances else { return nil }
        let key = SessionUnit.instanceKey(session: session.name, id: id)
        let unit = try await table.instance(key: key) {
            try await loadInstance(session, table: table, key: key, masked: TokenMask.mask(id), used: clock.date)
        }
        unit.touch(clock.date)
        return unit
    }

    /// A stored instance known by its key alone (a logout of them all, the idle sweep), its id
    /// unknown: masked as `#` and the key's last 6 characters.
    private func storedInstance(_ session: SessionUnit, table: InstanceTable, key: String) async throws -> SessionUnit {
        try await table.instance(key: key) { try await loadInstance(session, table: table, key: key, masked: "#" + key.suffix(6), used: nil) }
    }

    /// The session or instance whose fleet row is `key` (`default`, a name, or `name#digest`),
    /// an instance loaded if need be; `nil` when the current configuration has no such session.
    func unit(forFleetKey key: String) async -> SessionUnit? {
        guard let hash = key.firstIndex(of: "#") else { return unit(named: key) }
        guard let session = unit(named: String(key[..<hash])), let table = session.instances else { return nil }
        do {
            return try await storedInstance(session, table: table, key: key)
        } catch {
            parts.logger.error("could not open a stored instance", metadata: ["session": "\(session.name)", "error": "\(error)"])
            return nil
        }
    }

    /// Every session of the current configuration and every instance loaded now.
    var loadedUnits: [SessionUnit] {
        var units: [SessionUnit] = []
        for unit in all {
            units.append(unit)
            if let table = unit.instances { units += table.all }
        }
        return units
    }

    /// The session named `name`, if the current configuration has it.
    func unit(named name: String) -> SessionUnit? {
        guard name == "default" || parts.runtime.current.settings.sessions[name] != nil else { return nil }
        return parts.runtime.current.view(forSession: name)?.sessionSlot as? SessionUnit ?? units.withLock { $0[name] }
    }

    /// Every session of the current configuration, in file order (`default` first when the
    /// configuration has no sessions at all).
    /// The units are the ones ``bind(_:_:)`` made (what ``unit(named:)`` finds), listed once per
    /// configuration: the periodic passes over every session cost no lookup per name, and
    /// nothing per session when there is nothing to do (a HIT with 1,000 sessions costs what
    /// it costs with one, background work included).
    var all: [SessionUnit] {
        let config = parts.runtime.current
        if let listed = listed.withLock({ $0.config === config ? $0.units : nil }) { return listed }
        let names = config.settings.sessionNames.isEmpty ? ["default"] : config.settings.sessionNames
        let units = units.withLock { $0 }
        let all = names.compactMap { units[$0] }
        listed.withLock { $0 = (config, all) }
        return all
    }

    /// Logs out the sessions `config` no longer names (and every instance of them); called
    /// before a reload swaps it in, so their revocation uses the settings they had.
    func retire(keeping config: ConciergeConfig) async {
        let gone = units.withLock { units in units.filter { $0.key != "default" && config.sessions[$0.key] == nil } }
        for (name, unit) in gone {
            await logout(unit, reason: "session_removed")
            units.withLock { _ = $0.removeValue(forKey: name) }
            parts.logger.info("session removed by the new configuration: logged out", metadata: ["session": "\(name)"])
        }
    }

    /// Logs a session out; a `per_client` session: every instance (the stored ones loaded
    /// first). Returns how many sessions or instances were logged out.
    @discardableResult
    func logout(_ unit: SessionUnit, reason: String) async -> Int {
        guard let table = unit.instances else {
            return await unit.lifecycle.logout(ifAccessToken: nil, reason: .string(reason)) == nil ? 0 : 1
        }
        var count = 0
        let keys = (try? await SessionStore.instanceKeys(parts.database, session: unit.name, unusedSince: .distantFuture)) ?? []
        for key in keys {
            let instance = try? await storedInstance(unit, table: table, key: key)
            if let instance, await instance.lifecycle.logout(ifAccessToken: nil, reason: .string(reason)) != nil { count += 1 }
            table.forget(key)
        }
        for instance in table.all {
            if await instance.lifecycle.logout(ifAccessToken: nil, reason: .string(reason)) != nil { count += 1 }
        }
        return count
    }

    /// Logs out (and revokes) the instances unused for their session's `per_client.idle`:
    /// the loaded ones by their last use in memory, the others by the last use SQLite holds
    /// (stored here first for the loaded ones); forgets them, and loaded instances without
    /// tokens unused as long.
    func sweepIdle(now: Date) async {
        for unit in all {
            guard let table = unit.instances, let idle = parts.runtime.current.sessionSettings(unit.name).perClient?.idle else { continue }
            let cutoff = now.addingTimeInterval(-Double(idle.components.seconds))
            await storeLastUses(of: table)
            var idleOnes = table.all.filter { $0.lastUsedAt < cutoff }
            let stored = (try? await SessionStore.instanceKeys(parts.database, session: unit.name, unusedSince: cutoff)) ?? []
            for key in stored where table.loaded(key: key) == nil {
                // Loaded with its stored last use: a request that takes it meanwhile marks it used.
                if let instance = try? await storedInstance(unit, table: table, key: key), instance.lastUsedAt < cutoff {
                    idleOnes.append(instance)
                }
            }
            // Judged again at its turn: a request may have used it meanwhile.
            for instance in idleOnes where instance.lastUsedAt < cutoff {
                if await instance.lifecycle.logout(ifAccessToken: nil, reason: "idle") != nil {
                    parts.logger.info("per-client instance idle: logged out", metadata: ["session": "\(unit.name)",
                                                                                         "instance": "\(instance.maskedInstance ?? "-")"])
                }
                if let key = instance.cacheIdentity { table.forget(key) }
            }
        }
    }

    /// Stores in SQLite the last use of each loaded instance used since it was last stored
    /// (the idle sweep, every 30 s, and a graceful stop): one write for them all.
    func storeLastUses(of table: InstanceTable) async {
        let uses = table.all.compactMap { unit in unit.takeUnstoredUse().flatMap { at in unit.cacheIdentity.map { (key: $0, at: at) } } }
        do {
            try await SessionStore.recordLastUse(parts.database, uses)
        } catch {
            parts.logger.warning("could not store when per-client instances were last used", metadata: ["session": "\(table.session)", "error": "\(error)"])
        }
    }

    /// ``storeLastUses(of:)`` for every `per_client` session.
    func storeLastUses() async {
        for unit in all { if let table = unit.instances { await storeLastUses(of: table) } }
    }
}

extension SessionRegistry {
    /// The tokens of every session and loaded instance, and the ones they replaced lately:
    /// literal secrets for the log scrubber.
    var secretsForLogs: [String] {
        all.flatMap { unit in unit.state.secretsForLogs + (unit.instances?.all.flatMap { $0.state.secretsForLogs } ?? []) }
    }
}
