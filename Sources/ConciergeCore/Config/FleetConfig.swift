import Foundation
import Yams

extension ConciergeConfig {
    /// `fleet`: several daemons sharing one session and one token request per expiry through
    /// PostgreSQL (docs/fleet.md). `nil` without the section: nothing of it applies.
    public struct Fleet: Sendable {
        public var postgres: PostgresAddress
        /// Daemons with one name are one fleet (several fleets may share a database).
        public var name = "default"
        /// This daemon, unique within the fleet.
        public var node: String
        /// 32 bytes sealing the tokens stored in PostgreSQL (AES-GCM); `nil`: stored in clear.
        public var keyFile: String?
        /// The most a request waits on PostgreSQL.
        public var timeout: Duration = .milliseconds(200)
        /// How long the invalidation log is kept.
        public var retention: Duration = .seconds(86_400)
        /// Storable replies are also kept in PostgreSQL, and a local miss looks there first.
        public var sharedCache = false
    }

    /// A libpq-style `postgresql://user:password@host:port/database?sslmode=…` URL, parsed.
    public struct PostgresAddress: Sendable, Equatable {
        public enum TLSMode: String, Sendable {
            case disable, prefer, require
            case verifyFull = "verify-full"
        }

        public var host: String
        public var port: Int
        public var username: String
        public var password: String?
        public var database: String
        public var tls: TLSMode
        /// `sslrootcert=PATH`: the CA for `verify-full`.
        public var rootCertificate: String?
        /// `host=/run/postgresql`: a Unix socket directory instead of TCP.
        public var unixSocketDirectory: String?

        /// The URL with its password masked, for logs and the admin API.
        public var masked: String {
            "postgresql://\(username)\(password == nil ? "" : ":***")@\(unixSocketDirectory ?? "\(host):\(port)")/\(database)?sslmode=\(tls.rawValue)"
        }

        /// Parses the URL; the error says what is wrong with it (never repeating the password).
        public static func parse(_ text: String) -> Result<PostgresAddress, ParseError> {
            guard let components = URLComponents(string: text), ["postgresql", "postgres"].contains(components.scheme ?? "") else {
                return .failure(ParseError("expected postgresql://user:password@host:port/database"))
            }
            guard let user = components.user, !user.isEmpty else { return .failure(ParseError("the URL names no user")) }
            let database = String(components.path.drop { $0 == "/" })
            guard !database.isEmpty else { return .failure(ParseError("the URL names no database")) }
            var address = PostgresAddress(host: components.host ?? "", port: components.port ?? 5432, username: user,
                                          password: components.password, database: database, tls: .prefer)
            for item in components.queryItems ?? [] {
                switch item.name {
                case "sslmode":
                    guard let mode = TLSMode(rawValue: item.value ?? "") else {
                        return .failure(ParseError("sslmode must be disable, prefer, require or verify-full, found '\(item.value ?? "")'"))
                    }
                    address.tls = mode
                case "sslrootcert": address.rootCertificate = item.value
                case "host": address.unixSocketDirectory = item.value
                default: return .failure(ParseError("unknown URL parameter '\(item.name)' (known: sslmode, sslrootcert, host)"))
                }
            }
            if address.host.isEmpty, address.unixSocketDirectory == nil { return .failure(ParseError("the URL names no host")) }
            return .success(address)
        }

        public struct ParseError: Error, Equatable {
            public let message: String
            init(_ message: String) { self.message = message }
        }
    }
}

extension ConfigLoader {
    /// `fleet`: the PostgreSQL URL and this node's place in the fleet.
    static func fleetSection(_ node: Node?, _ r: YAMLReader) -> ConciergeConfig.Fleet? {
        guard let node, !YAMLReader.isNull(node),
              let m = r.mapping(node, "fleet", allowed: ["postgres", "name", "node", "key_file", "shared_cache", "timeout", "retention"]) else {
            return nil
        }
        guard let urlNode = m["postgres"] else {
            r.fail("fleet.postgres", node, "missing: the PostgreSQL URL (postgresql://user:password@host:5432/database)")
            return nil
        }
        guard let text = r.nonEmptyString(urlNode, "fleet.postgres") else { return nil }
        let address: ConciergeConfig.PostgresAddress
        switch ConciergeConfig.PostgresAddress.parse(text) {
        case .success(let parsed): address = parsed
        case .failure(let error):
            r.fail("fleet.postgres", urlNode, error.message)
            return nil
        }
        var fleet = ConciergeConfig.Fleet(postgres: address, node: ProcessInfo.processInfo.hostName)
        if let n = m["name"], let s = r.nonEmptyString(n, "fleet.name") { fleet.name = s }
        if let n = m["node"], let s = r.nonEmptyString(n, "fleet.node") { fleet.node = s }
        if let n = m["key_file"], let s = r.nonEmptyString(n, "fleet.key_file") { fleet.keyFile = s }
        if let n = m["timeout"], let d = r.duration(n, "fleet.timeout") {
            if d > .zero { fleet.timeout = d } else { r.fail("fleet.timeout", n, "must be more than 0") }
        }
        if let n = m["retention"], let d = r.duration(n, "fleet.retention") {
            if d >= .seconds(60) { fleet.retention = d } else { r.fail("fleet.retention", n, "must be at least 1m") }
        }
        if let n = m["shared_cache"], let b = r.bool(n, "fleet.shared_cache") { fleet.sharedCache = b }
        return fleet
    }
}
