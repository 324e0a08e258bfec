import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// The one source of new tokens: refreshes a user's access token (`session.refresh`) or
/// fetches the app token (`session.app_token`), one token call at a time however many
/// requests wait (single flight). Token requests go straight to the upstream, never
/// through the pipeline, so a refresh can never trigger another refresh; their bodies and
/// queries (client secret, app secret, refresh token) are never logged.
///
/// A loop guard (`session.max_refreshes`, default 5 per 60 s) bounds the token calls: beyond
/// it a request that needs a new token gets ``Outcome/throttled`` without a call.
public actor TokenRefresher {
    public enum Outcome: Sendable, Equatable {
        /// Send (or replay) with this token.
        case refreshed(String)
        /// No user session any more: answer `not_logged_in`.
        case loggedOut
        /// No token could be had this time (the token endpoint failed or is unreachable):
        /// answer `unavailable`; the session, if any, is kept.
        case unavailable
        /// The loop guard refused a token call.
        case throttled
    }

    private let session: SessionState
    private let transport: any UpstreamTransport
    private let runtime: Runtime
    private let stats: ProxyStats
    private let events: EventBus
    private let lifecycle: SessionLifecycle
    private let logger: Logger
    private var inFlight: Task<Outcome, Never>?
    private var recentCalls: [ContinuousClock.Instant] = []
    private var throttling = false

    init(session: SessionState, transport: any UpstreamTransport, runtime: Runtime, stats: ProxyStats, events: EventBus,
         lifecycle: SessionLifecycle, logger: Logger) {
        self.session = session
        self.transport = transport
        self.runtime = runtime
        self.stats = stats
        self.events = events
        self.lifecycle = lifecycle
        self.logger = logger
    }

    /// A token newer than `staleToken` (`nil`: any token, e.g. the app token on first need):
    /// the current one if another request already renewed it, else the result of the one
    /// token call in flight (started if none is).
    public func freshToken(replacing staleToken: String?) async -> Outcome {
        let config = runtime.current.config.session
        let current = session.current.flatMap { $0.kind == config.kind ? $0 : nil }
        if let current, current.accessToken != staleToken { return .refreshed(current.accessToken) }
        if config.kind == .user, current == nil { return .loggedOut }
        if let inFlight { return await inFlight.value }
        guard admitCall(limit: config.maxRefreshes) else { return .throttled }
        let generation = session.generation
        let task = Task { await self.perform(current, generation: generation) }
        inFlight = task
        let outcome = await task.value
        inFlight = nil
        return outcome
    }

    /// Whether one more token call fits in the loop guard's window (and records it).
    private func admitCall(limit: ConciergeConfig.RefreshLimit) -> Bool {
        let now = ContinuousClock.now
        recentCalls.removeAll { now - $0 >= limit.within }
        guard recentCalls.count < limit.count else {
            if !throttling {
                throttling = true
                logger.warning("token calls throttled: the upstream keeps signalling expiry right after new tokens",
                               metadata: ["max_refreshes": "\(limit.count)", "within": "\(limit.within)"])
                events.publish("session.refresh_throttled", ["count": .int(Int64(limit.count)),
                                                             "within_seconds": .int(limit.within.components.seconds)])
            }
            return false
        }
        throttling = false
        recentCalls.append(now)
        return true
    }

    private func perform(_ tokens: SessionTokens?, generation: Int) async -> Outcome {
        let (rc, environment) = runtime.snapshot
        let config = rc.config.session
        if let appToken = config.appToken {
            return await fetchAppToken(appToken, rc: rc, environment: environment, generation: generation)
        }
        guard let tokens else { return .loggedOut }
        guard let refresh = config.refresh, let refreshToken = tokens.refreshToken else {
            logger.warning("token expired and no refresh is possible; dropping the session",
                           metadata: ["reason": "\(config.refresh == nil ? "no session.refresh configured" : "no refresh token")"])
            await lifecycle.logout(ifAccessToken: tokens.accessToken, reason: "refresh_failed")
            return .loggedOut
        }
        let reply: TokenReply
        switch await call(refresh, refreshToken: refreshToken, accessToken: tokens.accessToken, rc: rc, environment: environment) {
        case .answered(let judged): reply = judged
        case .failed(let reason):
            logger.warning("token refresh failed; the session is kept", metadata: ["reason": "\(reason)", "path": "\(refresh.path)"])
            return .unavailable
        }
        switch reply {
        case .good(let access, let rotated, let expiresIn):
            let now = Date()
            let newTokens = SessionTokens(accessToken: access, refreshToken: rotated ?? refreshToken, userID: tokens.userID, setAt: now,
                                          kind: .user, expiresAt: TokenReply.expiry(expiresIn, from: now),
                                          subject: tokens.userID == nil ? tokens.cacheUser : nil)
            do {
                if try await lifecycle.renewed(newTokens, ifGeneration: generation) { return .refreshed(access) }
            } catch {
                logger.error("could not store the refreshed session", metadata: ["error": "\(error)"])
                return .unavailable
            }
            // A logout or a new login happened meanwhile: it wins.
            if let now = session.current { return .refreshed(now.accessToken) }
            return .loggedOut
        case .rejected(let reason), .unusable(let reason):
            logger.warning("token refresh refused; dropping the session", metadata: ["reason": "\(reason)", "path": "\(refresh.path)"])
            await lifecycle.logout(ifAccessToken: tokens.accessToken, reason: "refresh_failed")
            return .loggedOut
        }
    }

    private func fetchAppToken(_ endpoint: ConciergeConfig.TokenEndpoint, rc: RuntimeConfig, environment: String,
                               generation: Int) async -> Outcome {
        let reason: String
        switch await call(endpoint, refreshToken: nil, accessToken: nil, rc: rc, environment: environment) {
        case .failed(let why): reason = why
        case .answered(.rejected(let why)), .answered(.unusable(let why)): reason = why
        case .answered(.good(let access, _, let expiresIn)):
            let now = Date()
            let tokens = SessionTokens(accessToken: access, refreshToken: nil, userID: nil, setAt: now, kind: .app,
                                       expiresAt: TokenReply.expiry(expiresIn, from: now))
            do {
                if try await lifecycle.renewed(tokens, ifGeneration: generation) { return .refreshed(access) }
                if let current = session.current, current.kind == .app { return .refreshed(current.accessToken) }
                return .unavailable
            } catch {
                logger.error("could not store the app token", metadata: ["error": "\(error)"])
                return .unavailable
            }
        }
        logger.warning("app token fetch failed", metadata: ["reason": "\(reason)", "path": "\(endpoint.path)"])
        return .unavailable
    }

    private enum CallResult {
        case answered(TokenReply)
        /// No judgeable reply: unreachable, timed out, or a 5xx.
        case failed(String)
    }

    /// Sends one token request and judges the reply by SPEC §9's token-reply rule.
    private func call(_ endpoint: ConciergeConfig.TokenEndpoint, refreshToken: String?, accessToken: String?,
                      rc: RuntimeConfig, environment: String) async -> CallResult {
        stats.increment(.refreshes)
        guard let upstream = rc.config.upstream(named: endpoint.upstream ?? environment) else {
            return .failed("no upstream named \(endpoint.upstream ?? environment)")
        }
        let built = TokenRequest(endpoint, refreshToken: refreshToken, accessToken: accessToken)
        let body: UpstreamRequest.Body = built.body.map { .bytes(ByteBuffer(bytes: $0)) } ?? .none
        let request = UpstreamRequest(method: built.method, url: upstream.baseURL + built.target, headers: built.headers, body: body,
                                      timeout: endpoint.timeout)
        do {
            let response = try await transport.send(request, maxBody: rc.config.limits.maxBodyBytes)
            if response.status >= 500 { return .failed("token endpoint answered HTTP \(response.status)") }
            let json = JSONValue.parse(response.body.readableBytesView)
            return .answered(TokenReply.judge(status: response.status, body: json, envelope: rc.envelope,
                                              accessToken: endpoint.accessToken, refreshToken: endpoint.refreshToken,
                                              expiresIn: endpoint.expiresIn))
        } catch {
            return .failed("\(error)")
        }
    }
}
