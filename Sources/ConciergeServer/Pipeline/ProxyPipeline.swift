import AsyncHTTPClient
import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// The request pipeline (docs/architecture.md), in order, in one place:
///
/// receive → route → common params → login guard → (cache key) → cache lookup / coalesce
/// → inject token → sign → forward → envelope → refresh-and-replay or logout → capture
/// → validate → store → reply.
///
/// ``fastPath(_:)`` is the synchronous subset a listener runs on its event loop: a fresh
/// hot-tier hit answered without a task or any I/O. Everything else goes through
/// ``handle(_:)``.
public final class ProxyPipeline: Sendable {
    public let runtime: Runtime
    public let cache: CacheStore
    public let session: SessionState
    public let refresher: TokenRefresher
    let sessionLogout: SessionLogout
    public let client: UpstreamClient
    public let stats: ProxyStats
    public let events: EventBus
    let logger: Logger
    let coalescer = MissCoalescer()
    private let revalidating = Mutex<Set<String>>([])
    private let upstreamDown = Mutex<Set<String>>([])

    public init(runtime: Runtime, cache: CacheStore, session: SessionState, client: UpstreamClient, stats: ProxyStats,
                events: EventBus, logger: Logger) {
        self.runtime = runtime
        self.cache = cache
        self.session = session
        self.client = client
        self.stats = stats
        self.events = events
        self.logger = logger
        let sessionLogout = SessionLogout(session: session, cache: cache, stats: stats, events: events, logger: logger)
        self.sessionLogout = sessionLogout
        self.refresher = TokenRefresher(session: session, client: client, runtime: runtime, stats: stats, events: events,
                                        logout: sessionLogout, logger: logger)
    }

    // MARK: - Preparation (steps 1–6, pure and synchronous)

    /// A request after routing, common params and the login guard, with its cache key.
    struct Prepared: Sendable {
        var request: ProxyRequest
        var endpoint: EndpointPolicy
        var config: RuntimeConfig
        var upstream: ConciergeConfig.Upstream
        /// The session token to inject, if this endpoint takes one.
        var token: String?
        /// The endpoint takes Concierge's token: with an app token not fetched yet, `token`
        /// is nil and the exchange fetches one first.
        var injects: Bool = false
        var session: SessionTokens?
        var cacheKey: String?
        var cacheUser: String?
        var bypass: Bool
        var streamedBody: IncomingRequest.Body?
        var clientAddress: String?
        var originalHeaders: HTTPHeaders
    }

    enum Preparation: Sendable {
        case ready(Prepared)
        case reply(ProxyReply)
    }

    func prepare(_ incoming: IncomingRequest) -> Preparation {
        let (rc, environment) = runtime.snapshot
        let config = rc.config
        var target = incoming.target
        let pathEnd = target.firstIndex(of: "?") ?? target.endIndex
        let path = String(target[..<pathEnd])
        let endpoint = rc.router.route(method: incoming.method, path: path)
        var headers = HeaderFields()
        for (name, value) in incoming.headers { headers.add(name, value) }
        let buffered = endpoint.envelope || endpoint.isCacheable
        var body: RequestBody = .empty
        var streamed: IncomingRequest.Body? = nil
        switch incoming.body {
        case .buffered(let buffer):
            if buffered {
                body = RequestBody.parse(Array(buffer.readableBytesView), contentType: headers["content-type"])
            } else if buffer.readableBytes > 0 {
                body = .opaque(Array(buffer.readableBytesView))
            }
        case .stream:
            streamed = incoming.body
        }
        if target.isEmpty { target = "/" }
        var request = ProxyRequest(method: incoming.method, target: target, headers: headers, body: body)
        rc.commonParams.apply(to: &request)

        // A session of the other kind (left by an earlier configuration) is not used.
        let current = session.current.flatMap { $0.kind == config.session.kind ? $0 : nil }
        let appToken = config.session.kind == .app
        guard appToken || rc.loginGuard.admits(endpoint, session: current) else {
            var reply = ProxyReply.json(config.session.notLoggedIn.status, config.session.notLoggedIn.body)
            reply.endpoint = endpoint.name
            reply.businessCode = rc.envelope.code(in: config.session.notLoggedIn.body)
            return .reply(reply)
        }
        let injects = endpoint.login != .none && (current != nil || appToken) && !rc.injector.points.isEmpty
        let token = injects ? current?.accessToken : nil
        let upstream = runtime.upstream(for: endpoint, in: (rc, environment))

        var cacheKey: String? = nil
        var cacheUser: String? = nil
        if endpoint.isCacheable, streamed == nil {
            let clientToken = !injects && rc.injector.carriesToken(request)
            var storable = true
            switch endpoint.cache.scope {
            case .shared where endpoint.scopeIsExplicit:
                cacheUser = nil
            case .user, .shared:
                if appToken, injects {
                    // One app token for everyone: its entries are shared (no user).
                    cacheUser = nil
                } else if let current, injects {
                    cacheUser = current.cacheUser
                } else if clientToken || endpoint.cache.scope == .user {
                    // A token we cannot attribute to a user: never shared, so not cached.
                    storable = false
                }
            }
            if storable {
                let params = request.query + (request.paramsGoInQuery ? [] : request.body.params)
                cacheKey = CacheKey.make(method: request.method, upstreamBaseURL: upstream.baseURL, path: request.path,
                                         params: params, excluding: rc.keyExclusions, userID: cacheUser,
                                         version: endpoint.cache.version ?? config.cache.version)
            }
        }
        let cacheControl = incoming.headers["cache-control"].joined(separator: ",").lowercased()
        let bypass = cacheControl.contains("no-cache") || incoming.headers["x-concierge-cache"].contains { $0.lowercased() == "bypass" }
        return .ready(Prepared(request: request, endpoint: endpoint, config: rc, upstream: upstream, token: token, injects: injects, session: current,
                               cacheKey: cacheKey, cacheUser: cacheUser, bypass: bypass, streamedBody: streamed,
                               clientAddress: incoming.clientAddress, originalHeaders: incoming.headers))
    }

    // MARK: - Fast path

    /// What the synchronous fast path found.
    enum FastPath: Sendable {
        /// A fresh hot-tier hit (or a local reply): write it now.
        case reply(ProxyReply)
        /// Go on with ``handle(_:prepared:)`` without preparing again.
        case prepared(Preparation)
    }

    /// A fresh hot-tier hit, answered synchronously on the event loop.
    func fastPath(_ incoming: IncomingRequest) -> FastPath {
        let preparation = prepare(incoming)
        guard case .ready(let p) = preparation else { return .prepared(preparation) }
        let now = Date().timeIntervalSince1970
        guard let key = p.cacheKey, !p.bypass, let entry = cache.hotLookup(key, now: now), entry.isFresh(at: now) else {
            return .prepared(preparation)
        }
        stats.increment(.hits)
        return .reply(cachedReply(entry, p, status: "HIT", now: now))
    }

    // MARK: - Full pipeline

    public func handle(_ incoming: IncomingRequest) async -> ProxyReply {
        await handle(incoming, prepared: prepare(incoming))
    }

    func handle(_ incoming: IncomingRequest, prepared: Preparation) async -> ProxyReply {
        let p: Prepared
        switch prepared {
        case .reply(let reply): return reply
        case .ready(let prepared): p = prepared
        }
        guard let key = p.cacheKey else {
            if p.endpoint.envelope || p.endpoint.isCacheable {
                var reply = await exchange(p).reply
                if p.endpoint.isCacheable { reply.headers.replaceOrAdd(name: "X-Cache", value: "MISS") }
                return reply
            }
            return await forwardStreaming(p)
        }
        let now = Date().timeIntervalSince1970
        if p.bypass {
            stats.increment(.bypass)
            let result = await fetchAndStore(p, key: key)
            return withCacheHeaders(result, status: "BYPASS", cacheStatus: "concierge; fwd=request")
        }
        let entry = await cache.lookup(key)
        if let entry {
            if entry.isFresh(at: now) {
                stats.increment(.hits)
                return cachedReply(entry, p, status: "HIT", now: now)
            }
            if now < entry.freshUntil + entry.staleWhileRevalidate {
                stats.increment(.stale)
                revalidateInBackground(p, key: key)
                return cachedReply(entry, p, status: "STALE", now: now, detail: "stale-while-revalidate")
            }
        }
        stats.increment(.misses)
        let result = await coalescer.run(key: key) { await self.fetchAndStore(p, key: key) }
        if result.upstreamFailed, let entry, now < entry.freshUntil + entry.staleIfError {
            stats.increment(.stale)
            return cachedReply(entry, p, status: "STALE", now: now, detail: "stale-if-error")
        }
        return withCacheHeaders(result, status: "MISS", cacheStatus: "concierge; fwd=miss")
    }

    private func withCacheHeaders(_ result: ExchangeResult, status: String, cacheStatus: String) -> ProxyReply {
        var reply = result.reply
        reply.cacheStatus = status
        reply.headers.replaceOrAdd(name: "X-Cache", value: status)
        reply.headers.replaceOrAdd(name: "Cache-Status", value: cacheStatus + (result.stored ? "; stored" : ""))
        return reply
    }

    private func revalidateInBackground(_ p: Prepared, key: String) {
        let start = revalidating.withLock { $0.insert(key).inserted }
        guard start else { return }
        Task {
            _ = await self.coalescer.run(key: key) { await self.fetchAndStore(p, key: key) }
            _ = self.revalidating.withLock { $0.remove(key) }
        }
    }

    /// A reply built from a stored entry (HIT or STALE).
    func cachedReply(_ entry: CacheEntry, _ p: Prepared, status: String, now: Double, detail: String? = nil) -> ProxyReply {
        var headers = HTTPHeaders()
        var upstreamAge = 0
        for (name, value) in entry.headers {
            if name.lowercased() == "age" {
                upstreamAge = Int(value.trimmingCharacters(in: .whitespaces)) ?? 0
                continue
            }
            headers.add(name: name, value: value)
        }
        let ttl = entry.remainingTTL(at: now)
        headers.add(name: "X-Cache", value: status)
        headers.add(name: "Cache-Status", value: "concierge; hit; ttl=\(ttl)\(detail.map { "; detail=\($0)" } ?? "")")
        headers.add(name: "Age", value: String(max(0, upstreamAge) + entry.age(at: now)))
        var reply = ProxyReply(status: entry.status, headers: headers, body: .buffer(entry.body))
        reply.cacheStatus = status
        reply.endpoint = p.endpoint.name
        reply.succeeded = true
        reply.maskedParams = p.config.tokenParamNames
        if let unwrap = p.endpoint.unwrap { applyUnwrap(&reply, path: unwrap, config: p.config) }
        return reply
    }

    // MARK: - Exchange with the upstream (steps 8–10)

    struct ExchangeResult: Sendable {
        var reply: ProxyReply
        var stored: Bool = false
        var upstreamFailed: Bool = false
    }

    private func fetchAndStore(_ p: Prepared, key: String) async -> ExchangeResult {
        var result = await exchange(p)
        guard let storable = result.storable else { return result.result }
        let policy = p.endpoint.cache
        let entry = CacheEntry(key: key, endpoint: p.endpoint.name, userID: p.cacheUser, status: storable.status,
                               headers: storable.headers, body: storable.body, storedAt: Date().timeIntervalSince1970,
                               ttl: policy.ttl.seconds, staleWhileRevalidate: policy.staleWhileRevalidate.seconds,
                               staleIfError: policy.staleIfError.seconds, version: policy.version ?? p.config.config.cache.version)
        result.result.stored = cache.store(entry)
        return result.result
    }

    struct Storable: Sendable {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: ByteBuffer
    }

    struct ExchangeOutcome: Sendable {
        var result: ExchangeResult
        var storable: Storable?
        var reply: ProxyReply { result.reply }
    }

    /// Sends the request (buffered), reads the envelope, refreshes and replays, captures.
    func exchange(_ p: Prepared) async -> ExchangeOutcome {
        let config = p.config.config
        var token = p.token
        var replays = 0
        let maxReplays = config.session.maxReplays
        var upstreamTotal = Duration.zero
        if p.injects {
            switch await tokenBeforeSending(p) {
            case .send(let t): token = t
            case .reply(var reply):
                decorate(&reply, p, replays: 0, upstreamTime: .zero)
                return ExchangeOutcome(result: ExchangeResult(reply: reply), storable: nil)
            }
        }
        while true {
            var request = p.request
            if let token { p.config.injector.inject(token, into: &request) }
            if let signer = p.config.signer(for: p.endpoint) {
                let signed = signer.sign(&request)
                logger.debug("signed request", metadata: ["endpoint": "\(p.endpoint.name)",
                                                          "string": "\(p.config.redactor.redactForm(signed))"])
            }
            var upstreamRequest = makeUpstreamRequest(request, p)
            Self.askForIdentity(&upstreamRequest)
            let started = ContinuousClock.now
            let response: UpstreamResponse
            do {
                response = try await client.send(upstreamRequest, maxBody: config.limits.maxBodyBytes)
            } catch {
                let elapsed = ContinuousClock.now - started
                stats.recordUpstream(duration: elapsed)
                stats.increment(.upstreamErrors)
                markUpstream(p.upstream.name, down: true)
                logger.warning("upstream request failed", metadata: ["endpoint": "\(p.endpoint.name)", "upstream": "\(p.upstream.name)",
                                                                     "error": "\(error)"])
                let status = { if case .timeout = error { return 504 } else { return 502 } }()
                var reply = ProxyReply.json(status, config.envelope.unavailable.body)
                decorate(&reply, p, replays: replays, upstreamTime: upstreamTotal + elapsed)
                return ExchangeOutcome(result: ExchangeResult(reply: reply, upstreamFailed: true), storable: nil)
            }
            let elapsed = ContinuousClock.now - started
            upstreamTotal += elapsed
            stats.recordUpstream(duration: elapsed)
            markUpstream(p.upstream.name, down: false)

            var headers = UpstreamClient.endToEnd(response.headers, dropping: ["content-length", "server"])
            if replays > 0 { headers.replaceOrAdd(name: "X-Concierge-Replays", value: String(replays)) }
            var reply = ProxyReply(status: response.status, headers: headers, body: .buffer(response.body))
            decorate(&reply, p, replays: replays, upstreamTime: upstreamTotal)

            if let stale = token, config.session.refreshOnStatus.contains(response.status) {
                // An expiry signal by HTTP status (OAuth2's 401): renew and replay.
                switch await renew(p, replacing: stale, replays: replays, maxReplays: maxReplays, upstreamTime: upstreamTotal, upstreamReply: reply) {
                case .replay(let fresh):
                    token = fresh
                    replays += 1
                    continue
                case .finish(let outcome): return outcome
                }
            }

            guard p.endpoint.envelope else {
                // Non-JSON but cacheable: HTTP 2xx is the success.
                let ok = (200..<300).contains(response.status)
                reply.succeeded = ok
                let storable = ok && !Self.noStore(response.headers) && Self.servesEveryClient(response.headers)
                return ExchangeOutcome(result: ExchangeResult(reply: reply),
                                       storable: storable ? Storable(status: response.status, headers: Self.storedHeaders(headers), body: response.body) : nil)
            }
            if response.status >= 500 {
                stats.increment(.upstreamErrors)
                var failure = ProxyReply.json(config.envelope.unavailable.status, config.envelope.unavailable.body)
                decorate(&failure, p, replays: replays, upstreamTime: upstreamTotal)
                logger.warning("upstream answered an HTTP error", metadata: ["endpoint": "\(p.endpoint.name)", "status": "\(response.status)"])
                return ExchangeOutcome(result: ExchangeResult(reply: failure, upstreamFailed: true), storable: nil)
            }
            let capture = config.session.capture.flatMap { $0.endpoint == p.endpoint.name && config.session.kind == .user ? $0 : nil }
            // The whole tree only when a later step reads it; else just the code (no tree built).
            let needsTree = capture != nil || !p.endpoint.validate.isEmpty || p.endpoint.unwrap != nil || !config.envelope.warningCodes.isEmpty
            let json = needsTree ? JSONValue.parse(response.body.readableBytesView)
                : JSONScan.envelope(codePath: config.envelope.codePath, in: response.body.readableBytesView)
            var outcome = p.config.envelope.classify(json, status: response.status)
            reply.businessCode = p.config.envelope.code(in: json)
            var captured: TokenReply? = nil
            if let capture {
                // A login reply is judged as a token reply: OAuth2's has no code at all.
                let judged = TokenReply.judge(status: response.status, body: json, envelope: p.config.envelope, accessToken: capture.accessToken,
                                              refreshToken: capture.refreshToken, expiresIn: capture.expiresIn)
                if case .good = judged {
                    captured = judged
                    if case .failure(code: nil) = outcome { outcome = .success(code: nil) }
                }
            }
            switch outcome {
            case .notJSON where (400..<500).contains(response.status):
                // An HTTP error without a JSON body (a bare 401/404): passed on as a failure.
                return ExchangeOutcome(result: ExchangeResult(reply: reply), storable: nil)
            case .notJSON:
                var failure = ProxyReply.json(config.envelope.unavailable.status, config.envelope.unavailable.body)
                decorate(&failure, p, replays: replays, upstreamTime: upstreamTotal)
                logger.warning("upstream reply is not JSON", metadata: ["endpoint": "\(p.endpoint.name)", "status": "\(response.status)",
                                                                        "bytes": "\(response.body.readableBytes)"])
                return ExchangeOutcome(result: ExchangeResult(reply: failure), storable: nil)

            case .refresh:
                guard let stale = token else { return ExchangeOutcome(result: ExchangeResult(reply: reply), storable: nil) }
                switch await renew(p, replacing: stale, replays: replays, maxReplays: maxReplays, upstreamTime: upstreamTotal, upstreamReply: reply) {
                case .replay(let fresh):
                    token = fresh
                    replays += 1
                    continue
                case .finish(let outcome): return outcome
                }

            case .logout(let code):
                await logout(sentToken: token, reason: code.jsonValue)
                return ExchangeOutcome(result: ExchangeResult(reply: reply), storable: nil)

            case .failure(let code):
                if let code = code?.number, let actions = config.envelope.warningCodes[code] {
                    await applyWarning(code: code, actions: actions, json: json, p: p, token: token)
                }
                return ExchangeOutcome(result: ExchangeResult(reply: reply), storable: nil)

            case .success:
                guard let json else { continue }
                if let problem = ResponseValidator(rules: p.endpoint.validate).problem(in: json) {
                    logger.warning("reply failed validation", metadata: ["endpoint": "\(p.endpoint.name)", "problem": "\(problem)"])
                    var invalid = invalidReply(config, problem: problem)
                    decorate(&invalid, p, replays: replays, upstreamTime: upstreamTotal)
                    return ExchangeOutcome(result: ExchangeResult(reply: invalid), storable: nil)
                }
                reply.succeeded = true
                var storedBody = response.body
                if let capture {
                    await captureSession(captured, json, capture)
                    if capture.redact {
                        // The client never holds the captured tokens (token-handler pattern).
                        var redacted = json.removing(path: capture.accessToken)
                        if let refreshPath = capture.refreshToken { redacted = redacted.removing(path: refreshPath) }
                        storedBody = ByteBuffer(bytes: redacted.serializedBytes)
                        reply.body = .buffer(storedBody)
                    }
                }
                if !p.endpoint.invalidates.isEmpty {
                    let user = session.current?.cacheUser
                    let removed = (try? await cache.invalidate(.endpoints(p.endpoint.invalidates, scope: user.map { .sharedAnd($0) } ?? .sharedOnly))) ?? 0
                    stats.increment(.invalidations)
                    logger.info("write invalidated entries", metadata: ["endpoint": "\(p.endpoint.name)",
                                                                       "targets": "\(p.endpoint.invalidates.joined(separator: ","))", "removed": "\(removed)"])
                    events.publish("cache.invalidated", ["by": .string("endpoint:\(p.endpoint.name)"), "removed": .int(Int64(removed))])
                }
                let storable = !Self.noStore(response.headers)
                    ? Storable(status: response.status, headers: Self.storedHeaders(headers), body: storedBody) : nil
                if let unwrap = p.endpoint.unwrap { applyUnwrap(&reply, path: unwrap, config: p.config) }
                return ExchangeOutcome(result: ExchangeResult(reply: reply), storable: storable)
            }
        }
    }

    enum TokenDecision: Sendable {
        case send(String?)
        case reply(ProxyReply)
    }

    /// The token to send: the app token fetched on first need, or a token renewed ahead of
    /// its expiry (`refresh_ahead`) so the upstream never sees it expire.
    func tokenBeforeSending(_ p: Prepared) async -> TokenDecision {
        let config = p.config.config
        guard let token = p.token else {
            // An app token not fetched yet.
            switch await refresher.freshToken(replacing: nil) {
            case .refreshed(let fresh): return .send(fresh)
            case .loggedOut: return .reply(notLoggedInReply(config))
            case .unavailable, .throttled: return .reply(unavailableReply(config))
            }
        }
        guard let current = session.current, current.accessToken == token,
              current.needsRenewal(at: Date(), ahead: config.session.refreshAhead), config.session.tokenEndpoint != nil
        else { return .send(token) }
        switch await refresher.freshToken(replacing: token) {
        case .refreshed(let fresh): return .send(fresh)
        case .loggedOut: return .reply(notLoggedInReply(config))
        case .unavailable, .throttled: return .send(token)  // still valid for a moment: try it
        }
    }

    enum Renewal: Sendable {
        /// Send again with this token.
        case replay(String)
        /// Answer now: a local reply (not logged in, unavailable), or, after the last replay,
        /// the upstream's own reply.
        case finish(ExchangeOutcome)
    }

    /// An expiry signal (refresh code or `refresh_on_status`) on a request that carried
    /// `stale`: one renewal through the single flight, then a replay, at most `maxReplays` times.
    func renew(_ p: Prepared, replacing stale: String, replays: Int, maxReplays: Int, upstreamTime: Duration,
               upstreamReply: ProxyReply) async -> Renewal {
        let config = p.config.config
        guard replays < maxReplays else {
            logger.warning("token still expired after the last replay", metadata: ["endpoint": "\(p.endpoint.name)", "replays": "\(replays)"])
            return .finish(ExchangeOutcome(result: ExchangeResult(reply: upstreamReply), storable: nil))
        }
        var local: ProxyReply
        switch await refresher.freshToken(replacing: stale) {
        case .refreshed(let fresh):
            stats.increment(.replays)
            return .replay(fresh)
        case .loggedOut: local = notLoggedInReply(config)
        case .throttled where config.session.kind == .user: local = notLoggedInReply(config)
        case .unavailable, .throttled: local = unavailableReply(config)
        }
        decorate(&local, p, replays: replays, upstreamTime: upstreamTime)
        return .finish(ExchangeOutcome(result: ExchangeResult(reply: local), storable: nil))
    }

    func notLoggedInReply(_ config: ConciergeConfig) -> ProxyReply {
        var reply = ProxyReply.json(config.session.notLoggedIn.status, config.session.notLoggedIn.body)
        reply.businessCode = EnvelopeReader(envelope: config.envelope).code(in: config.session.notLoggedIn.body)
        return reply
    }

    func unavailableReply(_ config: ConciergeConfig) -> ProxyReply {
        ProxyReply.json(config.envelope.unavailable.status, config.envelope.unavailable.body)
    }

    /// Forwards a non-JSON, uncached request with bodies streamed both ways.
    func forwardStreaming(_ p: Prepared) async -> ProxyReply {
        var request = p.request
        var token = p.token
        if p.injects {
            switch await tokenBeforeSending(p) {
            case .send(let t): token = t
            case .reply(var reply):
                decorate(&reply, p, replays: 0, upstreamTime: .zero)
                return reply
            }
        }
        if let token { p.config.injector.inject(token, into: &request) }
        var upstreamRequest = makeUpstreamRequest(request, p)
        if case .stream(let stream, let length)? = p.streamedBody {
            upstreamRequest.body = .stream(stream, length: length)
        }
        let started = ContinuousClock.now
        do {
            let response = try await client.stream(upstreamRequest)
            markUpstream(p.upstream.name, down: false)
            var headers = UpstreamClient.endToEnd(response.headers, dropping: ["server"])
            if headers["content-length"].isEmpty, response.status == .noContent || response.status == .notModified {
                headers.remove(name: "content-length")
            }
            var reply = ProxyReply(status: Int(response.status.code), headers: headers, body: .upstream(response.body))
            decorate(&reply, p, replays: 0, upstreamTime: ContinuousClock.now - started)
            reply.succeeded = (200..<400).contains(reply.status)
            return reply
        } catch {
            if case .clientBody = error {
                // Aborted because the client's body broke: the listener answers 400/408.
                return .error(400, "\(error)")
            }
            stats.increment(.upstreamErrors)
            markUpstream(p.upstream.name, down: true)
            logger.warning("upstream request failed", metadata: ["endpoint": "\(p.endpoint.name)", "error": "\(error)"])
            let config = p.config.config
            let status = { if case .timeout = error { return 504 } else { return 502 } }()
            var reply = ProxyReply.json(status, config.envelope.unavailable.body)
            decorate(&reply, p, replays: 0, upstreamTime: ContinuousClock.now - started)
            return reply
        }
    }

    func makeUpstreamRequest(_ request: ProxyRequest, _ p: Prepared) -> UpstreamRequest {
        var headers = UpstreamClient.endToEnd(p.originalHeaders, dropping: ["host", "content-length", "x-concierge-cache", "expect"])
        // Re-apply the rewritten fields (common headers, injected header token).
        for (name, value) in request.headers where !p.originalHeaders.contains(name: name) || p.config.injector.headerNames.contains(where: { $0.caseInsensitiveCompare(name) == .orderedSame }) {
            headers.replaceOrAdd(name: name, value: value)
        }
        let forwardedFor = [p.originalHeaders.first(name: "x-forwarded-for"), p.clientAddress].compactMap { $0 }.joined(separator: ", ")
        if !forwardedFor.isEmpty { headers.replaceOrAdd(name: "X-Forwarded-For", value: forwardedFor) }
        let via = p.originalHeaders.first(name: "via").map { "\($0), 1.1 concierge" } ?? "1.1 concierge"
        headers.replaceOrAdd(name: "Via", value: via)
        var body: UpstreamRequest.Body = .none
        let bytes = request.body.bytes
        if !bytes.isEmpty {
            body = .bytes(ByteBuffer(bytes: bytes))
            if let type = request.body.contentType, case .form = request.body {
                headers.replaceOrAdd(name: "Content-Type", value: type)
            } else if let type = request.body.contentType, !headers.contains(name: "content-type") {
                headers.replaceOrAdd(name: "Content-Type", value: type)
            }
        }
        let timeout = p.endpoint.timeout ?? p.config.config.limits.defaultTimeout
        return UpstreamRequest(method: request.method, url: p.upstream.baseURL + request.target, headers: headers, body: body, timeout: timeout)
    }

    private func decorate(_ reply: inout ProxyReply, _ p: Prepared, replays: Int, upstreamTime: Duration) {
        reply.endpoint = p.endpoint.name
        reply.replays = replays
        reply.upstreamTime = upstreamTime
        reply.maskedParams = p.config.tokenParamNames
        if replays > 0 { reply.headers.replaceOrAdd(name: "X-Concierge-Replays", value: String(replays)) }
    }

    static func noStore(_ headers: HTTPHeaders) -> Bool {
        headers["cache-control"].contains { $0.lowercased().contains("no-store") || $0.lowercased().contains("private") }
    }

    /// Headers kept with a stored entry. The upstream's `Date` and `Age` stay: a cached
    /// reply carries that `Date` and an `Age` that adds the upstream's (see ``cachedReply``).
    static func storedHeaders(_ headers: HTTPHeaders) -> [(name: String, value: String)] {
        let skip: Set<String> = ["set-cookie", "x-cache", "cache-status", "x-concierge-replays", "content-length"]
        return headers.filter { !skip.contains($0.name.lowercased()) }.map { ($0.name, $0.value) }
    }

    /// Buffered endpoints read (and may store) the body, so they ask for it unencoded: the
    /// client's own `Accept-Encoding` must not make a stored body unusable for another
    /// client, nor an envelope unreadable. Streamed pass-through keeps the client's.
    static func askForIdentity(_ request: inout UpstreamRequest) {
        request.headers.replaceOrAdd(name: "Accept-Encoding", value: "identity")
    }

    /// Whether a reply may be stored and served to any client: not encoded (despite
    /// ``askForIdentity(_:)``), and varying on nothing but `Accept-Encoding` (the stored body
    /// is identity, which every client takes). The cache key has no room for other
    /// variants, so those replies are not stored.
    static func servesEveryClient(_ headers: HTTPHeaders) -> Bool {
        if headers["content-encoding"].contains(where: { !$0.trimmingCharacters(in: .whitespaces).lowercased().elementsEqual("identity") }) {
            return false
        }
        for value in headers["vary"] {
            for field in value.split(separator: ",") where field.trimmingCharacters(in: .whitespaces).lowercased() != "accept-encoding" {
                return false
            }
        }
        return true
    }

    func invalidReply(_ config: ConciergeConfig, problem: String) -> ProxyReply {
        var body = config.envelope.invalid.body
        if case .object(var members) = body {
            let base = members[config.envelope.messagePath]?.stringValue ?? "response failed validation"
            members[config.envelope.messagePath] = .string("\(base): \(problem)")
            body = .object(members)
        }
        return ProxyReply.json(config.envelope.invalid.status, body)
    }

    func applyUnwrap(_ reply: inout ProxyReply, path: String, config: RuntimeConfig) {
        guard let body = reply.bufferedBody else { return }
        guard let json = JSONValue.parse(body.readableBytesView), let inner = json[path: path] else {
            let replacement = invalidReply(config.config, problem: "\(path) is missing")
            reply.status = replacement.status
            reply.body = replacement.body
            reply.succeeded = false
            return
        }
        reply.body = .buffer(ByteBuffer(bytes: inner.serializedBytes))
        reply.headers.replaceOrAdd(name: "Content-Type", value: "application/json")
        reply.headers.replaceOrAdd(name: "X-Concierge-Unwrapped", value: path)
    }

    // MARK: - Session side effects

    private func captureSession(_ reply: TokenReply?, _ json: JSONValue, _ capture: ConciergeConfig.Capture) async {
        guard case .good(let access, let refreshToken, let expiresIn)? = reply else {
            logger.warning("login reply has no access token; session unchanged", metadata: ["path": "\(capture.accessToken)"])
            return
        }
        let now = Date()
        let tokens = SessionTokens(accessToken: access, refreshToken: refreshToken,
                                   userID: capture.userID.flatMap { json[path: $0]?.parameterText }, setAt: now,
                                   kind: .user, expiresAt: TokenReply.expiry(expiresIn, from: now))
        do {
            try await session.set(tokens)
            logger.info("session captured", metadata: ["user": "\(tokens.userID ?? "-")", "access_token": "\(TokenMask.mask(access))"])
            events.publish("session.login", ["user": tokens.userID.map(JSONValue.string) ?? .null])
        } catch {
            logger.error("could not store the session", metadata: ["error": "\(error)"])
        }
    }

    /// Drops the session and the user's cached entries.
    func logout(sentToken: String?, reason: JSONValue) async {
        await sessionLogout.perform(ifAccessToken: sentToken, reason: reason)
    }

    private func applyWarning(code: Int, actions: Set<ConciergeConfig.WarningAction>, json: JSONValue?, p: Prepared, token: String?) async {
        let message = p.config.envelope.message(json) ?? ""
        if actions.contains(.log) {
            logger.warning("warning code from upstream", metadata: ["code": "\(code)", "endpoint": "\(p.endpoint.name)", "msg": "\(message)"])
        }
        if actions.contains(.event) {
            events.publish("warning", ["code": .int(Int64(code)), "endpoint": .string(p.endpoint.name), "msg": .string(message)])
        }
        if actions.contains(.logout) {
            await logout(sentToken: token, reason: .int(Int64(code)))
        }
    }

    private func markUpstream(_ name: String, down: Bool) {
        let changed = upstreamDown.withLock { set -> Bool in
            down ? set.insert(name).inserted : (set.remove(name) != nil)
        }
        if changed { events.publish(down ? "upstream.down" : "upstream.up", ["upstream": .string(name)]) }
    }
}

/// Concurrent misses on one key make one upstream call; the others wait for its result
/// (coalescing). The first caller does the work inline (no extra task); callers that
/// arrive while it runs are parked and handed the same result.
///
/// - Important: a leader cancelled mid-call (a `fail_fast` batch) hands its cancelled
///   result to the waiters too.
final class MissCoalescer: Sendable {
    private let waiters = Mutex<[String: [CheckedContinuation<ProxyPipeline.ExchangeResult?, Never>]]>([:])

    func run(key: String, _ work: @Sendable () async -> ProxyPipeline.ExchangeResult) async -> ProxyPipeline.ExchangeResult {
        let shared: ProxyPipeline.ExchangeResult? = await withCheckedContinuation { continuation in
            let joined = waiters.withLock { map -> Bool in
                if map[key] != nil {
                    map[key]!.append(continuation)
                    return true
                }
                map[key] = []
                return false
            }
            if !joined { continuation.resume(returning: nil) }
        }
        if let shared { return shared }
        let result = await work()
        let parked = waiters.withLock { $0.removeValue(forKey: key) ?? [] }
        for waiter in parked { waiter.resume(returning: result) }
        return result
    }
}
