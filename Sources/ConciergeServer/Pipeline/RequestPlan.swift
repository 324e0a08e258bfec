import ConciergeCore
import ConciergeStorage
import NIOCore

/// How one request is answered: decided once, by ``decide(_:hotTier:loopMiss:)``, then carried
/// out by whoever can: the connection's handler on its event loop (``answer(_:)``,
/// ``encodedHit(_:recipe:)``, ``missOnLoop(_:)``: ``ProxyPipeline/missOnLoop(_:on:answer:)``) or a
/// task (``task(_:)``: ``ProxyPipeline/run(_:)``). In the style of async-http-client's
/// connection state machines, which return actions: the decision is one function, the carrying
/// out another, and nothing downstream decides the path again.
///
/// A new step before the path splits (say, which session a request runs under) is a field of
/// ``PreparedRequest`` or a case here; the cases carry what their step needs and nothing else.
enum RequestPlan: Sendable {
    /// Answered on the event loop: a fresh hot-tier hit as a reply, or a local answer (the
    /// login guard).
    case answer(ProxyAnswer)
    /// A fresh hot-tier hit as ready HTTP/1.1 bytes, with the recipe the thread's ``HitMemo``
    /// keeps for the request (`nil`: it keeps none).
    case encodedHit(EncodedHit, recipe: HitMemo.Recipe?)
    /// The usual miss, steps 4–9 as callbacks on the connection's event loop.
    case missOnLoop(LoopMiss)
    /// The rest in a task (``ProxyPipeline/run(_:)``).
    case task(TaskPlan)

    /// The paths carried out in a task.
    enum TaskPlan: Sendable {
        /// Steps 4–9 awaited: lookup (hot tier, SQLite, the fleet's shared cache), coalesce,
        /// exchange, store.
        case awaitedMiss(PreparedRequest, key: String)
        /// The client asked to bypass the cache: exchange, store.
        case bypass(PreparedRequest, key: String)
        /// `cache.mode: http` and a safe method: RFC 9111's steps 4–9
        /// (``ProxyPipeline/handleHTTPCaching(_:key:)``).
        case httpCaching(PreparedRequest, key: String)
        /// `cache.mode: http` and an unsafe method: the exchange, then what it invalidates.
        case unsafeHTTP(PreparedRequest)
        /// An envelope or cached endpoint with no cache key for this request: one exchange.
        case exchange(PreparedRequest)
        /// An opaque endpoint (neither envelope nor cached): both bodies stream through.
        case passThrough(PreparedRequest, body: IncomingRequest.Body?)
        /// The first use of a `per_client` instance not loaded: read from SQLite off the event
        /// loop, then the request planned again (``ProxyPipeline/firstUse(_:session:id:)``).
        case firstUse(IncomingRequest, session: SessionUnit, id: String)

        /// The request's trace, when it is traced.
        var trace: RequestTrace? {
            switch self {
            case .awaitedMiss(let p, _), .bypass(let p, _), .httpCaching(let p, _), .exchange(let p), .passThrough(let p, _): return p.trace
            case .unsafeHTTP(let p): return p.trace
            case .firstUse(let incoming, _, _): return incoming.trace
            }
        }
    }

    /// The usual miss that the event loop can carry: everything steps 4–6 need was found
    /// without a wait.
    struct LoopMiss: Sendable {
        let request: PreparedRequest
        let key: HashedKey
        /// The first attempt, with the token to inject.
        let attempt: UpstreamExchange.Attempt

        /// The same miss awaited in a task: when the coalescer already has a leader for the
        /// key, or the transport cannot start the exchange on the loop.
        var awaited: TaskPlan { .awaitedMiss(request, key: key.text) }
    }

    /// What the hot tier holds for a key, as the plan reads it (only on the event loop).
    enum HotTier {
        /// Not asked: off the event loop, step 4 reads the hot tier and SQLite in the task.
        case notAsked
        case fresh(CacheEntry)
        /// An entry that is no longer fresh: it may still stand in (stale-while-revalidate,
        /// stale-if-error), so step 4 runs in full.
        case notFresh
        /// No entry at all: the miss may go on on the loop.
        case absent
    }

    /// The one place a request's path is decided, from its preparation (step 2) and what the
    /// two probes read: the hot tier's entry for the key (``HotTier``; step 3) and, for a key
    /// the hot tier lacks, the first attempt of a miss that needs no wait (`nil`: some part of
    /// steps 4–6 does). No other input, no side effect.
    ///
    /// `hit` turns a fresh hot-tier entry into its plan (a reply or ready bytes).
    static func decide(_ preparation: ProxyPipeline.Preparation, hotTier: (HashedKey) -> HotTier,
                       loopMiss: (PreparedRequest, HashedKey) -> UpstreamExchange.Attempt?,
                       hit: (CacheEntry, PreparedRequest, HashedKey) -> RequestPlan) -> RequestPlan {
        let p: PreparedRequest
        var streams = false
        switch preparation {
        case .answer(let answer): return .answer(answer)
        case .ready(let prepared, let streamedBody):
            guard prepared.endpoint.envelope || prepared.endpoint.isCacheable else { return .task(.passThrough(prepared, body: streamedBody)) }
            p = prepared
            streams = streamedBody != nil
        }
        if p.endpoint.httpCaching, !ProxyPipeline.safeMethods.contains(p.request.method) { return .task(.unsafeHTTP(p)) }
        guard let hashed = p.hashedCacheKey else { return .task(.exchange(p)) }
        if p.endpoint.httpCaching { return .task(.httpCaching(p, key: hashed.text)) }
        if p.bypass { return .task(.bypass(p, key: hashed.text)) }
        switch hotTier(hashed) {
        case .fresh(let entry):
            return hit(entry, p, hashed)
        case .absent:
            guard !streams, let attempt = loopMiss(p, hashed) else { return .task(.awaitedMiss(p, key: hashed.text)) }
            return .missOnLoop(LoopMiss(request: p, key: hashed, attempt: attempt))
        case .notAsked, .notFresh:
            return .task(.awaitedMiss(p, key: hashed.text))
        }
    }
}
