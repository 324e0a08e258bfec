import ConciergeCore
import ConciergeStorage
import Foundation
import Synchronization

/// A token renewal for the whole fleet, under the session row's lock.
extension FleetSession {
    /// Renews the token `stale` once for the whole fleet: under the row's lock, a token the
    /// fleet already replaced is adopted (no token request); otherwise `fetch` (this node's
    /// token request, which stores its result locally) runs and its result is stored for all.
    /// With `loopGuard` (an expiry signal asked for it), a token request to replace a token the
    /// fleet got from a token request counts against the loop guard for the whole fleet.
    /// - Returns: `nil` when PostgreSQL did not answer in time: the caller renews alone.
    func renew(stale: String?, kind: SessionTokens.Kind, loopGuard: ConciergeConfig.RefreshLimit?, tokenTimeout: Duration,
               fetch: @escaping @Sendable () async -> TokenRefresher.Outcome) async -> TokenRefresher.Outcome? {
        let lockWait = tokenTimeout + config.timeout
        // What this node's own token request gave, if it made one: never made twice, and not
        // held back more than `fleet.timeout` × 5 by storing it for the fleet (a connection lost
        // mid-way may leave that waiting).
        let own = OwnTokenRequest()
        let (signals, signal) = AsyncStream.makeStream(of: RenewalSignal.self)
        let waiter = renewals.withLock { r in
            defer { r.next += 1 }
            r.waiting[r.next] = signal
            return r.next
        }
        defer { _ = renewals.withLock { $0.waiting.removeValue(forKey: waiter) } }
        let fetchOnce: @Sendable () async -> TokenRefresher.Outcome = {
            own.fetching.withLock { $0 = true }
            let outcome = await fetch()
            own.fetched.withLock { $0 = outcome }
            signal.yield(.fetched)
            return outcome
        }
        let storeWait = config.timeout * 5
        return await withTaskGroup(of: Void.self) { group in
            group.addTask {
                do {
                    // A database that is down or frozen is found out within `fleet.timeout`; past
                    // this point only another node's token request is waited for.
                    try await self.answers()
                    let outcome = try await self.underLock(waitingAtMost: lockWait, tokenTimeout: tokenTimeout, fetching: own.fetching) { row in
                        try await self.decide(row, stale: stale, kind: kind, loopGuard: loopGuard, fetch: fetchOnce)
                    }
                    signal.yield(.done(.success(outcome)))
                } catch {
                    signal.yield(.done(.failure(error)))
                }
            }
            // Whatever the answer, the wait for the lock and the store's timer stop with it (each
            // call to PostgreSQL under way is left to its deadline, ``Deadline``).
            defer { group.cancelAll() }
            return await awaitRenewal(signals, kind: kind, stale: stale, fetched: own.fetched, fetching: own.fetching) {
                group.addTask {
                    guard (try? await Task.sleep(for: storeWait)) != nil else { return }
                    signal.yield(.storeTimedOut)
                }
            }
        }
    }

    /// The renewal's answer, from what its signals tell. `fetchedLocally` starts the timer of
    /// the store for the fleet once this node's own token request has answered.
    private func awaitRenewal(_ signals: AsyncStream<RenewalSignal>, kind: SessionTokens.Kind, stale: String?,
                              fetched: borrowing Mutex<TokenRefresher.Outcome?>, fetching: borrowing Mutex<Bool>,
                              fetchedLocally: () -> Void) async -> TokenRefresher.Outcome? {
        // Set when the fleet failed this renewal while this node's own token request was under
        // way: that request's answer is awaited (never a second request beside it).
        var failure: (any Error)?
        for await event in signals {
            switch event {
            case .fetched:
                if let failure { return fallBack(fetched.withLock { $0 }, failure) }
                fetchedLocally()
            case .done(.success(let outcome)):
                markReachable()
                return outcome
            case .done(.failure(let error)):
                if fetching.withLock({ $0 }), fetched.withLock({ $0 }) == nil {
                    failure = error
                    continue
                }
                return fallBack(fetched.withLock { $0 }, error)
            case .storeTimedOut:
                return fallBack(fetched.withLock { $0 }, Deadline.Exceeded(limit: config.timeout * 5))
            case .adopted(let tokens):
                // Another node renewed and this node adopted its token (announced on the
                // listener's connection): unless this node's own token request is under way,
                // that is the answer, whatever became of this node's wait for the lock (a
                // connection cut mid-transaction may leave that waiting).
                guard tokens.kind == kind, tokens.accessToken != stale, !fetching.withLock({ $0 }) else { continue }
                return .refreshed(tokens.accessToken)
            }
        }
        return nil
    }

    /// Runs `decide` holding the fleet row's lock, waiting for it at most `wait` in all, in
    /// tries of ``lockSlice`` each: a try that neither gets the lock nor fails within its slice
    /// and `fleet.timeout` (its connection cut mid-transaction: the database client may never
    /// answer such a call) is abandoned, and the next one takes a new connection; so is a try
    /// whose connection was lost. An abandoned try that gets the lock later gives it back
    /// without deciding anything. Once a try holds the lock, `decide` (this node's token request
    /// included) runs to its end, within `tokenTimeout` and `fleet.timeout` more.
    private func underLock(waitingAtMost wait: Duration, tokenTimeout: Duration, fetching: borrowing Mutex<Bool>,
                           _ decide: @escaping @Sendable (FleetDatabase.SessionRow) async throws -> FleetDatabase.Renewal<TokenRefresher.Outcome>)
        async throws -> TokenRefresher.Outcome {
        let giveUp = ContinuousClock.now + wait
        while true {
            let slice = min(lockSlice, max(.milliseconds(1), giveUp - .now))
            let attempt = LockAttempt()
            do {
                return try await attempt.run(unanswered: slice + config.timeout, total: slice + tokenTimeout + config.timeout) {
                    try await self.database.withSessionLock(self.key, lockWait: slice) { row in
                        // Abandoned (its caller moved on to a new try): the lock goes back at once.
                        guard attempt.claim() else { return .keep(nil) }
                        return try await Self.$renewing.withValue(true) {
                            switch try await decide(row) {
                            case .keep(let outcome): return .keep(outcome)
                            case .store(let tokens, let outcome): return .store(tokens, outcome)
                            case .pace(let pacing, let outcome): return .pace(pacing, outcome)
                            }
                        }
                    }
                }
            } catch where ContinuousClock.now < giveUp && !fetching.withLock({ $0 })
                && (error is LockAttempt.Unanswered || FleetDatabase.lockNotAvailable(error) || FleetDatabase.connectionLost(error)) {
                // A new try only while PostgreSQL answers: down or frozen, this node renews alone.
                try await answers()
                continue
            }
        }
    }

    /// Throws unless PostgreSQL answers a ping within `limit` (`fleet.timeout` unless said); a
    /// ping on a connection that turns out lost is sent again (``HedgedCall``): a lost
    /// connection is not an outage.
    func answers(within limit: Duration? = nil) async throws {
        let limit = limit ?? config.timeout
        try await HedgedCall.run(within: limit, askAgainAfter: limit / 2) { try await self.database.ping() }
    }

    /// How long one try waits for the row's lock (PostgreSQL's `lock_timeout`) before the next.
    var lockSlice: Duration { max(config.timeout * 2, .seconds(1)) }

    /// This node's own token request in a renewal: whether it began, and what it gave.
    final class OwnTokenRequest: Sendable {
        let fetching = Mutex(false)
        let fetched = Mutex<TokenRefresher.Outcome?>(nil)
    }

    enum RenewalSignal: Sendable {
        case fetched
        case done(Result<TokenRefresher.Outcome, any Error>)
        case storeTimedOut
        case adopted(SessionTokens)
    }

    /// Tells the renewals in progress that this node adopted `tokens` from the fleet.
    func adopted(_ tokens: SessionTokens) {
        for waiting in renewals.withLock({ Array($0.waiting.values) }) { waiting.yield(.adopted(tokens)) }
    }

    /// After a renewal that could not be completed with the fleet: this node's own result if it
    /// made a token request (handed to the fleet later), else `nil` (renew alone).
    private func fallBack(_ fetched: TokenRefresher.Outcome?, _ error: any Error) -> TokenRefresher.Outcome? {
        if let fetched {
            if case .refreshed = fetched { markPending() }
            markUnreachable("a renewed token could not be stored for the fleet; it is handed over once PostgreSQL answers", error)
            return fetched
        }
        markUnreachable("a token renewal could not be coordinated with the fleet; renewing on this node", error)
        return nil
    }

    private func decide(_ row: FleetDatabase.SessionRow, stale: String?, kind: SessionTokens.Kind, loopGuard: ConciergeConfig.RefreshLimit?,
                        fetch: @Sendable () async -> TokenRefresher.Outcome) async throws -> FleetDatabase.Renewal<TokenRefresher.Outcome> {
        let fleetTokens = opened(row.tokens).flatMap { $0.kind == kind ? $0 : nil }
        if let fleetTokens, fleetTokens.accessToken != stale {
            // Another node renewed it (or logged in) already: no token request.
            try await adopt(fleetTokens, version: row.version)
            return .keep(.refreshed(fleetTokens.accessToken))
        }
        if let loopGuard, fleetTokens != nil, row.fromCall {
            // A token the fleet just got met an expiry signal: the loop guard counts it fleet-wide.
            let counted = try await database.countLoopSignal(key, within: loopGuard.within)
            if counted.count >= loopGuard.count {
                warnThrottled(loopGuard)
                return .keep(.throttled(retryAfter: max(1, Int(counted.secondsToExpiry.rounded(.up)))))
            }
        }
        if let held = heldBack(by: row) { return .keep(held) }
        // Recorded outside this transaction, so that a holder that dies mid-request leaves a trace.
        let lost = await beginTokenAttempt(version: row.version)
        let outcome = await Self.$takingOver.withValue(lost) { await fetch() }
        await endTokenAttempt(version: row.version)
        stats.countFleetTokenRequest()
        switch outcome {
        case .refreshed:
            return .store(sealed(session.current), outcome)
        case .loggedOut:
            return .store(nil, outcome)
        case .unavailable:
            return .pace(session.pacing, outcome)
        case .throttled:
            return .keep(outcome)
        }
    }

    /// Once per window: the fleet's loop guard refused a token request (logged, and the same
    /// `session.refresh_throttled` event a single daemon's guard publishes).
    private func warnThrottled(_ limit: ConciergeConfig.RefreshLimit) {
        if Self.due(throttledWarning, every: limit.within) {
            logger.warning("token calls throttled for the fleet: the upstream keeps signalling expiry right after new tokens",
                           metadata: ["max_refreshes": "\(limit.count)", "within": "\(limit.within)"])
            events.publish("session.refresh_throttled", ["count": .int(Int64(limit.count)),
                                                         "within_seconds": .int(limit.within.components.seconds), "fleet": true])
        }
    }
}
