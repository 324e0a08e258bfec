import ConciergeCore
import ConciergeStorage
import Logging

/// The one path by which a session ends (a logout code, a warning code with `logout`, a
/// failed refresh): the session is dropped, that user's cached entries removed, the
/// `logouts` counter bumped and `session.logout` published.
struct SessionLogout: Sendable {
    let session: SessionState
    let cache: CacheStore
    let stats: ProxyStats
    let events: EventBus
    let logger: Logger

    /// Drops the session if it still holds `accessToken` (`nil`: whatever session there is).
    /// - Returns: the tokens dropped, or `nil` when a newer session was kept.
    @discardableResult
    func perform(ifAccessToken accessToken: String?, reason: JSONValue) async -> SessionTokens? {
        guard let dropped = try? await session.clear(ifAccessToken: accessToken) else { return nil }
        stats.increment(.logouts)
        let removed = dropped.kind == .user ? ((try? await cache.invalidate(.user(dropped.cacheUser))) ?? 0) : 0
        logger.info("session dropped", metadata: ["user": "\(dropped.userID ?? "-")", "reason": "\(reason.parameterText)",
                                                  "entries_removed": "\(removed)"])
        events.publish("session.logout", ["user": dropped.userID.map(JSONValue.string) ?? .null, "reason": reason])
        return dropped
    }
}
