import ConciergeCore
import ConciergeStorage
import Foundation
import Logging

/// What the admin API reads and steers, and nothing more. ``ConciergeDaemon`` builds it over
/// its own parts; tests build it over a temporary database and drive ``AdminAPI``'s router
/// without a listener.
struct AdminControl: Sendable {
    let runtime: Runtime
    /// The session's owner, and through it the session, the cache, the counters and the event
    /// bus; `DELETE /session` ends the session through it (drops it, removes that user's
    /// entries, counts the logout, publishes `session.logout`).
    let lifecycle: SessionLifecycle
    let logger: Logger
    /// Writes to SQLite are failing, or the live session is not saved yet (`/health`).
    let storageDegraded: @Sendable () -> Bool
    /// Brings the entry, byte and storage-health gauges up to date before `/metrics` is written.
    let refreshGauges: @Sendable () -> Void
    /// Re-reads the configuration file (`POST /reload`).
    let reload: @Sendable () async -> ConciergeDaemon.ReloadResult
    /// The upstreams failing now (the status page).
    var downUpstreams: @Sendable () -> [String] = { [] }
    /// Every live session (`/sessions`); `nil` in tests of `default` alone.
    var sessions: SessionRegistry? = nil

    var cache: CacheStore { lifecycle.cache }
    var stats: ProxyStats { lifecycle.stats }
    var session: SessionState { lifecycle.session }
    var events: EventBus { lifecycle.events }

    /// `GET /session`: who, whether tokens are present, `kind` (`user` | `app`), when set and
    /// `expires_at` (RFC 3339 or null); tokens masked, never shown.
    func sessionDescription() -> JSONValue {
        let kind = runtime.current.settings.session.kind
        guard let s = session.current, s.kind == kind else {
            return ["logged_in": false, "kind": .string(kind.rawValue), "expires_at": .null]
        }
        let formatter = ISO8601DateFormatter()
        return ["logged_in": true, "kind": .string(s.kind.rawValue), "user_id": s.userID.map(JSONValue.string) ?? .null,
                "access_token": .string(TokenMask.mask(s.accessToken)),
                "refresh_token": s.refreshToken.map { .string(TokenMask.mask($0)) } ?? .null,
                "set_at": .string(formatter.string(from: s.setAt)),
                "expires_at": s.expiresAt.map { .string(formatter.string(from: $0)) } ?? .null]
    }
}
