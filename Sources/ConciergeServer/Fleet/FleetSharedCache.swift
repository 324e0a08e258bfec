import ConciergeStorage
import Foundation
import Synchronization

/// The fleet's shared cache as the request path sees it (`fleet.shared_cache: true`,
/// docs/fleet.md). A lookup waits at most `fleet.timeout` and is skipped while PostgreSQL does
/// not answer: a failed or slow call opens a breaker for a second, and the heartbeat's verdict
/// (``FleetSession/isReachable``) is checked first. A fill is written in the background (by
/// ``FleetService``), at most 16 at a time (beyond that it is dropped: the entry is in the
/// local cache anyway).
final class FleetSharedCache: Sendable {
    let database: FleetDatabase
    let fleet: FleetSession
    let invalidations: FleetInvalidations
    private let openUntil = Mutex<ContinuousClock.Instant?>(nil)
    /// Fills handed over and not written yet (or being written).
    private let writing = Atomic<Int>(0)
    private let fills = AsyncStream.makeStream(of: (CacheEntry, Int64).self)
    static let maxWriting = 16

    init(fleet: FleetSession, invalidations: FleetInvalidations) {
        (database, self.fleet, self.invalidations) = (fleet.database, fleet, invalidations)
    }

    /// The last invalidation applied here: a fill whose upstream call began now is written to
    /// the shared cache only if no later one was logged meanwhile.
    var appliedSeq: Int64 { invalidations.appliedSeq }

    private var available: Bool {
        guard fleet.isReachable else { return false }
        let now = ContinuousClock.now
        return openUntil.withLock { until in until.map { now >= $0 } ?? true }
    }

    private func trip(_ error: any Error) {
        openUntil.withLock { $0 = ContinuousClock.now + .seconds(1) }
        fleet.markUnreachable("the shared cache did not answer; misses go to the upstream", error)
    }

    /// The shared entry under `key`, if PostgreSQL answers within `fleet.timeout`.
    func lookup(_ key: String) async -> CacheEntry? {
        guard available else { return nil }
        do {
            return try await Deadline.run(fleet.config.timeout) { try await self.database.sharedEntry(key) }
        } catch {
            trip(error)
            return nil
        }
    }

    /// Writes a fill in the background (see ``FleetDatabase/storeShared(_:ifNoInvalidationAfter:)``),
    /// a child task of ``writeFills()``.
    func store(_ entry: CacheEntry, seen seq: Int64) {
        guard entry.body.readableBytes <= FleetDatabase.sharedBodyLimit, available else { return }
        guard writing.wrappingAdd(1, ordering: .relaxed).newValue <= Self.maxWriting else {
            writing.wrappingSubtract(1, ordering: .relaxed)
            return
        }
        if case .terminated = fills.continuation.yield((entry, seq)) { writing.wrappingSubtract(1, ordering: .relaxed) }
    }

    /// Writes the fills ``store(_:seen:)`` hands over, each in a task of its own, until
    /// cancelled (``FleetService``'s task group).
    func writeFills() async {
        await withDiscardingTaskGroup { group in
            for await (entry, seq) in fills.stream {
                group.addTask {
                    defer { self.writing.wrappingSubtract(1, ordering: .relaxed) }
                    do {
                        _ = try await Deadline.run(self.fleet.config.timeout * 5) {
                            try await self.database.storeShared(entry, ifNoInvalidationAfter: seq)
                        }
                    } catch {
                        self.trip(error)
                    }
                }
            }
        }
    }
}
