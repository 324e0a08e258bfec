import Foundation
import GRDB

/// What a fleet node keeps beside its local cache, in the same SQLite file: the sequence
/// number of the last fleet invalidation applied here (so a restarted node catches up from
/// there), and the outbox of invalidations made here while PostgreSQL was unreachable.
public struct FleetLocalStore: Sendable {
    public let database: StorageDatabase
    public let fleet: String

    public init(database: StorageDatabase, fleet: String) {
        (self.database, self.fleet) = (database, fleet)
    }

    /// The last applied sequence number; `nil` for a node that never applied one.
    public func appliedSeq() throws -> Int64? {
        try database.pool.read { db in try Int64.fetchOne(db, sql: "SELECT applied_seq FROM fleet_state WHERE fleet = ?", arguments: [fleet]) }
    }

    public func setApplied(_ seq: Int64) async throws {
        try await database.pool.write { [fleet] db in
            try db.execute(sql: """
                INSERT INTO fleet_state (fleet, applied_seq) VALUES (?, ?)
                ON CONFLICT(fleet) DO UPDATE SET applied_seq = max(applied_seq, excluded.applied_seq)
                """, arguments: [fleet, seq])
        }
    }

    /// An invalidation to publish once PostgreSQL answers (its criteria as JSON text).
    public func enqueue(_ criteria: String) async throws {
        try await database.pool.write { [fleet] db in
            try db.execute(sql: "INSERT INTO fleet_outbox (fleet, criteria) VALUES (?, ?)", arguments: [fleet, criteria])
        }
    }

    /// The outbox in order: (id, criteria).
    public func pending() throws -> [(id: Int64, criteria: String)] {
        try database.pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, criteria FROM fleet_outbox WHERE fleet = ? ORDER BY id", arguments: [fleet])
                .map { (id: $0["id"], criteria: $0["criteria"]) }
        }
    }

    public func delivered(_ id: Int64) async throws {
        try await database.pool.write { db in try db.execute(sql: "DELETE FROM fleet_outbox WHERE id = ?", arguments: [id]) }
    }
}
