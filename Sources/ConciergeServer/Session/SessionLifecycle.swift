import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import Synchronization

/// The one owner of the session's side effects: a login captured from a reply or set by hand,
/// a token renewed by the refresher, and the one way a session ends (a logout code, a warning code
/// with `logout`, a failed refresh, the admin API). Each stores the change, logs it, counts
/// it and publishes its event; nothing else writes the session.
struct SessionLifecycle: Sendable {
    /// The logout reason of a refresh the provider refused for good.
    static let refreshFailed = "refresh_failed"
    /// The logout reason of a refresh refused after the fleet node making it died mid-request
    /// (a rotated refresh token lost with that node; docs/fleet.md).
    static let refreshLost = "refresh_lost"

    let session: SessionState
    /// Where a user's entries are removed on logout.
    let cache: CacheStore
    /// Counts logouts (`logouts`).
    let stats: ProxyStats
    /// `session.login`, `session.refreshed`, `session.logout`.
    let events: EventBus
    /// Carries `session` (and an instance's masked id) in every line.
    var logger: Logger
    /// Revokes dropped tokens at the provider (`session.revoke`); `nil` in tests that need none.
    var revocation: TokenRevocation? = nil
    /// Warns once when tokens live shorter than the loop guard allows.
    let lifetimeWarning = TokenLifetimeWarning()
    /// The wall clock tokens are stamped and judged by (expiry, renewal ahead).
    var clock: WallClock = .system
    /// The fleet that shares this session (`fleet:`); `nil` for a daemon on its own.
    var fleet: FleetSession? = nil
    /// The fleet's invalidation stream, which every invalidation made here joins (`fleet:`).
    var fleetInvalidations: FleetInvalidations? = nil
    /// The session's name (an instance's is its session's): in its events, log lines and
    /// the revocation it asks for.
    var name = "default"
    /// What its user-scoped keys carry besides the user (``SessionSlot/cacheIdentity``).
    var cacheIdentity: String? = nil
    /// With `per_client`: the table counting live instances (this one's).
    var instances: InstanceTable? = nil

    /// The `user` of this session's user-scoped entries for `tokens`.
    func cacheUser(_ tokens: SessionTokens) -> String {
        cacheIdentity.map { "\($0)/\(tokens.cacheUser)" } ?? tokens.cacheUser
    }

    /// An event's data with the session's name.
    func eventData(_ data: [String: JSONValue]) -> JSONValue {
        var data = data
        data["session"] = .string(name)
        return .object(data)
    }

    /// Stores the tokens a login reply carried (`session.capture`).
    func login(_ reply: TokenReply?, from json: JSONValue, capture: ConciergeConfig.Capture, limit: ConciergeConfig.RefreshLimit) async {
        guard case .good(let access, let refreshToken, let expiresIn)? = reply else {
            logger.warning("login reply has no access token; session unchanged", metadata: ["path": "\(capture.accessToken)"])
            return
        }
        lifetimeWarning.check(expiresIn, limit: limit, logger: logger)
        let now = clock.date
        let tokens = SessionTokens(accessToken: access, refreshToken: refreshToken,
                                   userID: capture.userID.flatMap { json[path: $0]?.parameterText }, setAt: now,
                                   kind: .user, expiresAt: TokenReply.expiry(expiresIn, from: now))
        do {
            let replaced = session.current
            try await session.set(tokens)
            if replaced == nil { instances?.started() }
            await fleet?.publish(tokens)
            revokeReplaced(replaced, by: tokens)
            logger.info("session captured", metadata: ["user": "\(tokens.userID ?? "-")", "access_token": "\(TokenMask.mask(access))"])
            events.publish("session.login", eventData(["user": tokens.userID.map(JSONValue.string) ?? .null]))
            stats.sessions.increment(.logins, session: name)
        } catch {
            logger.error("could not store the session", metadata: ["error": "\(error)"])
        }
    }

    /// Stores tokens set by hand (the admin API's `PUT /session`).
    func login(byHand tokens: SessionTokens) async throws {
        let replaced = session.current
        try await session.set(tokens)
        if replaced == nil { instances?.started() }
        await fleet?.publish(tokens)
        revokeReplaced(replaced, by: tokens)
        logger.info("session set by hand", metadata: ["user": "\(tokens.userID ?? "-")", "kind": "\(tokens.kind.rawValue)",
                                                      "access_token": "\(TokenMask.mask(tokens.accessToken))"])
        events.publish("session.login", eventData(["user": tokens.userID.map(JSONValue.string) ?? .null]))
    }

    /// Has the user tokens a login replaced revoked at the provider, unless the new session
    /// still uses them. Only the node that performed the login gets here: a session adopted
    /// from the fleet revokes nothing.
    private func revokeReplaced(_ replaced: SessionTokens?, by tokens: SessionTokens) {
        guard let replaced, replaced.kind == .user, replaced.accessToken != tokens.accessToken,
              replaced.refreshToken == nil || replaced.refreshToken != tokens.refreshToken else { return }
        revocation?.revoke(replaced, session: name)
    }

    /// Stores renewed tokens unless the session changed since `generation` (a logout or a
    /// new login meanwhile wins).
    /// - Returns: whether the tokens were stored.
    func renewed(_ tokens: SessionTokens, ifGeneration generation: Int) async throws -> Bool {
        guard try await session.replace(ifGeneration: generation, with: tokens) else { return false }
        switch tokens.kind {
        case .user:
            logger.info("access token refreshed", metadata: ["user": "\(tokens.userID ?? "-")"])
        case .app:
            let expiresIn = tokens.expiresAt.map { String(Int($0.timeIntervalSince(tokens.setAt))) } ?? "-"
            logger.info("app token fetched", metadata: ["expires_in": "\(expiresIn)"])
        }
        events.publish("session.refreshed", eventData(["user": tokens.userID.map(JSONValue.string) ?? .null, "kind": .string(tokens.kind.rawValue)]))
        return true
    }

    /// Ends the session if it still holds `accessToken` (`nil`: whatever session there is):
    /// drops it, removes that user's cached entries, counts a logout, publishes `session.logout`
    /// and, unless a failed refresh ended it (the grant is already dead), has the tokens
    /// revoked at the provider in the background. A fleet's nodes all log out
    /// (`publishToFleet`: false when the logout came from the fleet); only the node that
    /// performed the logout revokes.
    /// - Returns: the tokens dropped, or `nil` when a newer session was kept.
    @discardableResult
    func logout(ifAccessToken accessToken: String?, reason: JSONValue, publishToFleet: Bool = true) async -> SessionTokens? {
        // In a fleet: a refusal seen while renewing alone is held, not a logout; one seen taking
        // over from a node that died mid-request is `refresh_lost`.
        if let fleet, fleet.holdsRefusal(of: accessToken, reason: reason) { return nil }
        let reason = FleetSession.logoutReason(reason)
        guard let dropped = try? await session.clear(ifAccessToken: accessToken) else { return nil }
        instances?.ended()
        if publishToFleet { await fleet?.publishLogout(ended: accessToken) }
        stats.increment(.logouts)
        stats.sessions.increment(.logouts, session: name)
        let removed = dropped.kind == .user ? ((try? await cache.invalidate(.user(cacheUser(dropped)))) ?? 0) : 0
        logger.info("session dropped", metadata: ["user": "\(dropped.userID ?? "-")", "reason": "\(reason.parameterText)",
                                                  "entries_removed": "\(removed)"])
        events.publish("session.logout", eventData(["user": dropped.userID.map(JSONValue.string) ?? .null, "reason": reason]))
        if publishToFleet, dropped.kind == .user, reason != .string(Self.refreshFailed), reason != .string(Self.refreshLost) {
            revocation?.revoke(dropped, session: name)
        }
        return dropped
    }
}

/// Warns once per daemon when tokens live shorter than `session.max_refreshes` allows between
/// renewals (`expires_in` under `within / count`): every renewal would then count towards the
/// loop guard's limit sooner than the operator expects.
final class TokenLifetimeWarning: Sendable {
    private let warned = Mutex(false)

    func check(_ expiresIn: Double?, limit: ConciergeConfig.RefreshLimit, logger: Logger) {
        guard let expiresIn else { return }
        let within = Double(limit.within.components.seconds)
        guard expiresIn < within / Double(limit.count), !warned.withLock({ old in defer { old = true }; return old }) else { return }
        logger.warning("tokens live shorter than session.max_refreshes allows between renewals: raise max_refreshes.count or lower within",
                       metadata: ["expires_in": "\(Int(expiresIn))", "max_refreshes": "\(limit.count) per \(Int(within))s"])
    }
}
