import Synchronization

/// What bounds one scan over cache keys (a page of `/cache/entries`, a pattern invalidation,
/// the hot tier's keys): its deadline and the store's stop, both checked every
/// ``checkEvery`` keys *inside* a slice, since one key's match may cost milliseconds (PCRE2's
/// match limit allows a million steps) and a slice holds thousands of keys.
struct ScanBound: Sendable {
    let deadline: ContinuousClock.Instant
    let stop: ScanStop

    /// Keys matched between two looks at the clock: a look costs about as much as the cheapest
    /// match, so a scan that never backtracks pays a few percent for it.
    static let checkEvery = 8

    /// Throws once the deadline passed or the store stops scanning (checked every ``checkEvery`` keys).
    func check(scanned: Int) throws(KeyPatternError) {
        guard scanned % Self.checkEvery == 0 else { return }
        if stop.isStopped { throw .cancelled }
        if ContinuousClock.now >= deadline { throw .deadlineExceeded(CacheStore.patternScanLimit, keysScanned: scanned) }
    }
}

/// Ends every scan of one store at once and refuses new ones: the daemon's graceful shutdown
/// (SIGTERM) does not wait for a scan.
final class ScanStop: Sendable {
    private let stopped = Atomic(false)

    var isStopped: Bool { stopped.load(ordering: .relaxed) }

    func stop() { stopped.store(true, ordering: .relaxed) }
}
