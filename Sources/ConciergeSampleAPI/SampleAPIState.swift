import Synchronization

/// Everything the sample API remembers: call counters, the last request per path and the
/// tokens it issued. Shared between the request handlers and the tests that inspect them.
public final class SampleAPIState: Sendable {
    private struct Storage {
        var callsByPath: [String: Int] = [:]
        var totalCalls = 0
        var refreshCalls = 0
        var tokenCallsByApp: [String: Int] = [:]
        var loginCalls = 0
        var expirySignals = 0
        var lastRequestByPath: [String: SampleRequestRecord] = [:]
        /// The last ``recentLimit`` requests of each path, oldest first.
        var recentByPath: [String: [SampleRequestRecord]] = [:]
        var tokens = TokenRegistry()
        var tokenFault: TokenEndpointFault?
    }

    /// How the token endpoint fails refresh grants (OAuth2's, and the seed dialect's
    /// `POST /api/token/refresh`): a provider in trouble, for tests.
    public enum TokenEndpointFault: Sendable, Equatable {
        /// 429 with `Retry-After`.
        case rateLimited(retryAfter: Int)
        /// 503, as a provider that is down behind its load balancer.
        case serverError
        /// 401 `invalid_client`, as when Concierge's client secret was rotated.
        case invalidClient
        /// HTTP 200 with a business code that says "busy, try again" (`{"code": N}`).
        case busy(code: Int)
    }

    private let storage = Mutex(Storage())
    private let clock = ContinuousClock()
    /// How far tests moved the API's clock past the real one (``advanceClock(by:)``).
    private let clockOffset = Mutex(Duration.zero)

    /// The API's time: the real clock plus what tests advanced it by.
    private var now: ContinuousClock.Instant { clock.now + clockOffset.withLock { $0 } }

    /// Moves the API's clock forward (token lifetimes pass without waiting).
    public func advanceClock(by duration: Duration) {
        clockOffset.withLock { $0 += duration }
    }

    public init() {}

    /// Requests that reached `GET /api/gate`, which answers once this many have (see ``SampleAPIRoutes/gate(_:)``).
    private let gateArrivals = Mutex(0)

    /// One more request at the gate; how many have arrived.
    func arriveAtGate() -> Int { gateArrivals.withLock { $0 += 1; return $0 } }

    var gateCount: Int { gateArrivals.withLock { $0 } }

    // MARK: Inspection

    /// Number of requests whose path equals `path` (any method).
    public func calls(_ path: String) -> Int {
        storage.withLock { $0.callsByPath[path, default: 0] }
    }

    /// Number of requests of any path.
    public var totalCalls: Int {
        storage.withLock { $0.totalCalls }
    }

    /// Number of `POST /api/token/refresh` requests, valid or not.
    public var refreshCalls: Int {
        storage.withLock { $0.refreshCalls }
    }

    /// Number of token calls of the dialects: OAuth2 refresh grants, WeChat and DingTalk app
    /// token fetches (the envelope dialect counts its refreshes in ``refreshCalls`` too).
    public var tokenCalls: Int {
        storage.withLock { $0.refreshCalls }
    }

    /// Number of replies that told a client its token was expired or invalid (801, OAuth2's
    /// 401, WeChat's 40001/42001, DingTalk's InvalidAuthentication).
    public var expirySignals: Int {
        storage.withLock { $0.expirySignals }
    }

    /// Every access and refresh token handed out so far.
    public var everyTokenIssued: [String] {
        storage.withLock { $0.tokens.everyTokenIssued }
    }

    /// Number of `POST /api/login` requests, successful or not.
    public var loginCalls: Int {
        storage.withLock { $0.loginCalls }
    }

    /// Request counts keyed by path.
    public var callsByPath: [String: Int] {
        storage.withLock { $0.callsByPath }
    }

    /// How many of each path's requests ``recentRequests(_:)`` keeps.
    public static let recentLimit = 64

    /// The last ``recentLimit`` requests seen on `path`, oldest first.
    public func recentRequests(_ path: String) -> [SampleRequestRecord] {
        storage.withLock { $0.recentByPath[path] ?? [] }
    }

    /// The most recent request seen on `path`.
    public func lastRequest(_ path: String) -> SampleRequestRecord? {
        storage.withLock { $0.lastRequestByPath[path] }
    }

    // MARK: Control

    /// From now on refresh grants fail this way (`nil`: they work again).
    public func setTokenEndpointFault(_ fault: TokenEndpointFault?) {
        storage.withLock { $0.tokenFault = fault }
    }

    public var tokenEndpointFault: TokenEndpointFault? {
        storage.withLock { $0.tokenFault }
    }

    /// Every access token issued so far answers code 801 from now on.
    public func expireAllAccessTokens() {
        storage.withLock { $0.tokens.expireAllAccessTokens() }
    }

    /// Every token issued so far is revoked: access tokens answer 802, refresh tokens fail.
    /// RFC 7009 revocation of one token; whether it was known.
    @discardableResult
    public func revoke(token: String) -> Bool {
        storage.withLock { $0.tokens.revoke(token: token) }
    }

    /// Refresh tokens the OAuth2 token endpoint would still accept.
    public var liveRefreshTokens: Int {
        storage.withLock { $0.tokens.liveRefreshTokens }
    }

    public func revokeAllSessions() {
        storage.withLock { $0.tokens.revokeAll() }
    }

    /// Clears counters and last requests; issued tokens stay valid.
    public func reset() {
        storage.withLock { storage in
            storage.callsByPath = [:]
            storage.totalCalls = 0
            storage.refreshCalls = 0
            storage.loginCalls = 0
            storage.expirySignals = 0
            storage.lastRequestByPath = [:]
            storage.recentByPath = [:]
        }
    }

    // MARK: Used by the handlers

    /// Counts `request` and remembers it as the last one on its path.
    func record(_ request: SampleRequestRecord) {
        storage.withLock { storage in
            storage.totalCalls += 1
            storage.callsByPath[request.path, default: 0] += 1
            storage.lastRequestByPath[request.path] = request
            storage.recentByPath[request.path, default: []].append(request)
            if storage.recentByPath[request.path]!.count > Self.recentLimit { storage.recentByPath[request.path]!.removeFirst() }
        }
    }

    func countRefresh(app: String? = nil) {
        storage.withLock { s in
            s.refreshCalls += 1
            if let app { s.tokenCallsByApp[app, default: 0] += 1 }
        }
    }

    /// WeChat token fetches that named the app id `app` (valid or not).
    public func tokenCalls(app: String) -> Int {
        storage.withLock { $0.tokenCallsByApp[app, default: 0] }
    }

    /// An app token of the extra app id `app` (``SampleAPIConfiguration/moreAppIDs``): a new
    /// one supersedes only that app id's earlier tokens.
    func issueAppToken(app: String) -> String {
        let now = self.now
        return storage.withLock { $0.tokens.issueAppToken(at: now, app: app) }
    }

    func countExpirySignal() {
        storage.withLock { $0.expirySignals += 1 }
    }

    func issueAppToken(supersede: Bool) -> String {
        let now = self.now
        return storage.withLock { $0.tokens.issueAppToken(at: now, supersede: supersede) }
    }

    func countLogin() {
        storage.withLock { $0.loginCalls += 1 }
    }

    func issueTokens(for userID: String) -> TokenRegistry.TokenPair {
        let now = self.now
        return storage.withLock { $0.tokens.issue(for: userID, at: now) }
    }

    func rotateTokens(refreshToken: String) -> TokenRegistry.TokenPair? {
        let now = self.now
        return storage.withLock { $0.tokens.rotate(refreshToken: refreshToken, at: now) }
    }

    func status(ofAccessToken token: String, ttl: Duration) -> TokenRegistry.AccessTokenStatus {
        let now = self.now
        return storage.withLock { $0.tokens.status(ofAccessToken: token, at: now, ttl: ttl) }
    }
}
