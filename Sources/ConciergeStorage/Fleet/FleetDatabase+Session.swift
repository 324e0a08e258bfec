import ConciergeCore
import Foundation
import Logging
import PostgresNIO

/// The fleet's session rows, one per session key (`default`, a session's name, an instance's
/// `name#digest`): read, written by a login or logout, and renewed under the row's lock.
extension FleetDatabase {
    // MARK: The session row

    /// The fleet's session as stored: the version of its last change and the sealed tokens
    /// (`nil`: no session, or logged out).
    public struct SessionRow: Sendable, Equatable {
        public var version: Int64
        public var tokens: String?
        /// Whether the tokens came from a token request (a renewal), not a login or a `PUT`.
        public var fromCall: Bool = false
        /// When the fleet may make its next token request (read under the row's lock only).
        public var pacing = TokenRequestPacing()
    }

    /// The row of session `key` (empty when the fleet has none yet).
    public func readSession(_ key: String) async throws -> SessionRow {
        let rows = try await client.query("""
            SELECT version, tokens, from_call FROM concierge.session WHERE fleet = \(fleet) AND session_key = \(key)
            """, logger: logger)
        for try await (version, tokens, fromCall) in rows.decode((Int64, String?, Bool).self) {
            return SessionRow(version: version, tokens: tokens, fromCall: fromCall)
        }
        return SessionRow(version: 0, tokens: nil)
    }

    /// Stores a session change (a login, a logout, tokens set by hand) as the next version and
    /// tells the other nodes. - Returns: the new version.
    @discardableResult
    public func writeSession(_ key: String, _ tokens: String?) async throws -> Int64 {
        try await client.withTransaction(logger: logger) { db in
            try await Self.ensureRow(db, fleet: fleet, key: key, logger: logger)
            return try await Self.update(db, fleet: fleet, key: key, node: node, tokens: tokens, fromCall: false, logger: logger)
        }
    }

    /// What a token renewal under the fleet's lock decided.
    public enum Renewal<T: Sendable>: Sendable {
        /// Nothing to store (the row already holds a newer token, or the renewal failed).
        case keep(T)
        /// Store these sealed tokens (`nil`: the session ended) as the next version.
        case store(String?, T)
        /// The token request failed: store when the fleet may make the next one.
        case pace(TokenRequestPacing, T)
    }

    /// Runs `body` holding the fleet's session row locked (`SELECT … FOR UPDATE`): one node at a
    /// time decides whether a token request is needed and makes it. A node that dies releases
    /// the lock with its connection. Waiting for the lock is bounded by `lockWait`.
    public func withSessionLock<T: Sendable>(_ key: String, lockWait: Duration,
                                             _ body: @Sendable (SessionRow) async throws -> Renewal<T>) async throws -> T {
        try await client.withTransaction(logger: logger) { db in
            try await Self.ensureRow(db, fleet: fleet, key: key, logger: logger)
            let milliseconds = max(1, Int(lockWait.components.seconds * 1000 + lockWait.components.attoseconds / 1_000_000_000_000_000))
            try await db.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = '\(milliseconds)ms'"), logger: logger)
            let rows = try await db.query("""
                SELECT version, tokens, from_call, paced_until, token_refusals FROM concierge.session
                WHERE fleet = \(fleet) AND session_key = \(key) FOR UPDATE
                """, logger: logger)
            var row = SessionRow(version: 0, tokens: nil)
            for try await (version, tokens, fromCall, notBefore, refusals) in rows.decode((Int64, String?, Bool, Double, Int64).self) {
                row = SessionRow(version: version, tokens: tokens, fromCall: fromCall,
                                 pacing: TokenRequestPacing(notBefore: notBefore, refusals: Int(refusals)))
            }
            switch try await body(row) {
            case .keep(let result):
                return result
            case .store(let tokens, let result):
                try await db.query("INSERT INTO concierge.token_request (fleet, node, session_key) VALUES (\(fleet), \(node), \(key))",
                                   logger: logger)
                _ = try await Self.update(db, fleet: fleet, key: key, node: node, tokens: tokens, fromCall: true, logger: logger)
                if row.pacing != TokenRequestPacing() {
                    try await Self.storePacing(db, fleet: fleet, key: key, TokenRequestPacing(), logger: logger)
                }
                return result
            case .pace(let pacing, let result):
                try await Self.storePacing(db, fleet: fleet, key: key, pacing, logger: logger)
                return result
            }
        }
    }

    static func ensureRow(_ db: PostgresConnection, fleet: String, key: String, logger: Logger) async throws {
        try await db.query("""
            INSERT INTO concierge.session (fleet, session_key) VALUES (\(fleet), \(key)) ON CONFLICT (fleet, session_key) DO NOTHING
            """, logger: logger)
    }

    static func update(_ db: PostgresConnection, fleet: String, key: String, node: String, tokens: String?, fromCall: Bool,
                       logger: Logger) async throws -> Int64 {
        let rows = try await db.query("""
            UPDATE concierge.session SET version = version + 1, tokens = \(tokens), from_call = \(fromCall), updated_by = \(node),
                updated_at = now()
            WHERE fleet = \(fleet) AND session_key = \(key) RETURNING version
            """, logger: logger)
        var version: Int64 = 0
        for try await v in rows.decode(Int64.self) { version = v }
        let payload = Self.sessionPayload(fleet: fleet, key: key, version: version)
        try await db.query("SELECT pg_notify(\(Self.sessionChannel), \(payload))", logger: logger)
        return version
    }

    /// How many token requests the fleet made, for every session or for session `key` (tests
    /// and `GET /fleet`).
    public func tokenRequestCount(session key: String? = nil) async throws -> Int {
        let rows = try await client.query("""
            SELECT count(*) FROM concierge.token_request WHERE fleet = \(fleet) AND (\(key)::text IS NULL OR session_key = \(key))
            """, logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }
}
