import NIOCore
import NIOHTTP1

/// A client request after the pure steps of the request path (docs/architecture.md, step 2): routed
/// once, common params added, the login guard passed, the token to inject chosen, and the
/// cache scope and key decided. Everything later (cache, upstream, session) starts from it.
public struct PreparedRequest: Sendable {
    /// What a prepared request holds. A request is copied into each step of a miss (the
    /// exchange's callback, the coalescer, the store): held behind one reference and copied on
    /// write, such a copy is one retain instead of one for each of the strings, headers and
    /// configuration values below.
    struct Fields: Sendable {
        /// The request as it goes upstream before the token and the signature.
        var request: ProxyRequest
        var endpoint: EndpointPolicy
        /// The configuration this request runs under, start to end (a reload does not change it).
        var config: RuntimeConfig
        var upstream: ConciergeConfig.Upstream
        /// The session token to inject, if this endpoint takes one. With an app token not
        /// fetched yet it is `nil` while ``injects`` is true: the exchange fetches one first.
        var token: String?
        /// The endpoint takes Concierge's token.
        var injects: Bool
        /// The cache key, for a cacheable request whose reply may be stored.
        var hashedCacheKey: HashedKey?
        var scope: CacheScope
        /// The client asked to skip the cache (`Cache-Control: no-cache`, `X-Concierge-Cache: bypass`).
        var bypass: Bool
        /// The client's headers as received (the upstream request starts from them).
        var originalHeaders: HTTPHeaders
        /// The client's target as received (path and query).
        var receivedTarget: String
        var clientAddress: String?
        /// The live session (or `per_client` instance) this request uses.
        var sessionSlot: (any SessionSlot)? = nil
    }

    /// The fields' box. `@unchecked Sendable`: its one mutable property is written only
    /// through ``unique()``, that is while this is the only reference to the box (a request
    /// that was copied, and so may be shared with another thread, is copied before a write),
    /// so a box another thread can see is never written: the same rule as `Array`'s buffer.
    private final class Storage: @unchecked Sendable {
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var storage: Storage

    init(_ fields: Fields) { storage = Storage(fields) }

    /// Copies the box first when another request shares it.
    private mutating func unique() {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(storage.fields) }
    }

    public var request: ProxyRequest {
        _read { yield storage.fields.request }
        _modify { unique(); yield &storage.fields.request }
    }
    public var endpoint: EndpointPolicy {
        _read { yield storage.fields.endpoint }
        _modify { unique(); yield &storage.fields.endpoint }
    }
    public var config: RuntimeConfig {
        _read { yield storage.fields.config }
        _modify { unique(); yield &storage.fields.config }
    }
    public var upstream: ConciergeConfig.Upstream {
        _read { yield storage.fields.upstream }
        _modify { unique(); yield &storage.fields.upstream }
    }
    public var token: String? {
        _read { yield storage.fields.token }
        _modify { unique(); yield &storage.fields.token }
    }
    public var injects: Bool {
        _read { yield storage.fields.injects }
        _modify { unique(); yield &storage.fields.injects }
    }
    public var cacheKey: String? {
        get { storage.fields.hashedCacheKey?.text }
        set {
            unique()
            storage.fields.hashedCacheKey = newValue.map { HashedKey($0) }
        }
    }
    /// ``cacheKey`` with its hash, made once.
    public var hashedCacheKey: HashedKey? { storage.fields.hashedCacheKey }
    public var scope: CacheScope {
        _read { yield storage.fields.scope }
        _modify { unique(); yield &storage.fields.scope }
    }
    public var bypass: Bool {
        _read { yield storage.fields.bypass }
        _modify { unique(); yield &storage.fields.bypass }
    }
    public var originalHeaders: HTTPHeaders {
        _read { yield storage.fields.originalHeaders }
        _modify { unique(); yield &storage.fields.originalHeaders }
    }
    public var receivedTarget: String {
        _read { yield storage.fields.receivedTarget }
        _modify { unique(); yield &storage.fields.receivedTarget }
    }
    public var clientAddress: String? {
        _read { yield storage.fields.clientAddress }
        _modify { unique(); yield &storage.fields.clientAddress }
    }
    /// The live session (or `per_client` instance) this request uses; `nil`: `default`'s.
    public var sessionSlot: (any SessionSlot)? { storage.fields.sessionSlot }

    /// What preparing a request leads to.
    public enum Outcome: Sendable {
        case ready(PreparedRequest)
        /// `login: required` without a session: answered `session.not_logged_in`, no I/O.
        case notLoggedIn(endpoint: String)
    }

    /// The client's request as the listener framed it.
    public struct Received: Sendable {
        public var method: String
        public var target: String
        public var headers: HTTPHeaders
        /// The buffered body; `nil` when it streams to the upstream.
        public var body: ByteBuffer?
        public var clientAddress: String?

        public init(method: String, target: String, headers: HTTPHeaders, body: ByteBuffer?, clientAddress: String?) {
            (self.method, self.target, self.headers) = (method, target, headers)
            (self.body, self.clientAddress) = (body, clientAddress)
        }
    }

    /// A request's endpoint under one configuration snapshot: decided once, when the head
    /// arrives (it also says whether the body is streamed), and used for the whole request.
    /// A class: a route travels with its request (the head's memo, the incoming request, the
    /// hit memo), and a copy is then one retain.
    ///
    /// The session is chosen here too, before the cache key: the endpoint's `session`, else
    /// the listener's; then ``config`` is that session's view. Otherwise, with
    /// `listen.session_header`, the request chooses it (``selectsByHeader``), else it is `default`.
    public final class Route: Sendable {
        /// The configuration, as the view of the session chosen at routing.
        public let config: RuntimeConfig
        public let environment: String
        public let endpoint: EndpointPolicy
        /// The request's `Concierge-Session-Name` chooses the session (``init(_:session:)``).
        public let selectsByHeader: Bool

        public init(method: String, target: String, config: RuntimeConfig, environment: String, listenerSession: String? = nil) {
            let path = target.utf8.firstIndex(of: UInt8(ascii: "?")).map { String(target[..<$0]) } ?? target
            endpoint = config.router.route(method: method, path: path)
            self.environment = environment
            if let named = endpoint.session ?? listenerSession {
                self.config = config.view(forSession: named) ?? config
                selectsByHeader = false
            } else {
                self.config = config
                selectsByHeader = config.settings.listen.sessionHeader
            }
        }

        /// `route` under the session `view` a request chose.
        public init(_ route: Route, session view: RuntimeConfig) {
            (config, environment, endpoint, selectsByHeader) = (view, route.environment, route.endpoint, false)
        }

        /// Buffered endpoints (envelope or cacheable) read the body; others stream it through.
        public var streamsBody: Bool { !endpoint.envelope && !endpoint.isCacheable }
    }

    /// Runs the pure steps on a routed request.
    /// - Parameters:
    ///   - session: the stored session (one of the other kind is ignored).
    ///   - slot: the live session it comes from (`nil`: the route's), whose identity is part of
    ///     user- and session-scoped keys.
    public static func prepare(_ received: Received, route: Route, session stored: SessionTokens?,
                               slot: (any SessionSlot)? = nil) -> Outcome {
        let (rc, environment, endpoint) = (route.config, route.environment, route.endpoint)
        // `rc.settings` is read in place: a local copy of the configuration retains and
        // releases every reference it holds (about 2k instructions a request).
        let target = received.target.isEmpty ? "/" : received.target
        var request = ProxyRequest(method: received.method, target: target, headers: received.headers,
                                   body: body(received, buffered: endpoint.envelope || endpoint.isCacheable))
        rc.commonParams.apply(to: &request)

        // A session of the other kind (left by an earlier configuration) is not used.
        let session = stored.flatMap { $0.kind == rc.settings.session.kind ? $0 : nil }
        let appToken = rc.settings.session.kind == .app
        guard appToken || rc.loginGuard.admits(endpoint, session: session) else {
            return .notLoggedIn(endpoint: endpoint.name)
        }
        let injects = endpoint.login != .none && (session != nil || appToken) && !rc.injector.points.isEmpty
        let upstream = rc.settings.upstream(named: endpoint.upstream ?? environment) ?? rc.settings.upstreams[0]
        var prepared = PreparedRequest(Fields(request: request, endpoint: endpoint, config: rc, upstream: upstream,
                                       token: injects ? session?.accessToken : nil, injects: injects, hashedCacheKey: nil,
                                       scope: .notStorable, bypass: bypasses(received.headers),
                                       originalHeaders: received.headers, receivedTarget: target, clientAddress: received.clientAddress,
                                       sessionSlot: slot ?? rc.sessionSlot))
        if endpoint.isCacheable, received.body != nil {
            // With `mode: http` the reply decides whether a reply to the client's own
            // `Authorization` is shared (RFC 9111 §3.5: `HTTPCaching.sharesAuthorizedReplies`).
            let authorizationReplaced = injects && rc.injector.replacesAuthorization || endpoint.httpCaching
            prepared.scope = CacheScope.of(endpoint, injects: injects, appToken: appToken, session: session,
                                           sessionName: rc.sessionName, identity: (slot ?? rc.sessionSlot)?.cacheIdentity,
                                           clientToken: !injects && rc.injector.carriesToken(request),
                                           clientCredentials: CacheScope.carriesClientCredentials(received.headers,
                                                                                                 authorizationReplaced: authorizationReplaced))
            if prepared.scope != .notStorable {
                let keyHeaders = endpoint.cache.keyHeaders
                prepared.cacheKey = keyHeaders.isEmpty ? prepared.makeCacheKey()
                    : prepared.makeCacheKey() + UnkeyedRequestFields.keyPart(received.headers, keyHeaders: keyHeaders)
            }
        }
        return .ready(prepared)
    }

    private func makeCacheKey() -> String {
        // With HTTP caching a `HEAD` is answered from the stored `GET` (RFC 9110 §9.3.2).
        let method = endpoint.httpCaching && request.method == "HEAD" ? "GET" : request.method
        let version = endpoint.cache.version ?? config.settings.cache.version
        if let rawQuery = request.rawQuery {
            // The query as received, unchanged by any step: its params read from its text.
            return CacheKey.make(method: method, upstreamBaseURL: upstream.baseURL, path: request.path, rawQuery: rawQuery,
                                 body: request.body, excluding: config.excludedKeyParams, userID: scope.userID, version: version)
        }
        return CacheKey.make(method: method, upstreamBaseURL: upstream.baseURL, path: request.path, params: request.query,
                             body: request.body, excluding: config.excludedKeyParams, userID: scope.userID, version: version)
    }

    /// The key a `GET` of `target` on this request's upstream, endpoint and scope is stored
    /// under (common params added as to any request): what a `POST` to a URL, or its
    /// `Location`, invalidates in `mode: http`.
    public func getKey(target: String) -> String {
        var get = ProxyRequest(method: "GET", target: target)
        config.commonParams.apply(to: &get)
        return CacheKey.make(method: "GET", upstreamBaseURL: upstream.baseURL, path: get.path, params: get.query,
                             excluding: config.excludedKeyParams, userID: scope.userID,
                             version: endpoint.cache.version ?? config.settings.cache.version)
    }

    /// Buffered endpoints (envelope or cacheable) parse their body for parameters; others
    /// pass it through untouched.
    private static func body(_ received: Received, buffered: Bool) -> RequestBody {
        guard let buffer = received.body, buffer.readableBytes > 0 else { return .empty }
        let bytes = Array(buffer.readableBytesView)
        return buffered ? RequestBody.parse(bytes, contentType: received.headers.first(name: "content-type")) : .opaque(bytes)
    }

    /// `Cache-Control: no-cache` or `X-Concierge-Cache: bypass` (any case): read on every
    /// request, so by bytes, without building strings.
    static func bypasses(_ headers: HTTPHeaders) -> Bool {
        for (name, value) in headers {
            if ASCIICase.equals(name, lowercase: "cache-control"), ASCIICase.contains(value, lowercase: "no-cache") { return true }
            if ASCIICase.equals(name, lowercase: "x-concierge-cache"), ASCIICase.equals(value, lowercase: "bypass") { return true }
        }
        return false
    }
}
