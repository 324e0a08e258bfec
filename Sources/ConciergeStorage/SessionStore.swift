import ConciergeCore
import Foundation
import GRDB

/// Persists one session (tokens, user id, when set, kind and expiry) so it survives restarts:
/// `default` in the `session` table (as a daemon with one session always has), every other
/// session and `per_client` instance in `named_session` under its ``key``.
public struct SessionStore: Sendable {
    public let database: StorageDatabase
    /// `default`, a session's name, or `NAME#<digest of the instance id>` for an instance.
    public let key: String

    public init(database: StorageDatabase, key: String = "default") {
        self.database = database
        self.key = key
    }

    static let createNamedTable = """
        CREATE TABLE named_session (
          key TEXT PRIMARY KEY,
          access_token TEXT NOT NULL,
          refresh_token TEXT,
          user_id TEXT,
          set_at REAL NOT NULL,
          kind TEXT NOT NULL DEFAULT 'user',
          expires_at REAL,
          subject TEXT,
          last_used REAL NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        """

    private var isDefault: Bool { key == "default" }

    private static let columns = "access_token, refresh_token, user_id, set_at, kind, expires_at, subject"

    /// Reads the stored session on the caller's thread (start-up, a reload).
    public func load() throws -> SessionTokens? {
        try database.pool.read { db in
            let row = isDefault ? try Row.fetchOne(db, sql: "SELECT \(Self.columns) FROM session WHERE id = 1")
                : try Row.fetchOne(db, sql: "SELECT \(Self.columns) FROM named_session WHERE key = ?", arguments: [key])
            return row.map(Self.tokens)
        }
    }

    /// A stored instance (or named session) and when it was last used, read on one of SQLite's
    /// reader threads while the caller waits without blocking its own (an event loop's
    /// request task). `lastUsed` is the stored last use, else when its tokens were set.
    // Kept out of cross-module optimization: serialized into the server module, the
    // specialization of GRDB's async read it calls could not be read back (swift 6.3.1 crashed
    // with "DESERIALIZATION FAILURE ... base is not a nominal type (Connection)").
    @_semantics("optimize.no.crossmodule")
    public func loadOnReader() async throws -> (tokens: SessionTokens?, lastUsed: Date?) {
        let key = key
        return try await database.pool.read { db in
            let sql = "SELECT \(Self.columns), last_used FROM named_session WHERE key = ?"
            guard let row = try Row.fetchOne(db, sql: sql, arguments: [key]) else { return (nil, nil) }
            let lastUsed: Double = row["last_used"]
            let setAt: Double = row["set_at"]
            return (Self.tokens(row), Date(timeIntervalSince1970: lastUsed > 0 ? lastUsed : setAt))
        }
    }

    private static func tokens(_ row: Row) -> SessionTokens {
        SessionTokens(accessToken: row["access_token"], refreshToken: row["refresh_token"], userID: row["user_id"],
                      setAt: Date(timeIntervalSince1970: row["set_at"]),
                      kind: SessionTokens.Kind(rawValue: row["kind"]) ?? .user,
                      expiresAt: (row["expires_at"] as Double?).map(Date.init(timeIntervalSince1970:)),
                      subject: row["subject"])
    }

    /// Stores the session durably (or deletes it for `nil`) before returning.
    public func save(_ session: SessionTokens?) async throws {
        let key = key
        let isDefault = isDefault
        try await database.pool.write { db in
            guard let session else {
                try db.execute(sql: isDefault ? "DELETE FROM session" : "DELETE FROM named_session WHERE key = ?",
                               arguments: isDefault ? [] : [key])
                return
            }
            let values: StatementArguments = [session.accessToken, session.refreshToken, session.userID, session.setAt.timeIntervalSince1970,
                                              session.kind.rawValue, session.expiresAt?.timeIntervalSince1970, session.subject]
            let update = """
                ON CONFLICT DO UPDATE SET access_token = excluded.access_token, refresh_token = excluded.refresh_token,
                  user_id = excluded.user_id, set_at = excluded.set_at, kind = excluded.kind, expires_at = excluded.expires_at,
                  subject = excluded.subject
                """
            if isDefault {
                try db.execute(sql: "INSERT INTO session (id, access_token, refresh_token, user_id, set_at, kind, expires_at, subject) VALUES (1, ?, ?, ?, ?, ?, ?, ?) \(update)",
                               arguments: values)
            } else {
                var keyed: StatementArguments = [key]
                keyed += values
                try db.execute(sql: "INSERT INTO named_session (key, access_token, refresh_token, user_id, set_at, kind, expires_at, subject) VALUES (?, ?, ?, ?, ?, ?, ?, ?) \(update)",
                               arguments: keyed)
            }
        }
    }

    /// The stored instances of the `per_client` session `name`: their keys.
    public static func instanceKeys(_ database: StorageDatabase, session name: String) throws -> [String] {
        try database.pool.read { db in
            try String.fetchAll(db, sql: "SELECT key FROM named_session WHERE key >= ? AND key < ?", arguments: [name + "#", name + "$"])
        }
    }

    /// The stored instances of the `per_client` session `name` last used before `cutoff` (a row
    /// whose use was never recorded counts from when its tokens were set), read on a reader.
    // Kept out of cross-module optimization: serialized into the server module, the
    // specialization of GRDB's async read it calls could not be read back (swift 6.3.1 crashed
    // with "DESERIALIZATION FAILURE ... base is not a nominal type (Connection)").
    @_semantics("optimize.no.crossmodule")
    public static func instanceKeys(_ database: StorageDatabase, session name: String, unusedSince cutoff: Date) async throws -> [String] {
        try await database.pool.read { db in
            try String.fetchAll(db, sql: """
                SELECT key FROM named_session
                WHERE key >= ? AND key < ? AND (CASE WHEN last_used > 0 THEN last_used ELSE set_at END) < ?
                """, arguments: [name + "#", name + "$", cutoff.timeIntervalSince1970])
        }
    }

    /// Records when instances were last used (`per_client.idle` judges the stored ones by it):
    /// one transaction; a time older than the stored one is kept out.
    // Kept out of cross-module optimization: serialized into the server module, the
    // specialization of GRDB's async read it calls could not be read back (swift 6.3.1 crashed
    // with "DESERIALIZATION FAILURE ... base is not a nominal type (Connection)").
    @_semantics("optimize.no.crossmodule")
    public static func recordLastUse(_ database: StorageDatabase, _ uses: [(key: String, at: Date)]) async throws {
        guard !uses.isEmpty else { return }
        try await database.pool.write { db in
            let statement = try db.cachedStatement(sql: "UPDATE named_session SET last_used = ? WHERE key = ? AND last_used < ?")
            for use in uses {
                let at = use.at.timeIntervalSince1970
                try statement.execute(arguments: [at, use.key, at])
            }
        }
    }
}
