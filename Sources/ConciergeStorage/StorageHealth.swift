import Foundation
import Logging
import Synchronization

/// Whether writes to SQLite currently succeed, shared by the cache writer and the session.
///
/// A failed write (disk full, I/O error) makes storage *degraded* until a write succeeds.
/// Failures are logged at most once per ``logInterval`` (the line says how many failed
/// since the last one), never once per write, even across short recoveries; a recovery is
/// logged at notice level.
public final class StorageHealth: Sendable {
    private struct State {
        var degraded = false
        var failures = 0
        var unreported = 0
        var lastLog: ContinuousClock.Instant?
        var lastError = ""
        /// Sessions and instances whose last save failed (``sessionSaveFailed(_:)``).
        var unsavedSessions = 0
    }

    private let state = Mutex(State())
    private let logger: Logger
    public let logInterval: Duration

    public init(logger: Logger, logInterval: Duration = .seconds(60)) {
        self.logger = logger
        self.logInterval = logInterval
    }

    /// True while the last write failed.
    public var isDegraded: Bool { state.withLock { $0.degraded } }

    /// Some session or instance holds tokens its last save could not store: read in O(1)
    /// however many sessions the daemon has (the recovery pass checks it every 5 s).
    public var hasUnsavedSession: Bool { state.withLock { $0.unsavedSessions > 0 } }

    /// A session's store moved between saved and unsaved: `true` when its save failed (it was
    /// saved before), `false` when a later save stored it or it went away unsaved.
    public func sessionSaveFailed(_ failed: Bool) {
        state.withLock { $0.unsavedSessions += failed ? 1 : -1 }
    }

    /// Writes that failed since start.
    public var failureCount: Int { state.withLock { $0.failures } }

    /// Records a failed write of `what` (e.g. "cache", "session").
    public func recordFailure(_ what: String, _ error: any Error) {
        let now = ContinuousClock.now
        let report = state.withLock { s -> (count: Int, first: Bool)? in
            let first = !s.degraded
            s.degraded = true
            s.failures += 1
            s.unreported += 1
            s.lastError = StorageDatabase.describe(error)
            if let last = s.lastLog, now - last < logInterval { return nil }
            s.lastLog = now
            defer { s.unreported = 0 }
            return (s.unreported, first)
        }
        guard let report else { return }
        logger.error("storage writes failing; serving from memory, changes kept in memory and retried",
                     metadata: ["what": "\(what)", "error": "\(StorageDatabase.describe(error))", "failed_writes": "\(report.count)",
                                "next_report_in": "\(Int(logInterval.components.seconds))s"])
    }

    /// Records a successful write; ends a degraded period (logged once).
    public func recordSuccess() {
        let ended = state.withLock { s -> Bool in
            guard s.degraded else { return false }
            s.degraded = false
            s.unreported = 0
            return true
        }
        if ended { logger.notice("storage writes succeed again") }
    }
}
