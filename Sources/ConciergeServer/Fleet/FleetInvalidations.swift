import ConciergeCore
import Foundation
import ConciergeStorage
import Logging
import Synchronization

/// The fleet's one invalidation stream (docs/fleet.md): an invalidation made on this node is
/// applied here at once, then logged in PostgreSQL under the fleet's next sequence number; every
/// node applies the log in order, from the last number it applied (kept in SQLite beside its
/// cache), whenever it hears of a new one and after every reconnection, so none is lost to a
/// notification sent while it was away. A node away longer than `fleet.retention` (its next
/// number no longer logged) empties its whole cache. Made while PostgreSQL does not answer, an
/// invalidation waits in the SQLite outbox and is logged once it does.
actor FleetInvalidations {
    let database: FleetDatabase
    let local: FleetLocalStore
    let cache: CacheStore
    let config: ConciergeConfig.Fleet
    let stats: ProxyStats
    let logger: Logger
    private var applied: Int64
    private let appliedMirror = Mutex<Int64>(0)
    /// Seconds from each of the last 1,000 logged invalidations of other nodes to its
    /// application here (the database's clock to this node's: one clock on one machine).
    private let delays = Mutex<[Double]>([])

    init(stats: ProxyStats, database: FleetDatabase, local: FleetLocalStore, cache: CacheStore, config: ConciergeConfig.Fleet, logger: Logger) {
        (self.stats, self.database, self.local, self.cache, self.config, self.logger) = (stats, database, local, cache, config, logger)
        applied = (try? local.appliedSeq()) ?? 0
        appliedMirror.withLock { [applied] in $0 = applied }
    }

    /// The last sequence number applied here, readable without waiting for the actor.
    nonisolated var appliedSeq: Int64 { appliedMirror.withLock { $0 } }

    /// The delay from commit to application here over the last invocations: p50, p99, max, in ms.
    nonisolated var applyDelays: (count: Int, p50: Double, p99: Double, max: Double)? {
        let sorted = delays.withLock { $0 }.sorted()
        guard !sorted.isEmpty else { return nil }
        func at(_ q: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q))] * 1000 }
        return (sorted.count, at(0.5), at(0.99), sorted[sorted.count - 1] * 1000)
    }

    /// Where an invalidation made here went.
    enum Delivery: Sendable, Equatable {
        /// Logged for the fleet under this number.
        case logged(Int64)
        /// In the outbox until PostgreSQL answers.
        case pending
    }

    /// Logs an invalidation already applied here, within `fleet.timeout`; else the outbox.
    func publish(_ criteria: InvalidationCriteria) async -> Delivery {
        let text = criteria.json
        do {
            let seq = try await Deadline.run(config.timeout) { try await self.database.publishInvalidation(text) }
            return .logged(seq)
        } catch {
            do { try await local.enqueue(text) } catch {
                logger.error("fleet: an invalidation could not be kept for the fleet", metadata: ["error": "\(FleetDatabase.describe(error))"])
            }
            logger.warning("fleet: invalidation kept in the outbox until PostgreSQL answers", metadata: ["error": "\(FleetDatabase.describe(error).prefix(200))"])
            return .pending
        }
    }

    /// Logs what waits in the outbox (after a reconnection).
    func deliverOutbox() async {
        guard let waiting = try? local.pending(), !waiting.isEmpty else { return }
        for item in waiting {
            do {
                _ = try await Deadline.run(config.timeout * 5) { try await self.database.publishInvalidation(item.criteria) }
                try await local.delivered(item.id)
            } catch {
                return  // Still unreachable: the next reconnection tries again.
            }
        }
        logger.info("fleet: outbox delivered", metadata: ["invalidations": "\(waiting.count)"])
    }

    /// Whether a catch-up runs, and whether another was asked for meanwhile (the actor is
    /// reentrant at each `await`: one catch-up at a time, repeated once if asked again).
    private var catchingUp = false
    private var askedAgain = false

    /// Applies, in order, what the fleet logged after the last number applied here.
    func catchUp() async {
        if catchingUp {
            askedAgain = true
            return
        }
        catchingUp = true
        defer { catchingUp = false }
        let began = applied
        repeat {
            askedAgain = false
            await catchUpOnce()
        } while askedAgain
        if applied > began { await report() }
    }

    /// Tells the fleet this node is alive and how far it applied the log (each heartbeat, and
    /// after each catch-up that advanced, so `?wait=fleet` learns of it at once).
    func report() async {
        let seq = applied
        _ = try? await Deadline.run(config.timeout * 5) { try await self.database.reportNode(appliedSeq: seq) }
    }

    /// Waits (up to `limit`) until every other node seen in the last minute has applied `seq`.
    /// - Returns: the nodes that still have not (`nil`: PostgreSQL did not answer).
    nonisolated func waitUntilApplied(_ seq: Int64, limit: Duration = .seconds(5)) async -> [String]? {
        let deadline = ContinuousClock.now + limit
        var lagging: [String]? = nil
        while true {
            lagging = try? await Deadline.run(config.timeout * 5) {
                try await self.database.lagging(behind: seq, seenWithin: .seconds(60))
            }
            if lagging?.isEmpty == true || ContinuousClock.now >= deadline { return lagging }
            try? await Task.sleep(for: .milliseconds(10))
            if Task.isCancelled { return lagging }
        }
    }

    private func catchUpOnce() async {
        do {
            if let bounds = try await Deadline.run(config.timeout * 5, { try await self.database.logBounds() }),
               bounds.oldest > applied + 1, applied < bounds.newest {
                // Numbers between were dropped from the log (older than retention): start over.
                let removed = try await cache.invalidate(.all)
                logger.warning("fleet: away longer than the invalidation log is kept; the local cache was emptied",
                               metadata: ["applied": "\(applied)", "oldest_logged": "\(bounds.oldest)", "removed": "\(removed)"])
                try await advance(to: bounds.oldest - 1)
            }
            while true {
                let after = applied
                let batch = try await Deadline.run(config.timeout * 5) { try await self.database.invalidations(after: after) }
                for logged in batch {
                    if logged.origin != config.node {
                        // Cut short by the daemon's stop: left unapplied, for the next start.
                        guard await apply(logged) else { return }
                        let delay = max(0, Date().timeIntervalSince1970 - logged.loggedAt)
                        stats.recordFleetApplyDelay(delay)
                        delays.withLock { d in
                            if d.count >= 1_000 { d.removeFirst(d.count - 999) }
                            d.append(delay)
                        }
                    }
                    try await advance(to: logged.seq)
                }
                if batch.count < 1_000 { return }
            }
        } catch {
            logger.warning("fleet: could not read the invalidation log; retrying on the next announcement",
                           metadata: ["error": "\(FleetDatabase.describe(error).prefix(200))"])
        }
    }

    private func advance(to seq: Int64) async throws {
        guard seq > applied else { return }
        applied = seq
        appliedMirror.withLock { $0 = seq }
        try await local.setApplied(seq)
    }

    /// Applies another node's invalidation; a pattern that exceeds a limit on this node's keys
    /// empties the cache rather than leave entries the fleet meant to remove. `false` when the
    /// daemon's stop cut its scan short: the number is not advanced, the next start applies it.
    private func apply(_ logged: FleetDatabase.LoggedInvalidation) async -> Bool {
        guard let criteria = InvalidationCriteria(json: logged.criteria) else {
            logger.error("fleet: an invalidation this version cannot read; emptying the cache", metadata: ["seq": "\(logged.seq)"])
            _ = try? await cache.invalidate(.all)
            return true
        }
        do {
            if case .pattern(let source) = criteria {
                _ = try await cache.invalidate(matching: KeyPattern(source))
            } else {
                _ = try await cache.invalidate(criteria)
            }
        } catch KeyPatternError.cancelled {
            return false
        } catch {
            logger.warning("fleet: an invalidation failed here; emptying the cache instead",
                           metadata: ["seq": "\(logged.seq)", "error": "\(FleetDatabase.describe(error))"])
            _ = try? await cache.invalidate(.all)
        }
        return true
    }
}
