import ConciergeCore
import Foundation
import Logging
import PostgresNIO

/// The two facts about the session row that outlive a node: which node is making the fleet's
/// token request (so that the node taking over after it died can tell a refresh token lost with
/// it from a real refusal), and a logout written only while the fleet still holds the token
/// version it ended.
extension FleetDatabase {
    /// One row per fleet (per fleet and session key since version 5, FleetDatabase+SessionKeys.swift):
    /// the token request under way, and the session version it renews.
    static let tokenAttemptTable = """
        CREATE TABLE IF NOT EXISTS concierge.token_attempt (
            fleet text PRIMARY KEY, node text NOT NULL, version bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())
        """

    /// Records, committed at once (outside the renewal lock's transaction, which a node that
    /// dies rolls back), that this node is about to make the fleet's token request renewing
    /// session `version`.
    /// - Returns: whether an earlier token request renewing that same version was never
    ///   finished: its node died or lost PostgreSQL while the request was under way, so the
    ///   provider may have rotated the refresh token and the new one was lost with it.
    public func beginTokenAttempt(_ key: String, version: Int64) async throws -> Bool {
        let rows = try await client.query("""
            WITH previous AS (SELECT 1 FROM concierge.token_attempt WHERE fleet = \(fleet) AND session_key = \(key) AND version = \(version))
            INSERT INTO concierge.token_attempt (fleet, session_key, node, version) VALUES (\(fleet), \(key), \(node), \(version))
            ON CONFLICT (fleet, session_key) DO UPDATE SET node = excluded.node, version = excluded.version, at = now()
            RETURNING (SELECT count(*) FROM previous)
            """, logger: logger)
        var unfinished: Int64 = 0
        for try await count in rows.decode(Int64.self) { unfinished = count }
        return unfinished > 0
    }

    /// This node's token request renewing `version` is over (whatever its outcome).
    public func endTokenAttempt(_ key: String, version: Int64) async throws {
        try await client.query("""
            DELETE FROM concierge.token_attempt WHERE fleet = \(fleet) AND session_key = \(key) AND node = \(node) AND version = \(version)
            """, logger: logger)
    }

    /// Stores a logout as the next version only while the row is still at `version` (the token
    /// version the logout ended), waiting at most `lockWait` for a renewal that holds the row.
    /// - Returns: the new version, or `nil` when the fleet has moved on (another node renewed or
    ///   logged in since): the logout concerned a token the fleet no longer holds.
    public func writeLogout(_ key: String, ifVersion version: Int64, lockWait: Duration) async throws -> Int64? {
        try await client.withTransaction(logger: logger) { db in
            try await Self.ensureRow(db, fleet: fleet, key: key, logger: logger)
            let milliseconds = max(1, Int(lockWait.components.seconds * 1000 + lockWait.components.attoseconds / 1_000_000_000_000_000))
            try await db.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = '\(milliseconds)ms'"), logger: logger)
            let rows = try await db.query("""
                SELECT version FROM concierge.session WHERE fleet = \(fleet) AND session_key = \(key) FOR UPDATE
                """, logger: logger)
            var current: Int64 = 0
            for try await value in rows.decode(Int64.self) { current = value }
            guard current == version else { return nil }
            return try await Self.update(db, fleet: fleet, key: key, node: node, tokens: nil, fromCall: false, logger: logger)
        }
    }
}
