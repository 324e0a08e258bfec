import Foundation

/// The whole validated configuration (docs/configuration.md). Built only by ``ConfigLoader``, so every
/// value here has passed validation: upstream names exist, regexes compile, durations parse.
public struct ConciergeConfig: Sendable {
    public var listen: Listen
    public var admin: Admin
    public var storage: Storage
    /// Named upstream base URLs in file order.
    public var upstreams: [Upstream]
    /// Name of the default upstream (the "environment").
    public var environment: String
    public var common: Common
    public var envelope: Envelope
    public var session: Session
    public var cache: Cache
    public var endpoints: [EndpointPolicy]
    public var log: Log
    public var limits: Limits
    public var signing: SigningConfig?
    public var hooks: [Hook]

    public func upstream(named name: String) -> Upstream? {
        upstreams.first { $0.name == name }
    }

    public func endpoint(named name: String) -> EndpointPolicy? {
        endpoints.first { $0.name == name }
    }

    public struct Listen: Sendable {
        public var proxy: SocketAddressSpec
        public var admin: SocketAddressSpec
    }

    public struct Admin: Sendable {
        public var token: String?
        public var tokenFile: String?
    }

    public struct Storage: Sendable {
        public var path: String
        public var maxBytes: Int
        public var memoryBytes: Int
    }

    public struct Upstream: Sendable, Hashable {
        public var name: String
        /// Base URL without a trailing slash, e.g. `https://api.example.com`.
        public var baseURL: String
        public var scheme: String
        public var host: String
        public var port: Int
        /// Path prefix of the base URL ("" or "/v1").
        public var basePath: String
    }

    public struct Common: Sendable {
        public var headers: [(name: String, value: String)]
        public var params: [(name: String, value: String)]
    }

    public struct Envelope: Sendable {
        public var codePath: String
        public var messagePath: String
        public var successCodes: Set<Int>
        public var refreshCodes: Set<Int>
        public var logoutCodes: Set<Int>
        public var unavailable: CannedReply
        public var invalid: CannedReply
        public var warningCodes: [Int: Set<WarningAction>]
    }

    public enum WarningAction: String, Sendable, Hashable, CaseIterable {
        case event, logout, log
    }

    public struct Session: Sendable {
        public var inject: [InjectionPoint]
        public var capture: Capture?
        public var refresh: Refresh?
        public var notLoggedIn: CannedReply
    }

    public struct Capture: Sendable {
        public var endpoint: String
        public var accessToken: String
        public var refreshToken: String?
        public var userID: String?
    }

    public struct Refresh: Sendable {
        public var method: String
        public var path: String
        public var upstream: String?
        public var body: JSONValue?
        public var accessToken: String
        public var refreshToken: String?
        public var maxReplays: Int
        public var timeout: Duration
    }

    public struct Cache: Sendable {
        public var version: Int
        public var volatileParams: Set<String>
        public var defaultTTL: Duration
    }

    public struct Log: Sendable {
        public enum Format: String, Sendable { case text, json }
        public enum Level: String, Sendable { case debug, info, warning, error }
        public var format: Format
        public var level: Level
        public var requests: Bool
    }

    /// Request limits of the proxy listener (`limits:`) and batch concurrency.
    public struct Limits: Sendable {
        public var maxHeaderBytes: Int
        public var maxBodyBytes: Int
        public var headerTimeout: Duration
        public var defaultTimeout: Duration
        public var batchConcurrency: Int
        public var shutdownGrace: Duration
    }

    public struct Hook: Sendable {
        public var url: String
        public var events: Set<String>
    }
}

/// Where a listener binds: `host:port` or `unix:/path`.
public enum SocketAddressSpec: Sendable, Hashable, CustomStringConvertible {
    case tcp(host: String, port: Int)
    case unix(path: String)

    public var description: String {
        switch self {
        case .tcp(let host, let port): return "\(host):\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }

    /// Parses `127.0.0.1:8080`, `[::1]:8080`, `:8080` or `unix:/run/x.sock`.
    public static func parse(_ text: String) -> SocketAddressSpec? {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            return path.isEmpty ? nil : .unix(path: path)
        }
        guard let colon = text.lastIndex(of: ":") else { return nil }
        var host = String(text[..<colon])
        guard let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.isEmpty { host = "127.0.0.1" }
        return .tcp(host: host, port: port)
    }
}

/// A fixed reply Concierge gives itself (`not_logged_in`, `unavailable`, `invalid`).
public struct CannedReply: Sendable {
    public var status: Int
    public var body: JSONValue

    public init(status: Int, body: JSONValue) {
        self.status = status
        self.body = body
    }
}

/// One place the access token goes into an upstream request.
public enum InjectionPoint: Sendable, Hashable {
    case query(name: String)
    case header(name: String, format: String)
    case body(field: String)
}

/// Request-signing settings (`signing:` and `endpoints[].sign`).
public struct SigningConfig: Sendable {
    public enum Algorithm: String, Sendable, CaseIterable {
        case hmacSHA256 = "hmac-sha256"
        case hmacSHA1 = "hmac-sha1"
        case md5Salted = "md5-salted"
    }

    public enum Encoding: String, Sendable, CaseIterable { case hex, base64 }

    public var secret: String
    public var algorithm: Algorithm
    public var encoding: Encoding
    public var param: String
    public var timestampParam: String?
    public var nonceParam: String?
}
