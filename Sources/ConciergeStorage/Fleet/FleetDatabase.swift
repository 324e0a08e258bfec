import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import Synchronization

/// The fleet's PostgreSQL (schema `concierge`): the session row every node shares, with the
/// version each change bumps, and the `NOTIFY` that tells the other nodes (never a secret: the
/// fleet's name and the version). Queries go through a `PostgresClient` pool, run as a service
/// of the daemon; every call has a deadline (``Deadline``), so a request never waits on a
/// database that is down or frozen longer than the caller allows.
public final class FleetDatabase: Sendable {
    public let client: PostgresClient
    public let fleet: String
    public let node: String
    let connection: PostgresConnection.Configuration
    let logger: Logger

    /// The channel of session changes.
    public static let sessionChannel = "concierge_session"

    public init(config: ConciergeConfig.Fleet, logger: Logger) throws {
        let address = config.postgres
        let tls = try Self.tls(address)
        var clientConfig: PostgresClient.Configuration
        var connection: PostgresConnection.Configuration
        if let socketDirectory = address.unixSocketDirectory {
            let path = "\(socketDirectory)/.s.PGSQL.\(address.port)"
            clientConfig = .init(unixSocketPath: path, username: address.username, password: address.password, database: address.database)
            connection = .init(unixSocketPath: path, username: address.username, password: address.password, database: address.database)
        } else {
            clientConfig = .init(host: address.host, port: address.port, username: address.username, password: address.password,
                                 database: address.database, tls: tls.client)
            connection = .init(host: address.host, port: address.port, username: address.username, password: address.password,
                               database: address.database, tls: tls.connection)
        }
        clientConfig.options.maximumConnections = 8
        clientConfig.options.connectTimeout = .seconds(5)
        connection.options.connectTimeout = .seconds(5)
        client = PostgresClient(configuration: clientConfig, backgroundLogger: logger)
        (self.connection, fleet, node, self.logger) = (connection, config.name, config.node, logger)
    }

    private static func tls(_ address: ConciergeConfig.PostgresAddress) throws
        -> (client: PostgresClient.Configuration.TLS, connection: PostgresConnection.Configuration.TLS) {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch address.tls {
        case .disable:
            return (.disable, .disable)
        case .prefer, .require:
            tls.certificateVerification = .none
        case .verifyFull:
            if let root = address.rootCertificate { tls.trustRoots = .file(root) }
        }
        let context = try NIOSSLContext(configuration: tls)
        return address.tls == .prefer ? (.prefer(tls), .prefer(context)) : (.require(tls), .require(context))
    }

    /// Runs the pool until cancelled (the daemon's service group).
    public func run() async {
        await client.run()
    }

    // MARK: Schema

    static let schemaVersion = 4

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
            try await db.query("CREATE TABLE IF NOT EXISTS concierge.schema_version (version int NOT NULL)", logger: logger)
            try await db.query("""
                INSERT INTO concierge.schema_version (version) SELECT \(Self.schemaVersion)
                WHERE NOT EXISTS (SELECT 1 FROM concierge.schema_version)
                """, logger: logger)
            try await db.query("UPDATE concierge.schema_version SET version = greatest(version, \(Self.schemaVersion))", logger: logger)
        }
    }

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

    /// The row, created empty when the fleet has none yet.
    public func readSession() async throws -> SessionRow {
        let rows = try await client.query("SELECT version, tokens, from_call FROM concierge.session WHERE fleet = \(fleet)", logger: logger)
        for try await (version, tokens, fromCall) in rows.decode((Int64, String?, Bool).self) {
            return SessionRow(version: version, tokens: tokens, fromCall: fromCall)
        }
        return SessionRow(version: 0, tokens: nil)
    }

    /// Stores a session change (a login, a logout, tokens set by hand) as the next version and
    /// tells the other nodes. - Returns: the new version.
    @discardableResult
    public func writeSession(_ tokens: String?) async throws -> Int64 {
        try await client.withTransaction(logger: logger) { db in
            try await Self.ensureRow(db, fleet: fleet, logger: logger)
            return try await Self.update(db, fleet: fleet, node: node, tokens: tokens, fromCall: false, logger: logger)
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
    public func withSessionLock<T: Sendable>(lockWait: Duration, _ body: @Sendable (SessionRow) async throws -> Renewal<T>) async throws -> T {
        try await client.withTransaction(logger: logger) { db in
            try await Self.ensureRow(db, fleet: fleet, logger: logger)
            let milliseconds = max(1, Int(lockWait.components.seconds * 1000 + lockWait.components.attoseconds / 1_000_000_000_000_000))
            try await db.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = '\(milliseconds)ms'"), logger: logger)
            let rows = try await db.query("""
                SELECT version, tokens, from_call, paced_until, token_refusals FROM concierge.session WHERE fleet = \(fleet) FOR UPDATE
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
                try await db.query("INSERT INTO concierge.token_request (fleet, node) VALUES (\(fleet), \(node))", logger: logger)
                _ = try await Self.update(db, fleet: fleet, node: node, tokens: tokens, fromCall: true, logger: logger)
                if row.pacing != TokenRequestPacing() { try await Self.storePacing(db, fleet: fleet, TokenRequestPacing(), logger: logger) }
                return result
            case .pace(let pacing, let result):
                try await Self.storePacing(db, fleet: fleet, pacing, logger: logger)
                return result
            }
        }
    }

    /// Connects once on a connection of its own (not the pool's, which retries quietly and
    /// queues callers meanwhile): fails at once with what PostgreSQL said (a refused user, no
    /// TLS) or why it could not be reached.
    public func probe() async throws {
        let probing = try await PostgresConnection.connect(configuration: connection, id: 2, logger: logger)
        do {
            try await probing.query("SELECT 1", logger: logger)
        } catch {
            try? await probing.close()
            throw error
        }
        try? await probing.close()
    }

    /// Both channels on `connection`, until either ends (the connection did: reconnect).
    private func listen(on connection: PostgresConnection, _ heard: @escaping @Sendable (Announcement) async -> Void) async throws {
        let sessions = try await connection.listen(Self.sessionChannel)
        let invalidations = try await connection.listen(Self.invalidationChannel)
        await heard(.connected)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { for try await n in sessions { if let v = self.version(n.payload) { await heard(.session(v)) } } }
            group.addTask { for try await n in invalidations { if let v = self.version(n.payload) { await heard(.invalidation(v)) } } }
            try await group.next()
            group.cancelAll()
        }
    }

    /// One round trip: whether PostgreSQL answers now.
    public func ping() async throws {
        try await client.query("SELECT 1", logger: logger)
    }

    /// How many token requests the fleet made (tests and `GET /fleet`).
    public func tokenRequestCount() async throws -> Int {
        let rows = try await client.query("SELECT count(*) FROM concierge.token_request WHERE fleet = \(fleet)", logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }

    static func ensureRow(_ db: PostgresConnection, fleet: String, logger: Logger) async throws {
        try await db.query("INSERT INTO concierge.session (fleet) VALUES (\(fleet)) ON CONFLICT (fleet) DO NOTHING", logger: logger)
    }

    static func update(_ db: PostgresConnection, fleet: String, node: String, tokens: String?, fromCall: Bool,
                               logger: Logger) async throws -> Int64 {
        let rows = try await db.query("""
            UPDATE concierge.session SET version = version + 1, tokens = \(tokens), from_call = \(fromCall), updated_by = \(node),
                updated_at = now()
            WHERE fleet = \(fleet) RETURNING version
            """, logger: logger)
        var version: Int64 = 0
        for try await v in rows.decode(Int64.self) { version = v }
        try await db.query("SELECT pg_notify(\(Self.sessionChannel), \(fleet + ":" + String(version)))", logger: logger)
        return version
    }

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

    // MARK: Listening

    /// What the listener hears.
    public enum Announcement: Sendable, Equatable {
        /// (Re)connected: announcements sent meanwhile are lost; read the tables.
        case connected
        case session(Int64)
        case invalidation(Int64)
    }

    /// Listens for session changes and invalidations on a dedicated connection (a pooled one
    /// would lose the registration), calling `heard` with each announcement for this fleet, in
    /// order, and with ``Announcement/connected`` after every (re)connection. Reconnects with a
    /// backoff up to 10 s until cancelled.
    public func listen(_ heard: @escaping @Sendable (Announcement) async -> Void) async {
        var backoff = Duration.milliseconds(200)
        var reported = false
        while !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(configuration: self.connection, id: 1, logger: logger)
                if reported { logger.info("fleet: PostgreSQL reachable again") }
                reported = false
                backoff = .milliseconds(200)
                do {
                    try await listen(on: connection, heard)
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch {
                if Task.isCancelled { return }
                if !reported {
                    if let refusal = Self.refusal(error) {
                        logger.error("fleet: \(refusal); serving on, retrying", metadata: ["error": "\(String(reflecting: error).prefix(200))"])
                    } else {
                        logger.warning("fleet: PostgreSQL unreachable; serving on, reconnecting", metadata: ["error": "\(String(reflecting: error).prefix(200))"])
                    }
                    reported = true
                }
            }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(10))
        }
    }

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

    /// The version or sequence number of an announcement `fleet:N` for this fleet.
    private func version(_ payload: String) -> Int64? {
        guard let colon = payload.lastIndex(of: ":"), payload[..<colon] == fleet else { return nil }
        return Int64(payload[payload.index(after: colon)...])
    }
}
