import Logging
import PostgresNIO

/// Schema version 5: the fleet shares every session, not only `default`. The session row, the
/// token request under way, the token requests made and the loop guard's signals are kept per
/// session key (`default`, a session's name, or an instance's `name#digest`, never the
/// instance id itself). A fleet's existing row, written before version 5, becomes `default`'s.
extension FleetDatabase {
    /// The key of the session named `default` (the top-level `session:`).
    public static let defaultSessionKey = "default"

    static func migrateSessionKeys(_ db: PostgresConnection, logger: Logger) async throws {
        for table in ["session", "token_attempt", "token_request", "loop_signal"] {
            try await db.query(PostgresQuery(unsafeSQL: """
                ALTER TABLE concierge.\(table) ADD COLUMN IF NOT EXISTS session_key text NOT NULL DEFAULT 'default'
                """), logger: logger)
        }
        // The primary keys `(fleet)` of versions 1-4 become `(fleet, session_key)`, once.
        for table in ["session", "token_attempt"] {
            try await db.query(PostgresQuery(unsafeSQL: """
                DO $$ BEGIN
                    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'concierge.\(table)'::regclass AND contype = 'p'
                                   AND array_length(conkey, 1) = 2) THEN
                        ALTER TABLE concierge.\(table) DROP CONSTRAINT IF EXISTS \(table)_pkey;
                        ALTER TABLE concierge.\(table) ADD PRIMARY KEY (fleet, session_key);
                    END IF;
                END $$
                """), logger: logger)
        }
        try await db.query("CREATE INDEX IF NOT EXISTS loop_signal_key ON concierge.loop_signal (fleet, session_key)", logger: logger)
    }

    /// A session change announced on ``sessionChannel``: `FLEET:VERSION` for `default` (as
    /// before version 5), `FLEET:VERSION/KEY` for any other session or instance.
    static func sessionPayload(fleet: String, key: String, version: Int64) -> String {
        key == defaultSessionKey ? "\(fleet):\(version)" : "\(fleet):\(version)/\(key)"
    }

    /// The session key and version of a session change announced for this fleet.
    func sessionChange(_ payload: String) -> (key: String, version: Int64)? {
        guard let colon = payload.lastIndex(of: ":"), payload[..<colon] == fleet else { return nil }
        let tail = payload[payload.index(after: colon)...]
        guard let slash = tail.firstIndex(of: "/") else { return Int64(tail).map { (Self.defaultSessionKey, $0) } }
        let key = String(tail[tail.index(after: slash)...])
        guard !key.isEmpty, let version = Int64(tail[..<slash]) else { return nil }
        return (key, version)
    }
}
