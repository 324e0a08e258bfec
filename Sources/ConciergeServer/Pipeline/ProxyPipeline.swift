import ConciergeCore
import ConciergeStorage
import Foundation
import NIOCore
import Synchronization

/// The request path, in the steps of docs/architecture.md (the listener did step 1, receive):
///
/// 2. prepare (``PreparedRequest``): route, common params, login guard, token choice, cache
///    scope and key;
/// 3. the plan (``plan(_:encoded:onLoop:)``, ``RequestPlan``): a fresh hot-tier hit, the
///    usual miss as callbacks on the event loop (``missOnLoop(_:on:answer:)``), or one of
///    the paths below, carried out in a task by ``run(_:)``;
/// 4. lookup: a fresh entry answers (``CachedReply``), a stale one may answer while it is
///    revalidated (``RevalidationService``); in a fleet with a shared cache, a fresh shared
///    entry answers next (``FleetSharedCache``) and is kept here;
/// 5. coalesce: concurrent misses share one upstream call (``MissCoalescer``);
/// 6. exchange (``UpstreamExchange``): inject, sign, send, read the envelope, renew and
///    replay, log out;
/// 7. success steps (``EnvelopeSuccess``): validate, capture, invalidate, unwrap;
/// 8. store what may be stored; 9. reply. Opaque requests skip 4–8 and stream through
///    ``UpstreamExchange/forwardStreamed(_:body:)``.
///
/// The path is decided once, by ``RequestPlan/decide(_:hotTier:loopMiss:hit:)``; what
/// carries a plan out never decides it again.
public final class ProxyPipeline: Sendable {
    let runtime: Runtime
    let cache: CacheStore
    let session: SessionState
    let exchange: UpstreamExchange
    let events: EventBus
    let coalescer = MissCoalescer<Fetched>()
    /// What replies vary on, for `mode: http` (``handleHTTPCaching(_:key:)``).
    let varyIndex = VaryIndex()
    /// The variant keys `mode: http` stored, for an unsafe request's invalidation.
    let variantKeys = URLVariantKeys()
    let hitMemos = HitMemos()
    /// Runs stale-while-revalidate refreshes (a service of the daemon's group).
    let revalidation: RevalidationService
    /// The fleet's shared cache, with `fleet.shared_cache: true`.
    let shared: FleetSharedCache?
    /// The live sessions (`per_client` instances are found through it); `nil` in unit tests
    /// that run `default` alone.
    let sessions: SessionRegistry?

    init(runtime: Runtime, cache: CacheStore, exchange: UpstreamExchange, revalidation: RevalidationService, shared: FleetSharedCache? = nil,
         sessions: SessionRegistry? = nil) {
        (self.runtime, self.cache, self.exchange, self.revalidation, self.shared) = (runtime, cache, exchange, revalidation, shared)
        self.sessions = sessions
        (session, events) = (exchange.lifecycle.session, exchange.lifecycle.events)
    }

    /// A request after step 2 (prepare), or its answer when the login guard refused it.
    enum Preparation: Sendable {
        case ready(PreparedRequest, streamedBody: IncomingRequest.Body?)
        case answer(ProxyAnswer)
    }

    func prepare(_ incoming: IncomingRequest, _ choice: SessionChoice) -> Preparation {
        var buffered: ByteBuffer? = nil
        if case .buffered(let body) = incoming.body { buffered = body }
        let received = PreparedRequest.Received(method: incoming.method, target: incoming.target, headers: incoming.headers,
                                                body: buffered, clientAddress: incoming.clientAddress)
        let route = choice.route
        switch PreparedRequest.prepare(received, route: route, session: choice.tokens, slot: choice.slot) {
        case .ready(var prepared):
            if let trace = incoming.trace {
                prepared.traceCarrier = trace
                trace.chose(session: route.config.sessionName)
            }
            return .ready(prepared, streamedBody: buffered == nil ? incoming.body : nil)
        case .notLoggedIn(let endpoint):
            let (reply, code) = LocalReplies.notLoggedIn(route.config)
            return .answer(ProxyAnswer(reply, RequestReport(endpoint: endpoint, businessCode: code)))
        }
    }

    nonisolated(nonsending) public func handle(_ incoming: IncomingRequest) async -> ProxyAnswer {
        await answer(plan(incoming, onLoop: false))
    }

    /// The answer to a request planned off the event loop.
    nonisolated(nonsending) func answer(_ plan: RequestPlan) async -> ProxyAnswer {
        switch plan {
        case .answer(let answer): return answer
        case .task(let plan): return await run(plan)
        // Planned only on the event loop.
        case .encodedHit(let hit, _): return hit.answer
        case .missOnLoop(let miss): return await run(miss.awaited)
        }
    }

    /// Carries out a plan in a task (``RequestPlan/decide(_:hotTier:loopMiss:hit:)`` chose it):
    /// steps 4–9 in the order of docs/architecture.md. The log lines of a traced request's work
    /// carry its trace ids.
    nonisolated(nonsending) func run(_ plan: RequestPlan.TaskPlan) async -> ProxyAnswer {
        await TraceLogContext.withTrace(plan.trace) { await carryOut(plan) }
    }

    private nonisolated(nonsending) func carryOut(_ plan: RequestPlan.TaskPlan) async -> ProxyAnswer {
        switch plan {
        case .passThrough(let p, let body):
            return await exchange.forwardStreamed(p, body: body)
        case .unsafeHTTP(let p):
            return await handleUnsafeHTTP(p)
        case .exchange(let p):
            var answer = await exchange.run(p).answer
            if p.endpoint.isCacheable { answer.reply.headers.replaceOrAdd(name: "X-Cache", value: CacheStatus.miss.rawValue) }
            return answer
        case .httpCaching(let p, let key):
            return await handleHTTPCaching(p, key: key)
        case .bypass(let p, let key):
            return withCacheHeaders(await fetchAndStore(p, key: key), .bypass)
        case .awaitedMiss(let p, let key):
            return await awaitedMiss(p, key: key)
        case .firstUse(let incoming, let session, let id):
            return await firstUse(incoming, session: session, id: id)
        }
    }

    /// Steps 4–9 of a request with a key and a TTL, awaited: lookup (hot tier and SQLite, a
    /// stale entry within `stale_while_revalidate`, the fleet's shared cache), coalesce,
    /// exchange and store, a stale entry within `stale_if_error` when the upstream is down.
    nonisolated(nonsending) func awaitedMiss(_ p: PreparedRequest, key: String) async -> ProxyAnswer {
        let now = cache.clock.now
        let entry = await cache.lookup(key, onSQLiteRead: p.trace?.cacheReadRecorder)
        if let entry, entry.isFresh(at: now) {
            return CachedReply.make(entry, p, status: .hit, now: now)
        }
        if let entry, now < entry.freshUntil + entry.staleWhileRevalidate {
            revalidateInBackground(p, key: key)
            return CachedReply.make(entry, p, status: .stale, now: now, detail: "stale-while-revalidate")
        }
        if let shared, let found = await shared.lookup(key), found.isFresh(at: now) {
            cache.store(found)
            return CachedReply.make(found, p, status: .hit, now: now, detail: "fleet")
        }
        let fetched = await coalescer.run(key: key, trace: p.trace) { await self.fetchAndStore(p, key: key) }
        if case .upstreamDown = fetched.result, let entry, now < entry.freshUntil + entry.staleIfError {
            return CachedReply.make(entry, p, status: .stale, now: now, detail: "stale-if-error")
        }
        return withCacheHeaders(fetched, .miss)
    }

    /// An exchange's result and whether its reply went into the cache.
    struct Fetched: Sendable {
        var result: UpstreamExchange.Result
        var stored: Bool
        /// With `mode: http`, the variant key a reply with `Vary` was stored under.
        var variant: String? = nil
        /// With `mode: http`, the stale entry a `304` refreshed.
        var updated: CacheEntry? = nil
        /// With `mode: http`: the freshness the stored entry got (`Cache-Status: …; ttl=`), and
        /// which request made the exchange (a coalesced waiter's differs: `collapsed`).
        var storedTTL: Int? = nil
        var ledBy: UInt64 = 0
    }

    nonisolated(nonsending) private func fetchAndStore(_ p: PreparedRequest, key: String) async -> Fetched {
        let seen = shared?.appliedSeq
        return store(await exchange.run(p), p, key: HashedKey(key), sharedSeen: seen)
    }

    /// Step 8: an exchange's result, stored when it may be (`sharedSeen`: the fleet's applied
    /// invalidation number when the exchange began, with a shared cache).
    func store(_ result: UpstreamExchange.Result, _ p: PreparedRequest, key: HashedKey, sharedSeen seen: Int64?) -> Fetched {
        guard case .success(_, let storable?) = result else { return Fetched(result: result, stored: false) }
        let policy = p.endpoint.cache
        var entry = CacheEntry(key: key.text, endpoint: p.endpoint.name, userID: p.scope.userID, status: storable.status,
                               headers: storable.headers, body: storable.body, storedAt: cache.clock.now,
                               ttl: policy.ttl.seconds, staleWhileRevalidate: policy.staleWhileRevalidate.seconds,
                               staleIfError: policy.staleIfError.seconds, version: policy.version ?? p.config.settings.cache.version)
        entry.tags = Self.tags(p, storable)
        let stored = cache.store(entry, key: key)
        if stored, let shared, let seen { shared.store(entry, seen: seen) }
        return Fetched(result: result, stored: stored)
    }

    /// The tags of a reply to be stored (`cache.tags`, `cache.tags_header`).
    static func tags(_ p: PreparedRequest, _ storable: Storable) -> [String] {
        let tags = p.endpoint.cache.tags
        guard !tags.isEmpty else { return [] }
        let params = p.request.query + (p.request.paramsGoInQuery ? [] : p.request.body.params)
        let json = tags.readsJSON ? JSONValue.parse(storable.body.readableBytesView) : nil
        return tags.evaluate(path: p.request.path, params: params, json: json, headerValues: storable.headerTags)
    }

    /// A forwarded request's answer with its cache headers: `Cache-Status` says why it was
    /// forwarded (the cache missed, or the request asked to bypass it) and whether the reply
    /// was stored. The four values are literals: a joined string was an allocation a miss.
    func withCacheHeaders(_ fetched: Fetched, _ status: CacheStatus) -> ProxyAnswer {
        let cacheStatus = switch (status, fetched.stored) {
        case (.bypass, false): "concierge; fwd=request"
        case (.bypass, true): "concierge; fwd=request; stored"
        case (_, false): "concierge; fwd=miss"
        case (_, true): "concierge; fwd=miss; stored"
        }
        return Self.withStatus(fetched.result.answer, status, cacheStatus)
    }

    /// An answer from the upstream with its `X-Cache` and `Cache-Status`, and the report's status.
    static func withStatus(_ answer: ProxyAnswer, _ status: CacheStatus, _ cacheStatus: String) -> ProxyAnswer {
        var answer = answer
        answer.report.cache = status
        // Replaced when the upstream sent either (one look at the names' lengths first, as
        // each `replaceOrAdd` compares every name), else added.
        let sentEither = answer.reply.headers.contains { name, _ in
            switch name.utf8.count {
            case 7: ASCIICase.equals(name, lowercase: "x-cache")
            case 12: ASCIICase.equals(name, lowercase: "cache-status")
            default: false
            }
        }
        if sentEither {
            answer.reply.headers.replaceOrAdd(name: "X-Cache", value: status.rawValue)
            answer.reply.headers.replaceOrAdd(name: "Cache-Status", value: cacheStatus)
        } else {
            answer.reply.headers.add(name: "X-Cache", value: status.rawValue)
            answer.reply.headers.add(name: "Cache-Status", value: cacheStatus)
        }
        return answer
    }

    private func revalidateInBackground(_ p: PreparedRequest, key: String) {
        revalidation.submit(key: key) {
            _ = await self.coalescer.run(key: key) { await self.fetchAndStore(p, key: key) }
        }
    }
}
