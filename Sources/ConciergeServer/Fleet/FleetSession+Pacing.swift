import ConciergeCore
import ConciergeStorage

/// The fleet's pacing of token requests after failed ones: the session row holds it
/// (``FleetDatabase/SessionRow/pacing``), read and written under the row's lock, so however
/// many nodes need a token while a secret is wrong or the provider is down, the fleet makes its
/// token requests as one daemon would.
extension FleetSession {
    /// Under the row's lock, before a token request: the fleet's pacing becomes this node's
    /// (so its next requests are held back without asking PostgreSQL), and while it holds token
    /// requests back, the answer (`unavailable` with `Retry-After`).
    func heldBack(by row: FleetDatabase.SessionRow) -> TokenRefresher.Outcome? {
        session.updatePacing { $0 = row.pacing }
        return row.pacing.retryAfter(at: clock.now).map { .unavailable(retryAfter: $0) }
    }
}
