import Foundation
import NIOHTTP1

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
    /// `fleet`: several daemons through PostgreSQL; `nil` without the section.
    public var fleet: Fleet? = nil
    /// Values that `${VAR}` expansions took from the environment (4 characters or more):
    /// masked in every log line like tokens.
    public var secretValues: [String] = []

    public func upstream(named name: String) -> Upstream? {
        upstreams.first { $0.name == name }
    }

    public func endpoint(named name: String) -> EndpointPolicy? {
        endpoints.first { $0.name == name }
    }

    public struct Listen: Sendable {
        /// `listen.proxy`: every proxy listener, at least one (docs/local-access.md).
        public var proxyListeners: [ProxyListener]
        public var admin: SocketAddressSpec
        /// The first proxy listener's address.
        public var proxy: SocketAddressSpec { proxyListeners[0].address }

        public init(proxy: SocketAddressSpec, admin: SocketAddressSpec) {
            (proxyListeners, self.admin) = ([ProxyListener(address: proxy)], admin)
        }

        /// Extra `Host` names both listeners answer (`.example.com`: any subdomain), besides
        /// their own address, the loopback names and the upstreams' hosts.
        public var allowedHosts: [String] = []
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
        /// PEM file of the certificate authorities trusted for this (https) upstream instead of
        /// the system trust store (`upstreams.<name>.ca_file`).
        public var caFile: String? = nil
    }

    public struct Common: Sendable {
        public var headers: HTTPHeaders
        public var params: [(name: String, value: String)]

        public init(headers: HTTPHeaders, params: [(name: String, value: String)]) {
            self.headers = headers
            self.params = params
        }
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
        /// Non-numeric string codes (`"InvalidAuthentication"`); numeric strings such as
        /// `"0"` are kept with the integer codes, so `0` and `"0"` are one code.
        public var successTextCodes: Set<String> = []
        public var refreshTextCodes: Set<String> = []
        public var logoutTextCodes: Set<String> = []
        /// A 2xx JSON body without a code at `code_path` is a logical success (docs/configuration.md, dialects).
        public var successWhenMissing = false
    }

    public enum WarningAction: String, Sendable, Hashable, CaseIterable {
        case event, logout, log
    }

    public struct Session: Sendable {
        public var inject: [InjectionPoint]
        public var capture: Capture?
        public var refresh: Refresh?
        public var notLoggedIn: CannedReply
        /// An app token Concierge fetches itself (instead of `capture`/`refresh`).
        public var appToken: TokenEndpoint? = nil
        /// RFC 7009 revocation request sent on every logout but a failed refresh.
        public var revoke: TokenEndpoint? = nil
        /// HTTP statuses that mean "token expired" for a request that carried Concierge's token.
        public var refreshOnStatus: Set<Int> = []
        /// With a known expiry, refresh before sending once less than this is left.
        public var refreshAhead: Duration = .seconds(30)
        /// Loop guard: at most `count` token calls within `within`.
        public var maxRefreshes: RefreshLimit = RefreshLimit(count: 5, within: .seconds(60))
        /// `clients`: who may use the session (docs/local-access.md); `nil`: anyone.
        public var clients: SessionClients? = nil

        /// What kind of token the session holds under this configuration.
        public var kind: SessionTokens.Kind { appToken == nil ? .user : .app }
        /// The token request that renews the token: `refresh` for a user, `app_token` for an app.
        public var tokenEndpoint: TokenEndpoint? { appToken ?? refresh }
        public var maxReplays: Int { tokenEndpoint?.maxReplays ?? 3 }
    }

    public struct RefreshLimit: Sendable, Equatable {
        public var count: Int
        public var within: Duration
    }

    public struct Capture: Sendable {
        public var endpoint: String
        public var accessToken: String
        public var refreshToken: String?
        public var userID: String?
        /// Path of the token lifetime in seconds (`expires_in`): gives the session an expiry.
        public var expiresIn: String? = nil
        /// Remove the captured token fields from the client's copy of the reply.
        public var redact = false
    }

    public typealias Refresh = TokenEndpoint

    /// A request Concierge sends itself to get a token (`session.refresh`,
    /// `session.app_token`), straight to the upstream, never through the pipeline.
    public struct TokenEndpoint: Sendable {
        public enum Encoding: String, Sendable, CaseIterable { case json, form }

        public var method: String
        public var path: String
        public var upstream: String?
        public var body: JSONValue?
        public var accessToken: String
        public var refreshToken: String?
        public var maxReplays: Int
        public var timeout: Duration
        /// How `body` is sent (default JSON).
        public var encoding: Encoding = .json
        /// Extra request headers; values templated like `body`.
        public var headers = HTTPHeaders()
        /// Query parameters; values templated like `body`.
        public var query: [(name: String, value: String)] = []
        /// Path of the token lifetime in seconds in the reply.
        public var expiresIn: String? = nil
        /// RFC 6749 `error` values (or business codes) of a refused token request that end the
        /// session; any other refusal keeps it.
        public var logoutErrors: Set<String> = ["invalid_grant"]
        /// `error` values or business codes of a refused token request that are transient
        /// (`retry_errors`, e.g. WeChat's `-1` "system busy"): the session is kept.
        public var retryErrors: Set<String> = []
        /// The longest pause between token requests after failed ones (`max_backoff`).
        public var maxBackoff: Duration = .seconds(60)
        /// The client's credentials (RFC 6749 §2.3.1), sent as `clientAuth` says.
        public var clientID: String? = nil
        public var clientSecret: String? = nil
        public var clientAuth: ClientAuth = .post

        public enum ClientAuth: String, Sendable, CaseIterable {
            /// `client_id` and `client_secret` as body fields.
            case post
            /// `Authorization: Basic` over the form-encoded id and secret.
            case basic
        }
    }

    public struct Cache: Sendable {
        public var version: Int
        public var volatileParams: Set<String>
        public var defaultTTL: Duration
        /// `cache.mode`: how requests no endpoint matches are cached (`ttl`: not at all).
        public var mode: EndpointPolicy.CachePolicy.Mode = .ttl
        /// `cache.max_ttl`: with `mode: http`, the cap on freshness for those requests.
        public var maxTTL: Duration? = nil
        /// `cache.store_set_cookie` and `cache.key_headers`, for those requests.
        public var storeSetCookie = false
        public var keyHeaders: [String] = []

        /// The policy for requests no endpoint matches.
        public var passThrough: EndpointPolicy {
            var policy = EndpointPolicy.passThrough
            if mode == .http {
                policy.cache.mode = .http
                policy.cache.ttl = defaultTTL
                policy.cache.maxTTL = maxTTL
                policy.cache.storeSetCookie = storeSetCookie
                policy.cache.keyHeaders = keyHeaders
            }
            return policy
        }
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
        /// Longest pause while a request body arrives (408 and an aborted upstream request).
        public var bodyTimeout: Duration = .seconds(30)
        /// Forward header names containing `_` (dropped by default, like nginx).
        public var underscoresInHeaders: Bool = false
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
