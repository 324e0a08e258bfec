import ConciergeCore
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

    static let schemaVersion = 1

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
            try await db.query("CREATE TABLE IF NOT EXISTS concierge.schema_version (version int NOT NULL)", logger: logger)
            try await db.query("""
                INSERT INTO concierge.schema_version (version) SELECT \(Self.schemaVersion)
                WHERE NOT EXISTS (SELECT 1 FROM concierge.schema_version)
                """, logger: logger)
        }
    }

    // MARK: The session row

    /// The fleet's session as stored: the version of its last change and the sealed tokens
    /// (`nil`: no session, or logged out).
    public struct SessionRow: Sendable, Equatable {
        public var version: Int64
        public var tokens: String?
    }

    /// The row, created empty when the fleet has none yet.
    public func readSession() async throws -> SessionRow {
        let rows = try await client.query("SELECT version, tokens FROM concierge.session WHERE fleet = \(fleet)", logger: logger)
        for try await (version, tokens) in rows.decode((Int64, String?).self) { return SessionRow(version: version, tokens: tokens) }
        return SessionRow(version: 0, tokens: nil)
    }

    /// Stores a session change (a login, a logout, tokens set by hand) as the next version and
    /// tells the other nodes. - Returns: the new version.
    @discardableResult
    public func writeSession(_ tokens: String?) async throws -> Int64 {
        try await client.withTransaction(logger: logger) { db in
            try await Self.ensureRow(db, fleet: fleet, logger: logger)
            return try await Self.update(db, fleet: fleet, node: node, tokens: tokens, logger: logger)
        }
    }

    /// What a token renewal under the fleet's lock decided.
    public enum Renewal<T: Sendable>: Sendable {
        /// Nothing to store (the row already holds a newer token, or the renewal failed).
        case keep(T)
        /// Store these sealed tokens (`nil`: the session ended) as the next version.
        case store(String?, T)
    }

    /// Runs `body` holding the fleet's session row locked (`SELECT … FOR UPDATE`): one node at a
    /// time decides whether a token request is needed and makes it. A node that dies releases
    /// the lock with its connection. Waiting for the lock is bounded by `lockWait`.
    public func withSessionLock<T: Sendable>(lockWait: Duration, _ body: @Sendable (SessionRow) async throws -> Renewal<T>) async throws -> T {
        try await client.withTransaction(logger: logger) { db in
            try await Self.ensureRow(db, fleet: fleet, logger: logger)
            let milliseconds = max(1, Int(lockWait.components.seconds * 1000 + lockWait.components.attoseconds / 1_000_000_000_000_000))
            try await db.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = '\(milliseconds)ms'"), logger: logger)
            let rows = try await db.query("SELECT version, tokens FROM concierge.session WHERE fleet = \(fleet) FOR UPDATE", logger: logger)
            var row = SessionRow(version: 0, tokens: nil)
            for try await (version, tokens) in rows.decode((Int64, String?).self) { row = SessionRow(version: version, tokens: tokens) }
            switch try await body(row) {
            case .keep(let result):
                return result
            case .store(let tokens, let result):
                try await db.query("INSERT INTO concierge.token_request (fleet, node) VALUES (\(fleet), \(node))", logger: logger)
                _ = try await Self.update(db, fleet: fleet, node: node, tokens: tokens, logger: logger)
                return result
            }
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

    private static func ensureRow(_ db: PostgresConnection, fleet: String, logger: Logger) async throws {
        try await db.query("INSERT INTO concierge.session (fleet) VALUES (\(fleet)) ON CONFLICT (fleet) DO NOTHING", logger: logger)
    }

    private static func update(_ db: PostgresConnection, fleet: String, node: String, tokens: String?, logger: Logger) async throws -> Int64 {
        let rows = try await db.query("""
            UPDATE concierge.session SET version = version + 1, tokens = \(tokens), updated_by = \(node), updated_at = now()
            WHERE fleet = \(fleet) RETURNING version
            """, logger: logger)
        var version: Int64 = 0
        for try await v in rows.decode(Int64.self) { version = v }
        try await db.query("SELECT pg_notify(\(Self.sessionChannel), \(fleet + ":" + String(version)))", logger: logger)
        return version
    }

    // MARK: Listening

    /// Listens for session changes on a dedicated connection (a pooled one would lose the
    /// registration), calling `changed` with each version announced for this fleet, and once
    /// after every (re)connection with `nil` (a notification sent meanwhile is lost: read the row).
    /// Reconnects with a backoff up to 10 s until cancelled.
    public func listen(_ changed: @Sendable (Int64?) async -> Void) async {
        var backoff = Duration.milliseconds(200)
        var reported = false
        while !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(configuration: self.connection, id: 1, logger: logger)
                if reported { logger.info("fleet: PostgreSQL reachable again") }
                reported = false
                backoff = .milliseconds(200)
                try await connection.listen(on: Self.sessionChannel) { notifications in
                    await changed(nil)
                    for try await notification in notifications {
                        guard let colon = notification.payload.lastIndex(of: ":"), notification.payload[..<colon] == fleet,
                              let version = Int64(notification.payload[notification.payload.index(after: colon)...]) else { continue }
                        await changed(version)
                    }
                }
                try? await connection.close()
            } catch {
                if Task.isCancelled { return }
                if !reported {
                    logger.warning("fleet: PostgreSQL unreachable; serving on, reconnecting", metadata: ["error": "\(String(reflecting: error).prefix(200))"])
                    reported = true
                }
            }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(10))
        }
    }
}

/// A deadline on a call to PostgreSQL: the caller gets ``DeadlineExceeded`` once `limit`
/// passes, whether or not the call (left running, cancelled) has ended: a frozen database
/// never holds a request longer than that.
public enum Deadline {
    public struct Exceeded: Error, CustomStringConvertible {
        public let limit: Duration
        public var description: String { "PostgreSQL did not answer within \(limit)" }
    }

    public static func run<T: Sendable>(_ limit: Duration, _ work: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let slot = Slot(continuation)
            let task = Task {
                let result: Result<T, any Error>
                do { result = .success(try await work()) } catch { result = .failure(error) }
                slot.take()?.resume(with: result)
            }
            Task {
                try? await Task.sleep(for: limit)
                if let continuation = slot.take() {
                    task.cancel()
                    continuation.resume(throwing: Exceeded(limit: limit))
                }
            }
        }
    }

    /// The caller's continuation, resumed once by whichever comes first.
    private final class Slot<T: Sendable>: Sendable {
        private let continuation: Mutex<CheckedContinuation<T, any Error>?>
        init(_ continuation: CheckedContinuation<T, any Error>) { self.continuation = Mutex(continuation) }
        func take() -> CheckedContinuation<T, any Error>? { continuation.withLock { $0.take() } }
    }
}
