import ConciergeCore
import Foundation
import NIOCore

extension ProxyPipeline {
    /// A fresh hot-tier hit (or a local answer), or the preparation to go on with.
    enum FastPath: Sendable {
        case answer(ProxyAnswer)
        /// A hit as ready bytes (only when the caller asked for them), with the recipe the
        /// thread's ``HitMemo`` keeps for the request (`nil` when it keeps none).
        case encodedHit(EncodedHit, recipe: HitMemo.Recipe?)
        /// The preparation to go on with; `hotTierMiss`: the hot tier was asked for the
        /// request's key and had no entry at all (a miss that may go on on the event loop,
        /// ``missOnLoop(_:on:answer:)``).
        case prepared(Preparation, hotTierMiss: Bool)
    }

    /// The synchronous subset of the path that a listener runs on its event loop: steps 2–3
    /// (prepare, then a fresh hot-tier hit), without a task or any I/O. A request prepared before under the
    /// same route and session reuses its key from the thread's ``HitMemo``.
    ///
    /// - Parameter encoded: the caller can write a hit as ready HTTP/1.1 bytes (a keep-alive
    ///   HTTP/1.1 `GET`).
    func fastPath(_ incoming: IncomingRequest, encoded: Bool = false) -> FastPath {
        let route = incoming.route ?? runtime.route(method: incoming.method, target: incoming.target)
        // Before the hit memo, which answers without preparing.
        if route.config.accessControlled, let refused = accessRefusal(incoming, route: route) { return .answer(refused) }
        let session = self.session.current
        let memo = encoded ? hitMemos.current : nil
        let now = cache.clock.now
        if let recipe = memo?.recipe(for: incoming, route: route, session: session), let hit = freshHit(recipe, now: now) {
            return .encodedHit(hit, recipe: recipe)
        }
        let preparation = prepare(incoming, route: route, session: session)
        if case .answer(let answer) = preparation { return .answer(answer) }
        // `mode: http` reads the request's directives and `Vary` first: not here.
        guard case .ready(let p, _) = preparation, let key = p.hashedCacheKey, !p.bypass, !p.endpoint.httpCaching else {
            return .prepared(preparation, hotTierMiss: false)
        }
        guard let entry = cache.hotLookup(key, now: now) else { return .prepared(preparation, hotTierMiss: true) }
        guard entry.isFresh(at: now) else { return .prepared(preparation, hotTierMiss: false) }
        if encoded, let hit = CachedReply.encoded(entry, endpoint: p.endpoint, now: now) {
            let recipe = memo?.remember(incoming, route: route, session: session, key: key, endpoint: p.endpoint)
            return .encodedHit(hit, recipe: recipe)
        }
        return .answer(CachedReply.make(entry, p, status: .hit, now: now))
    }

    /// The hit for a request recognised by its bytes (``HitMemo/Replay``), under the checks a
    /// recipe passes in ``fastPath(_:encoded:)``: the same configuration object and
    /// environment, the same session, a fresh hot-tier entry. `nil` sends the bytes to the
    /// parser and the full path.
    func replayedHit(of bytes: ByteBuffer) -> (hit: EncodedHit, incoming: IncomingRequest)? {
        guard let replay = hitMemos.current.replay(for: bytes) else { return nil }
        let (config, environment) = runtime.snapshot
        // Remembered bytes say nothing of who sent them: with `clients`, the parsed path checks.
        guard !config.accessControlled, replay.recipe.holds(config: config, environment: environment, session: session.current),
              let hit = freshHit(replay.recipe, now: cache.clock.now) else { return nil }
        return (hit, replay.incoming)
    }

    /// The recipe's entry as ready bytes, when it is a fresh hot-tier hit.
    private func freshHit(_ recipe: HitMemo.Recipe, now: Double) -> EncodedHit? {
        guard let entry = cache.hotLookup(recipe.key, now: now), entry.isFresh(at: now) else { return nil }
        return CachedReply.encoded(entry, endpoint: recipe.endpoint, now: now)
    }

    /// Remembers a head that arrived alone in one read and was answered as `recipe` says.
    func rememberReplay(_ bytes: ByteBuffer, incoming: IncomingRequest, recipe: HitMemo.Recipe) {
        hitMemos.current.rememberReplay(bytes, incoming: incoming, recipe: recipe)
    }
}
