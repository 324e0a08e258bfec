import Logging
import NIOCore
import PostgresNIO

/// The fleet's listener: session changes and invalidations announced by `NOTIFY`, heard on a
/// connection of its own.
extension FleetDatabase {
    /// What the listener hears.
    public enum Announcement: Sendable, Equatable {
        /// (Re)connected: announcements sent meanwhile are lost; read the tables.
        case connected
        /// A change of the session row `key` (`default`, a session's name, an instance's key).
        case session(key: String, version: Int64)
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
                let connection = try await connectListener()
                if reported { logger.info("fleet: PostgreSQL reachable again") }
                reported = false
                backoff = .milliseconds(200)
                do {
                    // Stopped: the connection is closed, which ends a LISTEN a frozen database never answers.
                    try await withTaskCancellationHandler {
                        try await listen(on: connection, heard)
                    } onCancel: {
                        connection.close().whenComplete { _ in }
                    }
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch {
                if Task.isCancelled { return }
                if !reported {
                    let detail: Logger.Metadata = ["error": "\(String(reflecting: error).prefix(200))"]
                    if let refusal = Self.refusal(error) {
                        logger.error("fleet: \(refusal); serving on, retrying", metadata: detail)
                    } else {
                        logger.warning("fleet: PostgreSQL unreachable; serving on, reconnecting", metadata: detail)
                    }
                    reported = true
                }
            }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(10))
        }
    }

    /// The listener's connection. A connection to a frozen database may never be set up, and
    /// the client does not heed cancellation meanwhile: the listener stops waiting for it when
    /// stopped (``Deadline``), and one set up after that is closed.
    private func connectListener() async throws -> PostgresConnection {
        // No deadline of its own (the heartbeat judges the database): a day stands for none.
        try await Deadline.run(.seconds(24 * 3600), clock: ContinuousClock()) { (answer: Deadline.Answer<PostgresConnection>) in
            do {
                let connection = try await PostgresConnection.connect(configuration: self.connection, id: 1, logger: self.logger)
                if !answer.send(.success(connection)) { try? await connection.close() }
            } catch {
                answer.send(.failure(error))
            }
        }
    }

    /// Both channels on `connection`, until either ends (the connection did: reconnect).
    private func listen(on connection: PostgresConnection, _ heard: @escaping @Sendable (Announcement) async -> Void) async throws {
        try await connection.listen(on: Self.sessionChannel) { sessions in
            try await connection.listen(on: Self.invalidationChannel) { invalidations in
                await heard(.connected)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for try await n in sessions { if let c = self.sessionChange(n.payload) { await heard(.session(key: c.key, version: c.version)) } } }
                    group.addTask { for try await n in invalidations { if let v = self.version(n.payload) { await heard(.invalidation(v)) } } }
                    try await group.next()
                    group.cancelAll()
                }
            }
        }
    }
}
