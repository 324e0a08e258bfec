import ConciergeCore
import Logging
import NIOCore
import NIOHTTP1

/// A reply the cache may keep: status, the headers kept with it, the body as the client got
/// it before `unwrap`.
struct Storable: Sendable {
    var status: Int
    var headers: HTTPHeaders
    var body: ByteBuffer
    /// The values of the endpoint's `cache.tags_header`, taken out of the reply.
    var headerTags: [String] = []
}

/// Step 6 of the request path (docs/architecture.md) for a buffered request: inject the
/// token, sign, send, read the envelope, renew the token and replay on an expiry signal, log
/// out on a logout code, and hand a successful reply to ``EnvelopeSuccess``. One result,
/// three cases.
struct UpstreamExchange: Sendable {
    enum Result: Sendable {
        /// A usable reply; `storable` when the cache may keep it.
        case success(ProxyAnswer, storable: Storable?)
        /// A reply that is not a success (business failure, logout, local answer).
        case failure(ProxyAnswer)
        /// The upstream failed (unreachable, timed out, 5xx): stale-if-error may answer.
        case upstreamDown(ProxyAnswer)

        var answer: ProxyAnswer {
            switch self {
            case .success(let answer, _), .failure(let answer), .upstreamDown(let answer): return answer
            }
        }
    }

    /// The network: ``UpstreamClient`` in the daemon, a script in unit tests.
    let transport: any UpstreamTransport
    let refresher: TokenRefresher
    /// Logout codes and warning codes with `logout` end the session through it.
    let lifecycle: SessionLifecycle
    let success: EnvelopeSuccess
    let health: UpstreamHealth
    let logger: Logger
    var stats: ProxyStats { lifecycle.stats }
    /// Reply headers Concierge sets itself (the length of the body it writes; no `Server`).
    private static let replacedInReplies = ["content-length", "server"]

    /// The token in use, the replays made and the upstream time spent so far.
    struct Attempt: Sendable {
        var token: String?
        var replays = 0
        var upstreamTime = Duration.zero

        /// A reply with this request's report (endpoint, replays, upstream time).
        func answer(_ reply: ProxyReply, _ p: PreparedRequest, code: BusinessCode? = nil) -> ProxyAnswer {
            var reply = reply
            if replays > 0 { reply.headers.replaceOrAdd(name: "X-Concierge-Replays", value: String(replays)) }
            return ProxyAnswer(reply, RequestReport(endpoint: p.endpoint.name, businessCode: code, replays: replays, upstreamTime: upstreamTime))
        }
    }

    /// Where one upstream reply leads.
    enum Step: Sendable {
        case replay(String)
        case done(Result)
    }

    /// What one upstream reply calls for, decided without waiting: the step, or what must be
    /// awaited before it (``follow(_:_:_:)``).
    enum Verdict: Sendable {
        case step(Step)
        /// An expiry signal on a request that carried `stale`: renew, then replay.
        case renew(stale: String, upstreamAnswer: ProxyAnswer)
        /// A logout code: the session ends, and the reply is passed on.
        case logout(reason: JSONValue, upstreamAnswer: ProxyAnswer)
        /// A warning code with actions; the reply is passed on.
        case warn(code: Int, actions: Set<ConciergeConfig.WarningAction>, json: JSONValue?, upstreamAnswer: ProxyAnswer)
        /// A success whose capture or `invalidates` is still to run (``EnvelopeSuccess``).
        case finishSuccess(EnvelopeSuccess.Pending)
    }

    nonisolated(nonsending) func run(_ p: PreparedRequest) async -> Result {
        var attempt = Attempt(token: p.token)
        if p.injects {
            let (refresher, state) = (p.sessionUnit?.refresher ?? self.refresher, p.sessionUnit?.state ?? self.lifecycle.session)
            switch await TokenBeforeSending.decide(p, refresher: refresher, session: state.current) {
            case .send(let token): attempt.token = token
            case .answer(let reply, let code): return .failure(attempt.answer(reply, p, code: code))
            }
        }
        return await exchange(p, attempt)
    }

    /// Sends, judges, and renews and replays until a result.
    nonisolated(nonsending) private func exchange(_ p: PreparedRequest, _ attempt: Attempt) async -> Result {
        var attempt = attempt
        while true {
            var request = request(p, attempt)
            p.trace?.beginAttempt(&request, replays: attempt.replays)
            let started = ContinuousClock.now
            let response: UpstreamResponse
            do {
                response = try await transport.send(request, maxBody: p.config.settings.limits.maxBodyBytes)
            } catch {
                return unreachable(error, p, &attempt, elapsed: ContinuousClock.now - started)
            }
            received(p, &attempt, elapsed: ContinuousClock.now - started, status: response.status)
            switch await judge(response, p, attempt) {
            case .replay(let fresh):
                attempt.token = fresh
                attempt.replays += 1
            case .done(let result):
                return result
            }
        }
    }

    /// The upstream request of this attempt: token injected, signed, identity asked for.
    func request(_ p: PreparedRequest, _ attempt: Attempt) -> UpstreamRequest {
        UpstreamRequestBuilder.build(p, token: attempt.token, logger: logger, askingForIdentity: true)
    }

    private func received(_ p: PreparedRequest, _ attempt: inout Attempt, elapsed: Duration, status: Int) {
        p.trace?.endAttempt(status: status)
        attempt.upstreamTime += elapsed
        stats.recordUpstream(duration: elapsed)
        health.mark(p.upstream.name, down: false)
    }

    private func unreachable(_ error: UpstreamFailure, _ p: PreparedRequest, _ attempt: inout Attempt, elapsed: Duration) -> Result {
        p.trace?.endAttempt(status: nil, failure: { if case .timeout = error { return "timeout" } else { return "unreachable" } }())
        attempt.upstreamTime += elapsed
        stats.recordUpstream(duration: elapsed)
        stats.increment(.upstreamErrors)
        health.mark(p.upstream.name, down: true)
        logger.warning("upstream request failed", metadata: p.logMetadata(["endpoint": "\(p.endpoint.name)", "upstream": "\(p.upstream.name)",
                                                                           "error": "\(error)"]))
        let status = { if case .timeout = error { return 504 } else { return 502 } }()
        return .upstreamDown(attempt.answer(LocalReplies.unavailable(p.config, status: status), p))
    }

    // MARK: The first attempt on an event loop

    /// The first attempt's token when it needs no wait (no renewal before sending); `nil`
    /// when it does (the exchange then runs as ``run(_:)``).
    func firstAttemptWithoutWaiting(_ p: PreparedRequest) -> Attempt? {
        guard p.injects else { return Attempt(token: p.token) }
        let (refresher, state) = (p.sessionUnit?.refresher ?? self.refresher, p.sessionUnit?.state ?? self.lifecycle.session)
        guard let token = TokenBeforeSending.withoutWaiting(p, refresher: refresher, session: state.current) else { return nil }
        return Attempt(token: token)
    }

    /// How the first reply of an exchange started on an event loop ends: a result, or a
    /// verdict that needs a wait (``resume(after:headerTags:_:_:)``, in a task).
    enum FirstReply: Sendable {
        case done(Result)
        case waits(Verdict, headerTags: [String]?, Attempt)
    }

    /// The first reply (or failure) of an exchange started on an event loop, judged there.
    func judgeFirst(_ outcome: Swift.Result<UpstreamResponse, any Error>, _ p: PreparedRequest, _ attempt: Attempt,
                    elapsed: Duration) -> FirstReply {
        var attempt = attempt
        switch outcome {
        case .failure(let error):
            return .done(unreachable((error as? UpstreamFailure) ?? .unreachable("\(error)"), p, &attempt, elapsed: elapsed))
        case .success(let response):
            received(p, &attempt, elapsed: elapsed, status: response.status)
            let (verdict, tags) = verdict(response, p, attempt)
            if case .step(.done(let result)) = verdict {
                // Without tags from a header (the usual case) the result as it is: no step to wrap and unwrap.
                guard let tags else { return .done(result) }
                if case .done(let tagged) = Self.tagged(.done(result), tags) { return .done(tagged) }
            }
            return .waits(verdict, headerTags: tags, attempt)
        }
    }

    /// The rest of an exchange whose first reply, judged on the event loop, needs a wait.
    nonisolated(nonsending) func resume(after verdict: Verdict, headerTags: [String]?, _ p: PreparedRequest, _ attempt: Attempt) async -> Result {
        switch Self.tagged(await follow(verdict, p, attempt), headerTags) {
        case .done(let result):
            return result
        case .replay(let fresh):
            var attempt = attempt
            attempt.token = fresh
            attempt.replays += 1
            return await exchange(p, attempt)
        }
    }

    // MARK: Judging a reply

    /// Step 6 for one upstream reply.
    nonisolated(nonsending) private func judge(_ response: UpstreamResponse, _ p: PreparedRequest, _ attempt: Attempt) async -> Step {
        let (verdict, tags) = verdict(response, p, attempt)
        return Self.tagged(await follow(verdict, p, attempt), tags)
    }

    /// What a verdict waits for, then its step.
    nonisolated(nonsending) private func follow(_ verdict: Verdict, _ p: PreparedRequest, _ attempt: Attempt) async -> Step {
        switch verdict {
        case .step(let step):
            return step
        case .renew(let stale, let upstreamAnswer):
            return await renew(p, replacing: stale, attempt, upstreamAnswer: upstreamAnswer)
        case .logout(let reason, let upstreamAnswer):
            await (p.sessionUnit?.lifecycle ?? lifecycle).logout(ifAccessToken: attempt.token, reason: reason)
            return .done(.failure(upstreamAnswer))
        case .warn(let code, let actions, let json, let upstreamAnswer):
            await warn(code: code, actions: actions, json: json, p, token: attempt.token)
            return .done(.failure(upstreamAnswer))
        case .finishSuccess(let pending):
            return .done(await success.finish(pending))
        }
    }

    /// The verdict on one reply. The endpoint's `cache.tags_header` is taken out first: the
    /// client never sees it, and a stored reply carries its values as tags (``tagged(_:_:)``).
    func verdict(_ response: UpstreamResponse, _ p: PreparedRequest, _ attempt: Attempt) -> (Verdict, headerTags: [String]?) {
        guard let tagsHeader = p.endpoint.cache.tags.header, response.headers.contains(name: tagsHeader) else {
            return (verdictOfReply(response, p, attempt), nil)
        }
        var response = response
        let values = response.headers[tagsHeader]
        response.headers.remove(name: tagsHeader)
        return (verdictOfReply(response, p, attempt), values)
    }

    /// A stored reply's tags from the `tags_header` values.
    static func tagged(_ step: Step, _ headerTags: [String]?) -> Step {
        guard let headerTags, case .done(.success(let answer, var storable?)) = step else { return step }
        storable.headerTags = headerTags
        return .done(.success(answer, storable: storable))
    }

    /// The envelope, then renew-and-replay, logout or success.
    private func verdictOfReply(_ response: UpstreamResponse, _ p: PreparedRequest, _ attempt: Attempt) -> Verdict {
        let headers = HopByHopFields.endToEnd(response.headers, dropping: Self.replacedInReplies)
        var upstreamAnswer = attempt.answer(ProxyReply(status: response.status, headers: headers, body: .buffer(response.body)), p)
        if let stale = attempt.token, p.config.settings.session.refreshOnStatus.contains(response.status) {
            // An expiry signal by HTTP status (OAuth2's 401): renew and replay.
            return .renew(stale: stale, upstreamAnswer: upstreamAnswer)
        }
        if p.endpoint.httpCaching, !p.endpoint.envelope {
            // HTTP caching without an envelope: the cache judges every status by RFC 9111
            // (``HTTPCaching``); a server error is a failure that a stale entry may stand in
            // for (RFC 5861 `stale-if-error`), unless it gives its own freshness (then it may
            // be stored like any reply).
            if [500, 502, 503, 504].contains(response.status), !HTTPCaching.hasExplicitFreshness(headers) {
                return .step(.done(.upstreamDown(upstreamAnswer)))
            }
            upstreamAnswer.report.succeeded = response.status < 400
            return .step(.done(.success(upstreamAnswer, storable: Storable(status: response.status,
                                                                           headers: Self.storedHeaders(headers, keepingCookies: true),
                                                                           body: response.body))))
        }
        guard p.endpoint.envelope else {
            // Non-JSON but cacheable: HTTP 2xx is the success.
            guard (200..<300).contains(response.status) else { return .step(.done(.failure(upstreamAnswer))) }
            upstreamAnswer.report.succeeded = true
            let storable = Self.storableStatuses.contains(response.status) && !Self.noStore(response.headers)
                && Self.servesEveryClient(response.headers)
            return .step(.done(.success(upstreamAnswer, storable: storable ? Storable(status: response.status, headers: Self.storedHeaders(headers),
                                                                                         body: response.body) : nil)))
        }
        if response.status >= 500 {
            stats.increment(.upstreamErrors)
            logger.warning("upstream answered an HTTP error", metadata: p.logMetadata(["endpoint": "\(p.endpoint.name)", "status": "\(response.status)"]))
            return .step(.done(.upstreamDown(attempt.answer(LocalReplies.unavailable(p.config), p))))
        }
        return verdictOfEnvelope(response, consume upstreamAnswer, p, attempt)
    }

    /// The envelope: the business code decides; the whole tree is parsed only when a later step
    /// reads it, else a scan finds just the code.
    private func verdictOfEnvelope(_ response: UpstreamResponse, _ upstreamAnswer: consuming ProxyAnswer, _ p: PreparedRequest,
                                   _ attempt: Attempt) -> Verdict {
        let runtime = p.config
        let envelope = runtime.envelope
        // Read field by field: binding `settings.session` copied the whole section per reply.
        let capture = runtime.settings.session.kind == .user ? runtime.settings.session.capture.flatMap { $0.endpoint == p.endpoint.name ? $0 : nil } : nil
        let needsTree = capture != nil || !p.endpoint.validate.isEmpty || p.endpoint.unwrap != nil || !envelope.envelope.warningCodes.isEmpty
        // The tree only when a later step reads it; else the code alone (`json` stays nil).
        let json: JSONValue?
        var outcome: EnvelopeReader.Outcome
        if needsTree {
            json = JSONValue.parse(response.body.readableBytesView)
            outcome = envelope.classify(json, status: response.status)
            upstreamAnswer.report.businessCode = envelope.code(in: json)
        } else {
            json = nil
            (outcome, upstreamAnswer.report.businessCode) = envelope.judge(response.body.readableBytesView, status: response.status)
        }
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
            return .step(.done(.failure(upstreamAnswer)))
        case .notJSON:
            logger.warning("upstream reply is not JSON", metadata: p.logMetadata(["endpoint": "\(p.endpoint.name)", "status": "\(response.status)",
                                                                                  "bytes": "\(response.body.readableBytes)"]))
            return .step(.done(.failure(attempt.answer(LocalReplies.unavailable(p.config), p))))
        case .refresh:
            guard let stale = attempt.token else { return .step(.done(.failure(upstreamAnswer))) }
            return .renew(stale: stale, upstreamAnswer: upstreamAnswer)
        case .logout(let code):
            return .logout(reason: code.jsonValue, upstreamAnswer: upstreamAnswer)
        case .failure(let code):
            if let code = code?.number, let actions = envelope.envelope.warningCodes[code] {
                return .warn(code: code, actions: actions, json: json, upstreamAnswer: upstreamAnswer)
            }
            return .step(.done(.failure(upstreamAnswer)))
        case .success:
            switch success.settle(consume upstreamAnswer, response: response, json: json, captured: captured, capture: capture, p, attempt) {
            case .done(let result): return .step(.done(result))
            case .waits(let pending): return .finishSuccess(pending)
            }
        }
    }

    /// An expiry signal on a request that carried `stale`: one renewal through the single
    /// flight, then a replay, at most `session.max_replays` times.
    nonisolated(nonsending) private func renew(_ p: PreparedRequest, replacing stale: String, _ attempt: Attempt, upstreamAnswer: ProxyAnswer) async -> Step {
        let session = p.config.settings.session
        guard attempt.replays < session.maxReplays else {
            logger.warning("token still expired after the last replay", metadata: p.logMetadata(["endpoint": "\(p.endpoint.name)", "replays": "\(attempt.replays)"]))
            return .done(.failure(upstreamAnswer))
        }
        let outcome = await (p.sessionUnit?.refresher ?? refresher).freshToken(replacing: stale, trace: p.trace)
        switch outcome {
        case .refreshed(let fresh):
            return .replay(fresh)
        case .loggedOut:
            let (reply, code) = LocalReplies.notLoggedIn(p.config)
            return .done(.failure(attempt.answer(reply, p, code: code)))
        case .unavailable, .throttled:
            // The session is kept: a throttled or failed renewal is never `not_logged_in`.
            return .done(.failure(attempt.answer(LocalReplies.tokenUnavailable(p.config, retryAfter: outcome.retryAfter), p)))
        }
    }

    nonisolated(nonsending) private func warn(code: Int, actions: Set<ConciergeConfig.WarningAction>, json: JSONValue?, _ p: PreparedRequest, token: String?) async {
        let message = p.config.envelope.message(json) ?? ""
        if actions.contains(.log) {
            logger.warning("warning code from upstream", metadata: p.logMetadata(["code": "\(code)", "endpoint": "\(p.endpoint.name)", "msg": "\(message)"]))
        }
        let lifecycle = p.sessionUnit?.lifecycle ?? self.lifecycle
        if actions.contains(.event) {
            lifecycle.events.publish("warning", lifecycle.eventData(["code": .int(Int64(code)), "endpoint": .string(p.endpoint.name),
                                                                     "msg": .string(message)]))
        }
        if actions.contains(.logout) {
            await lifecycle.logout(ifAccessToken: token, reason: .int(Int64(code)))
        }
    }

    /// `Cache-Control: no-store` or `private` (parsed by its grammar, ``CacheControl``): a shared
    /// cache keeps no such reply.
    static func noStore(_ headers: HTTPHeaders) -> Bool {
        // The grammar's parse only when a line names one of them at all: a directive's name
        // is in its line's bytes (any case). Most replies say neither (`max-age=60`).
        var named = false
        for (name, value) in headers where name.utf8.count == 13 && ASCIICase.equals(name, lowercase: "cache-control") {
            if ASCIICase.contains(value, lowercase: "no-store") || ASCIICase.contains(value, lowercase: "private") {
                named = true
                break
            }
        }
        guard named else { return false }
        let directives = CacheControl(headers["cache-control"])
        return directives.noStore || directives.isPrivate
    }

    /// The statuses a reply without an envelope is stored with: complete representations only.
    /// Never a `206` (a part, which a later request without `Range` must not get) nor a `201`
    /// or `202` (the result of an action, not what the URL holds).
    static let storableStatuses: Set<Int> = [200, 203, 204]

    /// Headers kept with a stored entry. The upstream's `Date` and `Age` stay: a cached
    /// reply carries that `Date` and an `Age` that adds the upstream's (see ``CachedReply``).
    /// With `keepingCookies` (HTTP caching), `Set-Cookie` is kept as RFC 9111 §3.1 asks (a
    /// reply meant for one client says `private` or `no-cache="set-cookie"`).
    static func storedHeaders(_ headers: HTTPHeaders, keepingCookies: Bool = false) -> HTTPHeaders {
        let dropped = keepingCookies ? notStoredHTTP : notStored
        // Usually none of them is there: the list is then kept as it is, with no copy made to find out.
        guard headers.contains(where: { ASCIICase.equalsAny($0.name, lowercase: dropped) }) else { return headers }
        var kept: [(String, String)] = []
        kept.reserveCapacity(headers.count)
        for (name, value) in headers where !ASCIICase.equalsAny(name, lowercase: dropped) {
            kept.append((name, value))
        }
        return kept.count == headers.count ? headers : HTTPHeaders(kept)
    }

    /// Reply headers never stored (lowercase).
    private static let notStored = ["set-cookie", "x-cache", "cache-status", "x-concierge-replays", "content-length"]
    private static let notStoredHTTP = ["x-cache", "cache-status", "x-concierge-replays", "content-length"]

    /// Whether a reply may be stored and served to any client: not encoded (despite
    /// asking for identity, ``request(_:_:)``), and varying on nothing but
    /// `Accept-Encoding` (the stored body is identity, which every client takes). The cache
    /// key has no room for other variants, so those replies are not stored.
    static func servesEveryClient(_ headers: HTTPHeaders) -> Bool {
        for value in headers["content-encoding"] where FieldList.elements(value) != ["identity"] { return false }
        for value in headers["vary"] {
            if FieldList.elements(value).contains(where: { $0 != "accept-encoding" }) { return false }
        }
        return true
    }
}
