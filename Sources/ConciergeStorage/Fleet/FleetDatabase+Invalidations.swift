import ConciergeCore
import Foundation
import Logging
import PostgresNIO

/// The fleet's invalidation log: numbered without gaps, announced, read in order, collected.
extension FleetDatabase {
    // MARK: The invalidation log

    /// The channel of invalidations.
    public static let invalidationChannel = "concierge_invalidation"

    /// Logs an invalidation (its criteria as JSON text) as the fleet's next sequence number and
    /// announces it. Publishers of one fleet are serialised (an advisory lock held to the
    /// commit), so the numbers have no gaps and a listener can tell when it missed one.
    /// - Returns: the sequence number.
    public func publishInvalidation(_ criteria: String) async throws -> Int64 {
        try await client.withTransaction(logger: logger) { db in
            try await db.query("SELECT pg_advisory_xact_lock(hashtext(\("concierge.invalidation." + fleet)))", logger: logger)
            let rows = try await db.query("""
                INSERT INTO concierge.invalidation (fleet, seq, origin, criteria)
                SELECT \(fleet), coalesce(max(seq), 0) + 1, \(node), \(criteria) FROM concierge.invalidation WHERE fleet = \(fleet)
                RETURNING seq
                """, logger: logger)
            var seq: Int64 = 0
            for try await value in rows.decode(Int64.self) { seq = value }
            // Whatever this node's setting: a shared entry the fleet meant to remove never outlives the log row.
            try await Self.deleteShared(db, fleet: fleet, criteria: criteria, logger: logger)
            try await db.query("SELECT pg_notify(\(Self.invalidationChannel), \(fleet + ":" + String(seq)))", logger: logger)
            return seq
        }
    }

    /// One logged invalidation.
    public struct LoggedInvalidation: Sendable {
        public var seq: Int64
        public var origin: String
        public var criteria: String
        /// When it was logged (the database's clock, Unix seconds).
        public var loggedAt: Double
    }

    /// The invalidations after `seq`, in order, at most `limit`.
    public func invalidations(after seq: Int64, limit: Int = 1_000) async throws -> [LoggedInvalidation] {
        let rows = try await client.query("""
            SELECT seq, origin, criteria, extract(epoch FROM at)::float8 FROM concierge.invalidation
            WHERE fleet = \(fleet) AND seq > \(seq) ORDER BY seq LIMIT \(limit)
            """, logger: logger)
        var out: [LoggedInvalidation] = []
        for try await (seq, origin, criteria, at) in rows.decode((Int64, String, String, Double).self) {
            out.append(LoggedInvalidation(seq: seq, origin: origin, criteria: criteria, loggedAt: at))
        }
        return out
    }

    /// The lowest and highest sequence numbers still logged (`nil` while the log is empty).
    public func logBounds() async throws -> (oldest: Int64, newest: Int64)? {
        let rows = try await client.query("SELECT min(seq), max(seq) FROM concierge.invalidation WHERE fleet = \(fleet)", logger: logger)
        for try await (oldest, newest) in rows.decode((Int64?, Int64?).self) {
            if let oldest, let newest { return (oldest, newest) }
        }
        return nil
    }

    /// Deletes log rows older than `retention`, keeping the newest (the fleet's current number),
    /// from one node at a time (a try-lock: the others skip). - Returns: rows deleted.
    @discardableResult
    public func collectGarbage(retention: Duration) async throws -> Int {
        let seconds = Double(retention.components.seconds)
        return try await client.withTransaction(logger: logger) { db in
            let locked = try await db.query("SELECT pg_try_advisory_xact_lock(hashtext(\("concierge.gc." + fleet)))", logger: logger)
            var got = false
            for try await value in locked.decode(Bool.self) { got = value }
            guard got else { return 0 }
            try await Self.expireShared(db, fleet: fleet, now: Date().timeIntervalSince1970, logger: logger)
            let rows = try await db.query("""
                WITH deleted AS (
                    DELETE FROM concierge.invalidation WHERE fleet = \(fleet) AND at < now() - make_interval(secs => \(seconds))
                    AND seq < (SELECT max(seq) FROM concierge.invalidation WHERE fleet = \(fleet)) RETURNING 1)
                SELECT count(*) FROM deleted
                """, logger: logger)
            var count: Int64 = 0
            for try await value in rows.decode(Int64.self) { count = value }
            return Int(count)
        }
    }
}
