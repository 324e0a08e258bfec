import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Tracing

/// The one source of new tokens: refreshes a user's access token (`session.refresh`) or
/// fetches the app token (`session.app_token`), one token call at a time however many
/// requests wait (single flight). Token requests go straight to the upstream, never
/// through the pipeline, so a refresh can never trigger another refresh; their bodies and
/// queries (client secret, app secret, refresh token) are never logged.
///
/// Only the provider's definite "no" ends a session (``TokenReply/rejected(reason:)``:
/// `invalid_grant`, a failure code below 500, a logout code, a listed error): a provider that
/// is down, slow, rate-limiting or refusing Concierge's own client credentials makes the
/// request that needed the token `unavailable` (with `Retry-After`) and keeps the session.
/// Failed token calls are paced (``TokenRequestPacing``, kept in ``SessionState``): until the
/// pause they set has passed, a request that needs a new token is answered `unavailable` with
/// `Retry-After` without a call.
///
/// A loop guard (`session.max_refreshes`, default 5 per 60 s) counts the token calls that
/// succeeded and whose new token met an expiry signal at once (an upstream that keeps
/// refusing fresh tokens); failed calls never count. Beyond it a request that needs a new
/// token gets ``Outcome/throttled(retryAfter:)`` without a call.
public actor TokenRefresher {
    public enum Outcome: Sendable, Equatable {
        /// Send (or replay) with this token.
        case refreshed(String)
        /// No user session any more: answer `not_logged_in`.
        case loggedOut
        /// No token could be had this time (the token endpoint failed, refused or is
        /// unreachable): answer `unavailable`, with `Retry-After` when known; the session, if
        /// any, is kept.
        case unavailable(retryAfter: Int?)
        /// The loop guard refused a token call: answer `unavailable`, retry after that long.
        case throttled(retryAfter: Int)

        /// When to try again, for an outcome that got no token.
        public var retryAfter: Int? {
            switch self {
            case .unavailable(let seconds): return seconds
            case .throttled(let seconds): return seconds
            case .refreshed, .loggedOut: return nil
            }
        }
    }

    private let session: SessionState
    private let transport: any UpstreamTransport
    private let runtime: Runtime
    private let stats: ProxyStats
    private let events: EventBus
    private let lifecycle: SessionLifecycle
    private let logger: Logger
    /// The wall clock tokens are stamped by (the session lifecycle's).
    nonisolated let clock: WallClock
    private var inFlight: Task<Outcome, Never>?
    /// The span of the token call in flight, when the request that started it is traced:
    /// every traced request that waits for the call links to it.
    private var inFlightSpan: InstrumentationContext?
    /// When a fresh token from a successful call met an expiry signal (the loop guard's count).
    private var loopSignals: [ContinuousClock.Instant] = []
    /// The last token a call of this refresher obtained.
    private var lastIssued: String?
    private var throttling = false
    /// When Concierge's own client credentials were last reported refused (once a minute).
    private var lastCredentialsError: ContinuousClock.Instant?

    init(session: SessionState, transport: any UpstreamTransport, runtime: Runtime, stats: ProxyStats, events: EventBus,
         lifecycle: SessionLifecycle, logger: Logger) {
        self.session = session
        self.transport = transport
        self.runtime = runtime
        self.stats = stats
        self.events = events
        self.lifecycle = lifecycle
        self.logger = logger
        clock = lifecycle.clock
    }

    /// A token newer than `staleToken` (`nil`: any token, e.g. the app token on first need):
    /// the current one if another request already renewed it, else the result of the one
    /// token call in flight (started if none is).
    /// - Parameter expirySignal: the upstream refused `staleToken` (an expiry signal), rather
    ///   than the token nearing its known expiry (`refresh_ahead`).
    public func freshToken(replacing staleToken: String?, expirySignal: Bool = true) async -> Outcome {
        await freshToken(replacing: staleToken, expirySignal: expirySignal, trace: nil)
    }

    /// ``freshToken(replacing:expirySignal:)`` for a request that may be traced: the token call
    /// it starts is a span of its trace (`token request`), and its server span links to the
    /// token call it waited for, whoever started it.
    func freshToken(replacing staleToken: String?, expirySignal: Bool = true, trace: RequestTrace?) async -> Outcome {
        let config = runtime.current.sessionSettings(lifecycle.name)
        let current = session.current.flatMap { $0.kind == config.kind ? $0 : nil }
        if let current, current.accessToken != staleToken { return .refreshed(current.accessToken) }
        if config.kind == .user, current == nil { return .loggedOut }
        if let inFlight {
            if let trace, let inFlightSpan { trace.link(inFlightSpan, ["concierge.link": "waited for token request"]) }
            return await inFlight.value
        }
        if let wait = session.pacing.retryAfter(at: clock.now) { return .unavailable(retryAfter: wait) }
        let now = ContinuousClock.now
        if expirySignal, let staleToken, staleToken == lastIssued { loopSignals.append(now) }
        if let wait = throttle(limit: config.maxRefreshes, now: now) {
            stats.increment(.loopGuardTrips)
            return .throttled(retryAfter: wait)
        }
        let generation = session.generation
        let loopGuard = expirySignal ? config.maxRefreshes : nil
        let span = trace?.child("token request", attributes: ["concierge.token": config.kind == .user ? "refresh" : "app_token"])
        let lockWait = lifecycle.fleet == nil ? nil : span.flatMap { span in trace.map { $0.lockWait(under: span) } }
        // Unstructured because the one token call is shared by every waiter: a waiter cancelled
        // (its client gone) must not cancel the call the others await.
        // Its log lines carry the ids of its own span when traced.
        let logSource = trace.flatMap { trace in span.map { TraceLogContext.Source(span: $0, tracer: trace.tracer) } }
        let task = Task {
            await TraceLogContext.$current.withValue(logSource) {
                await self.coordinated(current, stale: staleToken, loopGuard: loopGuard, generation: generation, lockWait: lockWait)
            }
        }
        inFlight = task
        if let span {
            inFlightSpan = span.context
            trace?.link(span.context, ["concierge.link": "waited for token request"])
        }
        let outcome = await task.value
        inFlight = nil
        inFlightSpan = nil
        if let span { RequestTrace.end(span, outcome) }
        // The fleet's loop guard, counted across nodes, refused it (``FleetSession/renew``).
        if case .throttled = outcome { stats.increment(.loopGuardTrips) }
        if case .refreshed(let token) = outcome { lastIssued = token }
        return outcome
    }

    /// `nil` when a token call fits in the loop guard's window, else the seconds until one does.
    private func throttle(limit: ConciergeConfig.RefreshLimit, now: ContinuousClock.Instant) -> Int? {
        loopSignals.removeAll { now - $0 >= limit.within }
        guard loopSignals.count >= limit.count, let oldest = loopSignals.first else {
            throttling = false
            return nil
        }
        if !throttling {
            throttling = true
            logger.warning("token calls throttled: the upstream keeps signalling expiry right after new tokens",
                           metadata: ["max_refreshes": "\(limit.count)", "within": "\(limit.within)"])
            events.publish("session.refresh_throttled", lifecycle.eventData(["count": .int(Int64(limit.count)),
                                                                             "within_seconds": .int(limit.within.components.seconds)]))
        }
        return max(1, Self.seconds(oldest + limit.within - now))
    }

    static func seconds(_ duration: Duration) -> Int {
        max(0, Int(duration.components.seconds) + (duration.components.attoseconds > 0 ? 1 : 0))
    }

    /// A failed token call that keeps the session: logged, and paced (no token call before the
    /// pause it sets, which the reply's `Retry-After` gives).
    private func refused(_ reason: String, _ failure: TokenRequestPacing.Failure, path: String, maxBackoff: Duration) -> Outcome {
        let now = clock.now
        stats.increment(.tokenRequestFailures)
        stats.sessions.increment(.tokenRequestFailures, session: lifecycle.name)
        if failure == .credentialsRefused {
            let instant = ContinuousClock.now
            if lastCredentialsError.map({ instant - $0 >= .seconds(60) }) ?? true {
                lastCredentialsError = instant
                logger.error("the token endpoint refused Concierge's client credentials (client_id / client_secret); sessions are kept",
                             metadata: ["reason": "\(reason)", "path": "\(path)"])
            }
        } else {
            logger.warning("token request failed; the session is kept", metadata: ["reason": "\(reason)", "path": "\(path)"])
        }
        let wait = session.updatePacing { pacing in
            pacing.failed(failure, at: now, maxBackoff: maxBackoff)
            return pacing.retryAfter(at: now)
        }
        return .unavailable(retryAfter: wait)
    }

    /// How a refusal that keeps the session is paced.
    private static func failure(retryAfter: Int?, clientCredentials: Bool) -> TokenRequestPacing.Failure {
        if clientCredentials { return .credentialsRefused }
        return retryAfter.map { .retryAfter(seconds: $0) } ?? .transient
    }


    /// In a fleet, the token request is made once for every node (``FleetSession/renew``); when
    /// PostgreSQL does not answer, this node renews alone and hands the result to the fleet later.
    /// - Parameter loopGuard: the loop guard to count against fleet-wide, when an expiry signal
    ///   (not `refresh_ahead`) asked for the renewal.
    /// - Parameter lockWait: a traced token request's `fleet lock wait` span, ended when the
    ///   token request under the row's lock begins or the fleet's renewal ends without one.
    private func coordinated(_ current: SessionTokens?, stale: String?, loopGuard: ConciergeConfig.RefreshLimit?,
                             generation: Int, lockWait: OnceEndedSpan? = nil) async -> Outcome {
        defer { lockWait?.end() }
        guard let fleet = lifecycle.fleet else { return await perform(current, generation: generation) }
        // A refusal this node got while renewing alone stands until the fleet's token is known.
        if let held = await fleet.refusalOutcome() { return held }
        let settings = runtime.current
        if let outcome = await fleet.renew(stale: stale, kind: settings.sessionSettings(lifecycle.name).kind, loopGuard: loopGuard,
                                           tokenTimeout: settings.settings.limits.defaultTimeout,
                                           fetch: { lockWait?.end(); return await self.perform(current, generation: generation) }) {
            return outcome
        }
        lockWait?.end()
        // Handed to the fleet once PostgreSQL answers; the request does not wait for it.
        return await fleet.renewAlone { [session] in await self.perform(session.current, generation: session.generation) }
    }

    private func perform(_ tokens: SessionTokens?, generation: Int) async -> Outcome {
        let (rc, environment) = runtime.snapshot
        let config = rc.sessionSettings(lifecycle.name)
        if let appToken = config.appToken {
            return await fetchAppToken(appToken, rc: rc, environment: environment, generation: generation)
        }
        guard let tokens else { return .loggedOut }
        guard let refresh = config.refresh, let refreshToken = tokens.refreshToken else {
            logger.warning("token expired and no refresh is possible; dropping the session",
                           metadata: ["reason": "\(config.refresh == nil ? "no session.refresh configured" : "no refresh token")"])
            await lifecycle.logout(ifAccessToken: tokens.accessToken, reason: .string(SessionLifecycle.refreshFailed))
            return .loggedOut
        }
        let reply: TokenReply
        switch await call(refresh, refreshToken: refreshToken, accessToken: tokens.accessToken, rc: rc, environment: environment) {
        case .answered(let judged): reply = judged
        case .failed(let reason, let retryAfter):
            return refused(reason, Self.failure(retryAfter: retryAfter, clientCredentials: false), path: refresh.path, maxBackoff: refresh.maxBackoff)
        }
        switch reply {
        case .good(let access, let rotated, let expiresIn):
            session.updatePacing { $0.succeeded() }
            lifecycle.lifetimeWarning.check(expiresIn, limit: config.maxRefreshes, logger: logger)
            let now = lifecycle.clock.date
            let newTokens = SessionTokens(accessToken: access, refreshToken: rotated ?? refreshToken, userID: tokens.userID, setAt: now,
                                          kind: .user, expiresAt: TokenReply.expiry(expiresIn, from: now),
                                          subject: tokens.userID == nil ? tokens.cacheUser : nil)
            do {
                if try await lifecycle.renewed(newTokens, ifGeneration: generation) { return .refreshed(access) }
            } catch {
                logger.error("could not store the refreshed session", metadata: ["error": "\(error)"])
                return .unavailable(retryAfter: nil)
            }
            // A logout or a new login happened meanwhile: it wins.
            if let now = session.current { return .refreshed(now.accessToken) }
            return .loggedOut
        case .rejected(let reason):
            stats.increment(.tokenRequestFailures)
            logger.warning("token refresh refused: the grant is dead; dropping the session",
                           metadata: ["reason": "\(reason)", "path": "\(refresh.path)"])
            await lifecycle.logout(ifAccessToken: tokens.accessToken, reason: .string(SessionLifecycle.refreshFailed))
            return .loggedOut
        case .refused(let reason, let retryAfter, let clientCredentials):
            return refused(reason, Self.failure(retryAfter: retryAfter, clientCredentials: clientCredentials), path: refresh.path,
                           maxBackoff: refresh.maxBackoff)
        }
    }

    private func fetchAppToken(_ endpoint: ConciergeConfig.TokenEndpoint, rc: RuntimeConfig, environment: String,
                               generation: Int) async -> Outcome {
        switch await call(endpoint, refreshToken: nil, accessToken: nil, rc: rc, environment: environment) {
        case .failed(let why, let retryAfter):
            return refused(why, Self.failure(retryAfter: retryAfter, clientCredentials: false), path: endpoint.path,
                           maxBackoff: endpoint.maxBackoff)
        case .answered(.rejected(let why)):
            // An app token has no session to end: its fetch refused is Concierge's credentials refused.
            return refused(why, .credentialsRefused, path: endpoint.path, maxBackoff: endpoint.maxBackoff)
        case .answered(.refused(let why, let retryAfter, let clientCredentials)):
            return refused(why, Self.failure(retryAfter: retryAfter, clientCredentials: clientCredentials), path: endpoint.path,
                           maxBackoff: endpoint.maxBackoff)
        case .answered(.good(let access, _, let expiresIn)):
            session.updatePacing { $0.succeeded() }
            lifecycle.lifetimeWarning.check(expiresIn, limit: rc.sessionSettings(lifecycle.name).maxRefreshes, logger: logger)
            let now = lifecycle.clock.date
            let tokens = SessionTokens(accessToken: access, refreshToken: nil, userID: nil, setAt: now, kind: .app,
                                       expiresAt: TokenReply.expiry(expiresIn, from: now))
            do {
                if try await lifecycle.renewed(tokens, ifGeneration: generation) { return .refreshed(access) }
                if let current = session.current, current.kind == .app { return .refreshed(current.accessToken) }
                return .unavailable(retryAfter: nil)
            } catch {
                logger.error("could not store the app token", metadata: ["error": "\(error)"])
                return .unavailable(retryAfter: nil)
            }
        }
    }

    private enum CallResult {
        case answered(TokenReply)
        /// No judgeable reply: unreachable, timed out, or a 5xx (with its `Retry-After`).
        case failed(String, retryAfter: Int?)
    }

    /// Sends one token request and judges the reply (``TokenReply``).
    private func call(_ endpoint: ConciergeConfig.TokenEndpoint, refreshToken: String?, accessToken: String?,
                      rc: RuntimeConfig, environment: String) async -> CallResult {
        stats.increment(.refreshes)
        stats.sessions.increment(.tokenRequests, session: lifecycle.name)
        guard let upstream = rc.settings.upstream(named: endpoint.upstream ?? environment) else {
            return .failed("no upstream named \(endpoint.upstream ?? environment)", retryAfter: nil)
        }
        let built = TokenRequest(endpoint, refreshToken: refreshToken, accessToken: accessToken)
        let body: UpstreamRequest.Body = built.body.map { .bytes(ByteBuffer(bytes: $0)) } ?? .none
        let request = UpstreamRequest(method: built.method, base: upstream.baseURL, target: built.target, headers: built.headers, body: body,
                                      timeout: endpoint.timeout)
        do {
            let response = try await transport.send(request, maxBody: rc.settings.limits.maxBodyBytes)
            let retryAfter = TokenReply.retryAfterSeconds(response.headers.first(name: "retry-after"))
            if response.status >= 500 { return .failed("token endpoint answered HTTP \(response.status)", retryAfter: retryAfter) }
            let json = JSONValue.parse(response.body.readableBytesView)
            return .answered(TokenReply.judge(status: response.status, body: json, envelope: rc.envelope,
                                              accessToken: endpoint.accessToken, refreshToken: endpoint.refreshToken,
                                              expiresIn: endpoint.expiresIn, logoutErrors: endpoint.logoutErrors,
                                              retryErrors: endpoint.retryErrors, retryAfter: retryAfter))
        } catch {
            return .failed("\(error)", retryAfter: nil)
        }
    }
}
