import ConciergeCore
import Foundation
import Logging
import PostgresNIO

import NIOSSL
/// What PostgreSQL's errors mean to the fleet: a refusal to fix, a lost connection, a lock
/// timeout, and how each is logged (never a query or a value).
extension FleetDatabase {
    /// What PostgreSQL refused this node for, when it answered but would not let it in (wrong
    /// user or password, no TLS where `sslmode` requires it, a failed handshake): an error to
    /// fix, not an outage to wait out. `nil` for anything else.
    public static func refusal(_ error: any Error) -> String? {
        if let psql = error as? PSQLError {
            if let state = psql.serverInfo?[.sqlState], state.hasPrefix("28") {
                return "PostgreSQL refused the user or password of fleet.postgres (SQLSTATE \(state))"
            }
            if psql.code == .sslUnsupported { return "PostgreSQL offers no TLS, which fleet.postgres requires (sslmode)" }
            if psql.underlying is NIOSSLError { return "the TLS handshake with PostgreSQL failed (fleet.postgres sslmode, sslrootcert)" }
        }
        if error is NIOSSLError { return "the TLS handshake with PostgreSQL failed (fleet.postgres sslmode, sslrootcert)" }
        return nil
    }

    /// What went wrong, for a log line: postgres-nio describes its errors only generically (so
    /// that no query or value leaks); this names the client's error code, and for an error
    /// PostgreSQL sent its SQLSTATE and message, e.g. `server error 57P01: terminating
    /// connection due to administrator command`. Never the query, its values or the server's
    /// detail; no message for data and constraint errors (SQLSTATE classes 22 and 23), whose
    /// messages may quote a value.
    public static func describe(_ error: any Error) -> String {
        if let transaction = error as? PostgresTransactionError {
            let parts = [("BEGIN", transaction.beginError), ("in the transaction", transaction.closureError),
                         ("ROLLBACK", transaction.rollbackError), ("COMMIT", transaction.commitError)]
                .compactMap { what, error in error.map { "\(what): \(describe($0))" } }
            return "transaction failed (" + parts.joined(separator: "; ") + ")"
        }
        guard let psql = error as? PSQLError else { return String(describing: error) }
        if let state = psql.serverInfo?[.sqlState] {
            if state.hasPrefix("22") || state.hasPrefix("23") { return "server error \(state)" }
            return "server error \(state): \(psql.serverInfo?[.message] ?? "")"
        }
        if let underlying = psql.underlying { return "\(psql.code.description): \(describe(underlying))" }
        return psql.code.description
    }

    /// Whether `error` says only that this call's connection was lost (closed by the server, as
    /// when its backend is terminated, or by the network) while PostgreSQL itself may well be
    /// up: worth one more try on a new connection, unlike a refusal, a timeout or a SQL error.
    public static func connectionLost(_ error: any Error) -> Bool {
        if let transaction = error as? PostgresTransactionError {
            return [transaction.beginError, transaction.closureError, transaction.commitError].contains { $0.map(connectionLost) ?? false }
        }
        guard let psql = error as? PSQLError else { return false }
        if psql.code == .serverClosedConnection || psql.code == .clientClosedConnection || psql.code == .connectionError { return true }
        // 57P01 admin_shutdown (pg_terminate_backend), 57P02 crash_shutdown, 57P03 cannot_connect_now.
        return psql.serverInfo?[.sqlState].map { ["57P01", "57P02"].contains($0) } ?? false
    }

    /// Whether `error` is PostgreSQL's `lock_timeout` (SQLSTATE 55P03, lock_not_available).
    public static func lockNotAvailable(_ error: any Error) -> Bool {
        if let transaction = error as? PostgresTransactionError {
            return [transaction.beginError, transaction.closureError, transaction.commitError].contains { $0.map(lockNotAvailable) ?? false }
        }
        return (error as? PSQLError)?.serverInfo?[.sqlState] == "55P03"
    }
}
