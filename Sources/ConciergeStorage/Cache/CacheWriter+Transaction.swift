import GRDB

/// The writer's transaction: one per batch, through statements prepared once.
extension CacheWriter {
    /// The statements every batch runs, prepared once on the writer's connection (the pool's
    /// one writer, for the life of the database): GRDB's statement cache hashes the whole SQL
    /// text at each lookup, the upsert's 600 characters every batch.
    struct BatchStatements {
        let begin: Statement
        let commit: Statement
        let upsert: Statement
    }

    /// Where ``batchStatements(_:)`` keeps them. `@unchecked Sendable`: written and read only
    /// on the writer's thread, inside the pool's writer, whose connection the statements
    /// belong to; no other thread ever sees the slot's contents.
    final class StatementSlot: @unchecked Sendable {
        var statements: BatchStatements?
    }

    func batchStatements(_ db: Database) throws -> BatchStatements {
        if let prepared = preparedStatements.statements { return prepared }
        let prepared = BatchStatements(begin: try db.makeStatement(sql: "BEGIN IMMEDIATE TRANSACTION"),
                                       commit: try db.makeStatement(sql: "COMMIT TRANSACTION"),
                                       upsert: try db.makeStatement(sql: Self.upsertSQL))
        preparedStatements.statements = prepared
        return prepared
    }

    /// A batch's transaction (`BEGIN IMMEDIATE` … `COMMIT`, rolled back on an error) through
    /// prepared statements: `DatabaseWriter.write` compiles both again for every transaction.
    ///
    /// A `durable` batch (it acknowledges an invalidation) commits with `synchronous = FULL`:
    /// in WAL mode `NORMAL` syncs the log only at checkpoints, so a power cut may take back
    /// the last commits; a lost put is fetched again, a lost invalidation would serve what
    /// the operator was told is gone.
    static func inTransaction<T>(_ db: Database, _ statements: BatchStatements, durable: Bool = false, _ body: () throws -> T) throws -> T {
        if durable { try db.execute(sql: "PRAGMA synchronous = FULL") }
        defer { if durable { try? db.execute(sql: "PRAGMA synchronous = NORMAL") } }
        try statements.begin.execute()
        do {
            let result = try body()
            try statements.commit.execute()
            return result
        } catch {
            // A failed COMMIT may have ended the transaction already (SQLite rolls back on
            // some errors); otherwise nothing of the batch stays.
            if db.isInsideTransaction { try? db.rollback() }
            throw error
        }
    }
}
