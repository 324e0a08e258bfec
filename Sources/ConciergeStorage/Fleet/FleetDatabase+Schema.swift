import ConciergeCore
import Foundation
import Logging
import PostgresNIO

/// The fleet's schema `concierge`, created and upgraded by whichever node starts first.
extension FleetDatabase {
    // MARK: Schema

    static let schemaVersion = 6

    /// Creates the schema, serialised between nodes that start together.
    public func migrate() async throws {
        try await client.withTransaction(logger: logger) { db in
            try await db.query("SELECT pg_advisory_xact_lock(hashtext('concierge.migrate'))", logger: logger)
            try await db.query("CREATE SCHEMA IF NOT EXISTS concierge", logger: logger)
            try await db.query("""
                CREATE TABLE IF NOT EXISTS concierge.session (
                    fleet text PRIMARY KEY,
                    version bigint NOT NULL DEFAULT 0,
                    tokens text,
                    updated_by text NOT NULL DEFAULT '',
                    updated_at timestamptz NOT NULL DEFAULT now())
                """, logger: logger)
            try await db.query("""
                CREATE TABLE IF NOT EXISTS concierge.token_request (
                    fleet text NOT NULL, node text NOT NULL, at timestamptz NOT NULL DEFAULT now())
                """, logger: logger)
            try await db.query("""
                CREATE TABLE IF NOT EXISTS concierge.invalidation (
                    fleet text NOT NULL, seq bigint NOT NULL, origin text NOT NULL, criteria text NOT NULL,
                    at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (fleet, seq))
                """, logger: logger)
            // Version 2: the nodes, and the loop guard's count for the fleet.
            try await db.query("ALTER TABLE concierge.session ADD COLUMN IF NOT EXISTS from_call boolean NOT NULL DEFAULT false",
                               logger: logger)
            try await db.query("""
                CREATE TABLE IF NOT EXISTS concierge.node (
                    fleet text NOT NULL, node text NOT NULL, last_seen timestamptz NOT NULL DEFAULT now(),
                    applied_seq bigint NOT NULL DEFAULT 0, PRIMARY KEY (fleet, node))
                """, logger: logger)
            try await db.query("CREATE TABLE IF NOT EXISTS concierge.loop_signal (fleet text NOT NULL, at timestamptz NOT NULL DEFAULT now())",
                               logger: logger)
            try await db.query(PostgresQuery(unsafeSQL: Self.sharedCacheTable), logger: logger)
            // Version 3: token-request pacing shared through the session row (FleetDatabase+Pacing.swift).
            try await Self.migratePacing(db, logger: logger)
            // Version 4: the token request under way (FleetDatabase+TokenAttempt.swift).
            try await db.query(PostgresQuery(unsafeSQL: Self.tokenAttemptTable), logger: logger)
            // Version 5: one row per session and per_client instance (FleetDatabase+SessionKeys.swift).
            try await Self.migrateSessionKeys(db, logger: logger)
            // Version 6: the count of session changes the heartbeat reads (FleetDatabase+SessionChanges.swift).
            try await Self.migrateSessionChanges(db, logger: logger)
            try await db.query("CREATE TABLE IF NOT EXISTS concierge.schema_version (version int NOT NULL)", logger: logger)
            try await db.query("""
                INSERT INTO concierge.schema_version (version) SELECT \(Self.schemaVersion)
                WHERE NOT EXISTS (SELECT 1 FROM concierge.schema_version)
                """, logger: logger)
            try await db.query("UPDATE concierge.schema_version SET version = greatest(version, \(Self.schemaVersion))", logger: logger)
        }
    }
}
