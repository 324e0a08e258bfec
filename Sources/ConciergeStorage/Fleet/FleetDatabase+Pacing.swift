import ConciergeCore
import Logging
import PostgresNIO

/// The pacing of the fleet's token requests after failed ones (``TokenRequestPacing``), kept
/// in each session's row beside its tokens: read and written under the row's lock, so a fleet
/// with a wrong secret makes its token requests as one daemon would.
extension FleetDatabase {
    /// Schema version 3: the session row's pacing columns.
    static func migratePacing(_ db: PostgresConnection, logger: Logger) async throws {
        try await db.query("ALTER TABLE concierge.session ADD COLUMN IF NOT EXISTS paced_until float8 NOT NULL DEFAULT 0", logger: logger)
        try await db.query("ALTER TABLE concierge.session ADD COLUMN IF NOT EXISTS token_refusals bigint NOT NULL DEFAULT 0", logger: logger)
    }

    /// Stores `pacing` in the fleet's row (under its lock; the version is not bumped: no node
    /// needs to hear of it before it wants a token).
    static func storePacing(_ db: PostgresConnection, fleet: String, key: String, _ pacing: TokenRequestPacing, logger: Logger) async throws {
        try await db.query("""
            UPDATE concierge.session SET paced_until = \(pacing.notBefore), token_refusals = \(pacing.refusals)
            WHERE fleet = \(fleet) AND session_key = \(key)
            """, logger: logger)
    }
}
