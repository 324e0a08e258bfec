import ConciergeCore
import Foundation
import GRDB

/// Persists the one session (tokens, user id, when set, kind and expiry) so it survives restarts.
public struct SessionStore: Sendable {
    public let database: StorageDatabase

    public init(database: StorageDatabase) {
        self.database = database
    }

    public func load() throws -> SessionTokens? {
        try database.pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT access_token, refresh_token, user_id, set_at, kind, expires_at, subject FROM session WHERE id = 1") else {
                return nil
            }
            return SessionTokens(accessToken: row["access_token"], refreshToken: row["refresh_token"], userID: row["user_id"],
                                 setAt: Date(timeIntervalSince1970: row["set_at"]),
                                 kind: SessionTokens.Kind(rawValue: row["kind"]) ?? .user,
                                 expiresAt: (row["expires_at"] as Double?).map(Date.init(timeIntervalSince1970:)),
                                 subject: row["subject"])
        }
    }

    /// Stores the session durably (or deletes it for `nil`) before returning.
    public func save(_ session: SessionTokens?) async throws {
        try await database.pool.write { db in
            if let session {
                try db.execute(sql: """
                    INSERT INTO session (id, access_token, refresh_token, user_id, set_at, kind, expires_at, subject) VALUES (1, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(id) DO UPDATE SET access_token = excluded.access_token, refresh_token = excluded.refresh_token,
                      user_id = excluded.user_id, set_at = excluded.set_at, kind = excluded.kind, expires_at = excluded.expires_at,
                      subject = excluded.subject
                    """, arguments: [session.accessToken, session.refreshToken, session.userID, session.setAt.timeIntervalSince1970,
                                     session.kind.rawValue, session.expiresAt?.timeIntervalSince1970, session.subject])
            } else {
                try db.execute(sql: "DELETE FROM session")
            }
        }
    }
}
