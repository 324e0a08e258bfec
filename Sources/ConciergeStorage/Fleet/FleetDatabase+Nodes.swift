import PostgresNIO

/// The fleet's nodes as each reports itself (table `concierge.node`): when it was last seen and
/// the last invalidation it applied, for `GET /fleet` and for an invalidation that waits until
/// every node has applied it (`?wait=fleet`); and the loop guard's count for the whole fleet
/// (table `concierge.loop_signal`).
extension FleetDatabase {
    /// One node as it last reported itself.
    public struct NodeRow: Sendable, Equatable {
        public var node: String
        /// When it last reported (Unix seconds, the database's clock).
        public var lastSeen: Double
        /// Seconds since then (the database's clock, so one clock for every node).
        public var silentFor: Double
        public var appliedSeq: Int64
    }

    /// Records that this node is alive and has applied the log up to `appliedSeq`.
    public func reportNode(appliedSeq: Int64) async throws {
        try await client.query("""
            INSERT INTO concierge.node (fleet, node, last_seen, applied_seq) VALUES (\(fleet), \(node), now(), \(appliedSeq))
            ON CONFLICT (fleet, node) DO UPDATE SET last_seen = now(), applied_seq = greatest(concierge.node.applied_seq, excluded.applied_seq)
            """, logger: logger)
    }

    /// Every node of the fleet that ever reported, by name.
    public func nodes() async throws -> [NodeRow] {
        let rows = try await client.query("""
            SELECT node, extract(epoch FROM last_seen)::float8, extract(epoch FROM now() - last_seen)::float8, applied_seq
            FROM concierge.node WHERE fleet = \(fleet) ORDER BY node
            """, logger: logger)
        var out: [NodeRow] = []
        for try await (node, lastSeen, silentFor, applied) in rows.decode((String, Double, Double, Int64).self) {
            out.append(NodeRow(node: node, lastSeen: lastSeen, silentFor: silentFor, appliedSeq: applied))
        }
        return out
    }

    /// The other nodes seen within `seenWithin` that have not applied `seq` yet.
    public func lagging(behind seq: Int64, seenWithin: Duration) async throws -> [String] {
        let seconds = Double(seenWithin.components.seconds)
        let rows = try await client.query("""
            SELECT node FROM concierge.node WHERE fleet = \(fleet) AND node <> \(node) AND applied_seq < \(seq)
            AND last_seen > now() - make_interval(secs => \(seconds)) ORDER BY node
            """, logger: logger)
        var out: [String] = []
        for try await name in rows.decode(String.self) { out.append(name) }
        return out
    }

    /// Counts an expiry signal on a token the fleet got from a token request, among those of
    /// the last `within` (older ones are deleted). Called under the session row's lock, so the
    /// count is the fleet's (per session key). - Returns: the count, and the seconds until the oldest leaves the window.
    public func countLoopSignal(_ key: String, within: Duration) async throws -> (count: Int, secondsToExpiry: Double) {
        let seconds = Double(within.components.seconds) + Double(within.components.attoseconds) / 1e18
        return try await client.withTransaction(logger: logger) { db in
            try await db.query("""
                DELETE FROM concierge.loop_signal WHERE fleet = \(fleet) AND session_key = \(key) AND at <= now() - make_interval(secs => \(seconds))
                """, logger: logger)
            try await db.query("INSERT INTO concierge.loop_signal (fleet, session_key) VALUES (\(fleet), \(key))", logger: logger)
            let rows = try await db.query("""
                SELECT count(*), extract(epoch FROM min(at) + make_interval(secs => \(seconds)) - now())::float8
                FROM concierge.loop_signal WHERE fleet = \(fleet) AND session_key = \(key)
                """, logger: logger)
            for try await (count, left) in rows.decode((Int64, Double).self) { return (Int(count), left) }
            return (1, seconds)
        }
    }
}
