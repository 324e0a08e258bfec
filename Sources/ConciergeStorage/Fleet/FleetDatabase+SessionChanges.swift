import Logging
import PostgresNIO

/// Schema version 6: a count of each fleet's session changes, kept by triggers on
/// `concierge.session`, so the heartbeat's check of what the listener may have missed
/// (``sessionVersions()``) reads one row a second, and every session row only when one of
/// them changed. With 100,000 `per_client` instances it read 100,000 rows a second per node.
///
/// A trigger rather than a statement of this code: a row changed by an older node, or by
/// hand, is counted too. What is counted is what ``sessionVersions()`` reads: a row's version
/// or tokens changing, a row with either inserted, a row deleted. A row inserted empty (a
/// session's first use, before its token request under the row's lock) and the pacing columns
/// are not: the count's row is locked from the change to its transaction's commit, and a
/// token request must not hold it.
extension FleetDatabase {
    static func migrateSessionChanges(_ db: PostgresConnection, logger: Logger) async throws {
        try await db.query("CREATE TABLE IF NOT EXISTS concierge.session_change (fleet text PRIMARY KEY, changes bigint NOT NULL)",
                           logger: logger)
        // Once per statement, over its rows (transition tables): a statement that changes many
        // rows bumps each fleet's count once, not once a row.
        try await db.query(PostgresQuery(unsafeSQL: """
            CREATE OR REPLACE FUNCTION concierge.count_session_changes() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    INSERT INTO concierge.session_change AS c (fleet, changes)
                    SELECT fleet, 1 FROM added WHERE version <> 0 OR tokens IS NOT NULL GROUP BY fleet
                    ON CONFLICT (fleet) DO UPDATE SET changes = c.changes + 1;
                ELSIF TG_OP = 'DELETE' THEN
                    INSERT INTO concierge.session_change AS c (fleet, changes)
                    SELECT fleet, 1 FROM removed GROUP BY fleet
                    ON CONFLICT (fleet) DO UPDATE SET changes = c.changes + 1;
                ELSE
                    INSERT INTO concierge.session_change AS c (fleet, changes)
                    SELECT coalesce(n.fleet, o.fleet), 1
                    FROM added n FULL JOIN removed o ON o.fleet = n.fleet AND o.session_key = n.session_key
                    WHERE n.fleet IS NULL OR o.fleet IS NULL OR o.version IS DISTINCT FROM n.version OR o.tokens IS DISTINCT FROM n.tokens
                    GROUP BY 1
                    ON CONFLICT (fleet) DO UPDATE SET changes = c.changes + 1;
                END IF;
                RETURN NULL;
            END $$
            """), logger: logger)
        let triggers = [
            ("session_change_insert", "AFTER INSERT", "REFERENCING NEW TABLE AS added"),
            ("session_change_update", "AFTER UPDATE", "REFERENCING OLD TABLE AS removed NEW TABLE AS added"),
            ("session_change_delete", "AFTER DELETE", "REFERENCING OLD TABLE AS removed"),
        ]
        // Created once: replacing a trigger locks the table against every node's session writes.
        for (name, event, tables) in triggers {
            try await db.query(PostgresQuery(unsafeSQL: """
                DO $$ BEGIN
                    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '\(name)' AND tgrelid = 'concierge.session'::regclass) THEN
                        CREATE TRIGGER \(name) \(event) ON concierge.session \(tables) FOR EACH STATEMENT
                            EXECUTE FUNCTION concierge.count_session_changes();
                    END IF;
                END $$
                """), logger: logger)
        }
    }

    /// How many times the fleet's session rows changed (see the extension's comment); 0 before the first.
    public func sessionChangeCount() async throws -> Int64 {
        let rows = try await client.query("SELECT changes FROM concierge.session_change WHERE fleet = \(fleet)", logger: logger)
        for try await changes in rows.decode(Int64.self) { return changes }
        return 0
    }

    /// Every session row of the fleet: its version and whether it holds tokens (no token is
    /// read). The heartbeat's check of what the listener may have missed: the rows are read
    /// again only when ``sessionChangeCount()`` moved since they were last read.
    public func sessionVersions() async throws -> [String: SessionVersion] {
        // Counted before the rows are read: a change committed in between is in the rows and
        // moves the count past this value, so the next call reads them again.
        let changes = try await sessionChangeCount()
        if let last = lastSessionVersions.withLock({ $0 }), last.changes == changes { return last.versions }
        let rows = try await client.query("""
            SELECT session_key, version, tokens IS NOT NULL FROM concierge.session WHERE fleet = \(fleet)
            """, logger: logger)
        var versions: [String: SessionVersion] = [:]
        for try await (key, version, hasTokens) in rows.decode((String, Int64, Bool).self) { versions[key] = (version, hasTokens) }
        lastSessionVersions.withLock { $0 = (changes, versions) }
        return versions
    }

    public typealias SessionVersion = (version: Int64, hasTokens: Bool)
}
