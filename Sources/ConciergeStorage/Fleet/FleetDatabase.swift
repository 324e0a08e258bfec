import ConciergeCore
import Foundation
import Logging
import NIOSSL
import PostgresNIO
import Synchronization

/// The fleet's PostgreSQL (schema `concierge`): the session rows every node shares (one per
/// session and per_client instance), with the version each change bumps, and the `NOTIFY` that tells the other nodes (never a secret: the
/// fleet's name and the version). Queries go through a `PostgresClient` pool, which the
/// daemon's service group runs (``client``); every call has a deadline (``Deadline``), so a
/// request never waits on a database that is down or frozen longer than the caller allows.
///
/// By concern: the schema (+Schema, +SessionKeys), the session rows (+Session) and the count
/// of their changes (+SessionChanges), its pacing (+Pacing) and the
/// token request under way (+TokenAttempt), the invalidation log (+Invalidations), the nodes
/// (+Nodes), the shared cache (+SharedCache), the listener (+Listening), errors (+Errors).
public final class FleetDatabase: Sendable {
    public let client: PostgresClient
    public let fleet: String
    public let node: String
    let connection: PostgresConnection.Configuration
    let logger: Logger
    /// The session rows as ``sessionVersions()`` last read them, and the change count then.
    let lastSessionVersions = Mutex<(changes: Int64, versions: [String: SessionVersion])?>(nil)

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

    /// One round trip: whether PostgreSQL answers now.
    public func ping() async throws {
        try await client.query("SELECT 1", logger: logger)
    }

    /// The version or sequence number of an announcement `fleet:N` for this fleet.
    func version(_ payload: String) -> Int64? {
        guard let colon = payload.lastIndex(of: ":"), payload[..<colon] == fleet else { return nil }
        return Int64(payload[payload.index(after: colon)...])
    }
}
