import ConciergeCore
import NIOCore

extension ProxyPipeline {
    /// Steps 4–9 of the usual miss as callbacks on the connection's event loop: no task, no
    /// executor hop, no future awaited. The same steps as the awaited miss
    /// (``awaitedMiss(_:key:)``), in the same order, for a request the plan found every one of
    /// them decided without waiting for (``RequestPlan/LoopMiss``):
    ///
    /// 4. lookup: neither the hot tier nor the key index knows the key (no SQLite read can
    ///    find it; no stale entry can stand in), and there is no fleet shared cache to ask;
    /// 5. coalesce: no other request is fetching the key (this one leads, and requests that
    ///    arrive meanwhile wait for it as for any leader);
    /// 6. exchange: the token needs no renewal before sending, and the transport starts the
    ///    exchange on this loop (``UpstreamTransport/start(_:maxBody:on:reply:)``); the reply is
    ///    judged here (``UpstreamExchange/judgeFirst(_:_:_:elapsed:)``);
    /// 7–8. success steps and store, as ``store(_:_:key:sharedSeen:)``; 9. the answer.
    ///
    /// A reply whose verdict needs a wait (renew and replay, logout, a warning action, capture,
    /// `invalidates`) goes on in a task (``UpstreamExchange/resume(after:headerTags:_:_:)``),
    /// whose answer is handed back to `eventLoop`.
    ///
    /// No future is made: the transport calls back with the reply and this calls `answer`
    /// (each future costs ~3k instructions: its allocation, its callbacks and, in NIO's generic
    /// deinit, run-time metadata lookups).
    ///
    /// - Returns: `false` when another request leads the key or the transport cannot start
    ///   on this loop (the caller runs ``RequestPlan/LoopMiss/awaited``; `answer` is never
    ///   called); else `answer` is called once, on `eventLoop`.
    func missOnLoop(_ miss: RequestPlan.LoopMiss, on eventLoop: any EventLoop, answer: @escaping @Sendable (ProxyAnswer) -> Void) -> Bool {
        let (p, key, attempt) = (miss.request, miss.key, miss.attempt)
        var request = exchange.request(p, attempt)
        guard coalescer.lead(key) else { return false }
        p.trace?.beginAttempt(&request, replays: 0)
        let started = ContinuousClock.now
        let sent = exchange.transport.start(request, maxBody: p.config.settings.limits.maxBodyBytes, on: eventLoop) { outcome in
            switch self.exchange.judgeFirst(outcome.mapError { $0 }, p, attempt, elapsed: ContinuousClock.now - started) {
            case .done(let result):
                answer(self.missAnswer(result, p, key: key))
            case .waits(let verdict, let headerTags, let attempt):
                // Unstructured because this is an event loop callback, with no task to be a child
                // of: the bridge to the async resume, answered back on `eventLoop`.
                Task {
                    let result = self.missAnswer(await self.exchange.resume(after: verdict, headerTags: headerTags, p, attempt), p, key: key)
                    eventLoop.execute { answer(result) }
                }
            }
        }
        if !sent { coalescer.hand(key, nil) }
        return sent
    }

    /// Steps 8–9 of a miss this request led: store, hand the result to the requests that
    /// waited for it, the answer with its cache headers.
    private func missAnswer(_ result: UpstreamExchange.Result, _ p: PreparedRequest, key: HashedKey) -> ProxyAnswer {
        let fetched = store(result, p, key: key, sharedSeen: nil)
        coalescer.hand(key, fetched)
        return withCacheHeaders(fetched, .miss)
    }
}
