import ConciergeCore
import ConciergeStorage
import Foundation
import NIOCore

extension ProxyPipeline {
    /// Steps 2–3 and the plan for the rest (``RequestPlan/decide(_:hotTier:loopMiss:hit:)``).
    ///
    /// On the event loop (`onLoop`, the listener's handler), the hot tier is asked: a fresh
    /// hit is planned as an answer (as ready bytes when `encoded`), and a key it lacks as a
    /// miss on the loop when the key index, the fleet's shared cache and the token need no
    /// wait. A request prepared before under the same route and session reuses its key from
    /// the thread's ``HitMemo``. Off the loop (batch, chain, a streamed body), nothing is read
    /// before step 4, which reads the hot tier and SQLite in the task.
    ///
    /// - Parameter encoded: the caller can write a hit as ready HTTP/1.1 bytes (a keep-alive
    ///   HTTP/1.1 `GET`).
    func plan(_ incoming: IncomingRequest, encoded: Bool = false, onLoop: Bool = true) -> RequestPlan {
        // The session (and who may use it) before the hit memo, which answers without preparing.
        let choice: SessionChoice
        switch selectSession(incoming, route: incoming.route ?? runtime.route(method: incoming.method, target: incoming.target)) {
        case .answer(let answer): return .answer(answer)
        case .chosen(let chosen): choice = chosen
        case .firstUse(let unit, let id): return .task(.firstUse(incoming, session: unit, id: id))
        }
        let (route, session) = (choice.route, choice.tokens)
        guard onLoop else {
            return RequestPlan.decide(prepare(incoming, choice), hotTier: { _ in .notAsked },
                                      loopMiss: { _, _ in nil }, hit: { _, p, key in .task(.awaitedMiss(p, key: key.text)) })
        }
        let memo = encoded ? hitMemos.current : nil
        let now = cache.clock.now
        if let recipe = memo?.recipe(for: incoming, route: route, session: session, slot: choice.slot), let hit = freshHit(recipe, now: now) {
            return .encodedHit(hit, recipe: recipe)
        }
        let cache = self.cache
        return RequestPlan.decide(prepare(incoming, choice), hotTier: { key in
            // `mode: http` reads the request's directives and `Vary` first: the plan never asks for it.
            guard let entry = cache.hotLookup(key, now: now) else { return .absent }
            return entry.isFresh(at: now) ? .fresh(CachedReply.withEncodedHead(entry, in: cache)) : .notFresh
        }, loopMiss: { p, key in
            // No SQLite read can find the key, and no shared cache is to be asked.
            guard shared == nil, !cache.mayHaveRow(key) else { return nil }
            return exchange.firstAttemptWithoutWaiting(p)
        }, hit: { entry, p, key in
            if encoded, let hit = CachedReply.encoded(entry, endpoint: p.endpoint, now: now) {
                let recipe = memo?.remember(incoming, route: route, session: session, unit: choice.slot as? SessionUnit, key: key,
                                            endpoint: p.endpoint)
                return .encodedHit(hit, recipe: recipe)
            }
            return .answer(CachedReply.make(entry, p, status: .hit, now: now))
        })
    }

    /// The hit for a request recognised by its bytes (``HitMemo/Replay``), under the checks a
    /// recipe passes in ``plan(_:encoded:onLoop:)``: the same configuration object and
    /// environment, the same session, a fresh hot-tier entry. `nil` sends the bytes to the
    /// parser and the full path.
    ///
    /// The same bytes choose the same session (the endpoint's, the `Concierge-Session-Name`
    /// header's, the `per_client` id header's) but on a listener with a session of its own
    /// (`listenerSession`, compared with the one the bytes came on first). The session's
    /// tokens are those of the live session or instance the recipe was made under, read
    /// now (never `default`'s for another session's recipe); an instance its table forgot
    /// (idle) no longer answers: the caller's id has a new one.
    func replayedHit(of bytes: ByteBuffer, listenerSession: String? = nil) -> (hit: EncodedHit, incoming: IncomingRequest)? {
        guard let replay = hitMemos.current.replay(for: bytes) else { return nil }
        let (config, environment) = runtime.snapshot
        let recipe = replay.recipe
        // Remembered bytes say nothing of who sent them: with `clients`, the parsed path checks.
        guard !config.accessControlled, replay.incoming.identity.listenerSession == listenerSession,
              let view = config.view(forSession: recipe.config.sessionName) else { return nil }
        let tokens: SessionTokens?
        if let unit = recipe.unit {
            guard !unit.isForgotten else { return nil }
            tokens = unit.currentTokens
        } else {
            tokens = session.current
        }
        guard recipe.holds(config: view, environment: environment, session: tokens), let hit = freshHit(recipe, now: cache.clock.now) else {
            return nil
        }
        return (hit, replay.incoming)
    }

    /// The recipe's entry as ready bytes, when it is a fresh hot-tier hit.
    private func freshHit(_ recipe: HitMemo.Recipe, now: Double) -> EncodedHit? {
        guard let entry = cache.hotLookup(recipe.key, now: now), entry.isFresh(at: now) else { return nil }
        return CachedReply.encoded(CachedReply.withEncodedHead(entry, in: cache), endpoint: recipe.endpoint, now: now)
    }

    /// Remembers a head that arrived alone in one read and was answered as `recipe` says.
    func rememberReplay(_ bytes: ByteBuffer, incoming: IncomingRequest, recipe: HitMemo.Recipe) {
        hitMemos.current.rememberReplay(bytes, incoming: incoming, recipe: recipe)
    }
}
