import ConciergeCore
import NIOCore
import NIOHTTP1
import PostgresNIO

/// The fleet's shared cache (`fleet.shared_cache: true`; table `concierge.cache`, UNLOGGED: a
/// crash of PostgreSQL empties it, which a cache can afford). A node that misses locally reads
/// it before calling the upstream; a storable reply is written to it too. Invalidations delete
/// its entries in the transaction that logs them (``publishInvalidation(_:)``), and a fill is
/// stored only when no invalidation was logged after the one its node had applied when the
/// upstream call began: so no node refills its cache from a stale shared entry.
extension FleetDatabase {
    /// The largest body kept in the shared cache.
    public static let sharedBodyLimit = 1 << 20

    static let sharedCacheTable = """
        CREATE UNLOGGED TABLE IF NOT EXISTS concierge.cache (
            fleet text NOT NULL, key text NOT NULL, endpoint text NOT NULL, user_id text, status bigint NOT NULL,
            headers text NOT NULL, body bytea NOT NULL, stored_at float8 NOT NULL, ttl float8 NOT NULL, swr float8 NOT NULL,
            sie float8 NOT NULL, version bigint NOT NULL, usable_until float8 NOT NULL, PRIMARY KEY (fleet, key))
        """

    /// The shared entry under `key`, if any (fresh or not: the caller judges by its clock).
    public func sharedEntry(_ key: String) async throws -> CacheEntry? {
        let rows = try await client.query("""
            SELECT endpoint, user_id, status, headers, body, stored_at, ttl, swr, sie, version
            FROM concierge.cache WHERE fleet = \(fleet) AND key = \(key)
            """, logger: logger)
        for try await (endpoint, user, status, headers, body, storedAt, ttl, swr, sie, version)
            in rows.decode((String, String?, Int, String, ByteBuffer, Double, Double, Double, Double, Int).self) {
            return CacheEntry(key: key, endpoint: endpoint, userID: user, status: status, headers: CacheEntry.headers(fromPairs: headers),
                              body: body, storedAt: storedAt, ttl: ttl, staleWhileRevalidate: swr, staleIfError: sie, version: version)
        }
        return nil
    }

    /// Writes `entry` to the shared cache unless an invalidation was logged after `seq` (the
    /// last one applied on this node when its upstream call began). The fill holds the
    /// invalidation lock shared, so an invalidation being logged either sees this row (and
    /// deletes it if it matches) or is seen by it (and the row is not written).
    /// - Returns: whether it was written.
    @discardableResult
    public func storeShared(_ entry: CacheEntry, ifNoInvalidationAfter seq: Int64) async throws -> Bool {
        guard entry.body.readableBytes <= Self.sharedBodyLimit else { return false }
        let headers = JSONValue.serializedPairs(entry.headers)
        return try await client.withTransaction(logger: logger) { db in
            try await db.query("SELECT pg_advisory_xact_lock_shared(hashtext(\("concierge.invalidation." + fleet)))", logger: logger)
            let rows = try await db.query("""
                INSERT INTO concierge.cache (fleet, key, endpoint, user_id, status, headers, body, stored_at, ttl, swr, sie, version, usable_until)
                SELECT \(fleet), \(entry.key), \(entry.endpoint), \(entry.userID), \(entry.status), \(headers), \(entry.body),
                       \(entry.storedAt), \(entry.ttl), \(entry.staleWhileRevalidate), \(entry.staleIfError), \(entry.version), \(entry.usableUntil)
                WHERE coalesce((SELECT max(seq) FROM concierge.invalidation WHERE fleet = \(fleet)), 0) <= \(seq)
                ON CONFLICT (fleet, key) DO UPDATE SET endpoint = excluded.endpoint, user_id = excluded.user_id, status = excluded.status,
                    headers = excluded.headers, body = excluded.body, stored_at = excluded.stored_at, ttl = excluded.ttl, swr = excluded.swr,
                    sie = excluded.sie, version = excluded.version, usable_until = excluded.usable_until
                RETURNING 1
                """, logger: logger)
            var written = false
            for try await _ in rows.decode(Int.self) { written = true }
            return written
        }
    }

    /// How many entries the shared cache holds for this fleet (tests and `GET /fleet`).
    public func sharedEntryCount() async throws -> Int {
        let rows = try await client.query("SELECT count(*) FROM concierge.cache WHERE fleet = \(fleet)", logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }

    /// Deletes the shared entries an invalidation selects, inside the transaction that logs it.
    /// A pattern is matched here with the nodes' own engine (PCRE2, ``KeyPattern``), over the
    /// shared keys; a key on which it exceeds a limit is deleted too (never left stale).
    static func deleteShared(_ db: PostgresConnection, fleet: String, criteria text: String, logger: Logger) async throws {
        guard let criteria = InvalidationCriteria(json: text) else {
            try await db.query("DELETE FROM concierge.cache WHERE fleet = \(fleet)", logger: logger)
            return
        }
        switch criteria {
        case .all:
            try await db.query("DELETE FROM concierge.cache WHERE fleet = \(fleet)", logger: logger)
        case .user(let user):
            try await db.query("DELETE FROM concierge.cache WHERE fleet = \(fleet) AND user_id = \(user)", logger: logger)
        case .endpoints(let names, let scope):
            switch scope {
            case .everyone:
                try await db.query("DELETE FROM concierge.cache WHERE fleet = \(fleet) AND endpoint = ANY(\(names))", logger: logger)
            case .sharedOnly:
                try await db.query("DELETE FROM concierge.cache WHERE fleet = \(fleet) AND endpoint = ANY(\(names)) AND user_id IS NULL",
                                   logger: logger)
            case .sharedAnd(let user):
                try await db.query("""
                    DELETE FROM concierge.cache WHERE fleet = \(fleet) AND endpoint = ANY(\(names)) AND (user_id IS NULL OR user_id = \(user))
                    """, logger: logger)
            }
        case .soft(let inner):
            // Marking shared copies stale would need every node's stale windows: they go, and
            // each node keeps its own copy, marked.
            try await deleteShared(db, fleet: fleet, criteria: inner.json, logger: logger)
        case .tags:
            // The shared table keeps no tags: every shared copy goes (more than asked, never a
            // tagged entry left fresh).
            try await db.query("DELETE FROM concierge.cache WHERE fleet = \(fleet)", logger: logger)
        case .pattern(let source):
            let matcher = (try? KeyPattern(source))?.matcher()
            let rows = try await db.query("SELECT key FROM concierge.cache WHERE fleet = \(fleet)", logger: logger)
            var doomed: [String] = []
            for try await key in rows.decode(String.self) {
                let selected: Bool
                do { selected = try matcher?.matches(key) ?? true } catch { selected = true }
                if selected { doomed.append(key) }
            }
            if !doomed.isEmpty {
                try await db.query("DELETE FROM concierge.cache WHERE fleet = \(fleet) AND key = ANY(\(doomed))", logger: logger)
            }
        }
    }

    /// Deletes shared entries past every window they could be served in.
    static func expireShared(_ db: PostgresConnection, fleet: String, now: Double, logger: Logger) async throws {
        try await db.query("DELETE FROM concierge.cache WHERE fleet = \(fleet) AND usable_until < \(now)", logger: logger)
    }
}
