import ConciergeStorage
import Foundation
import Logging
import ServiceLifecycle
import UnixSignals

/// The single cache writer; on shutdown it commits what is queued, then ends.
struct CacheWriterService: Service {
    let cache: CacheStore
    let logger: Logger

    func run() async throws {
        await withGracefulShutdownHandler {
            await cache.run()
        } onGracefulShutdown: {
            cache.finish()
        }
        logger.debug("cache writer flushed and stopped")
    }
}

/// Added last, so the first the group tells of a graceful shutdown: it ends the cache's scans
/// at once, before the listeners wait for the requests in flight (a runaway listing would
/// otherwise hold SIGTERM for its whole time bound).
struct ScanStopService: Service {
    let cache: CacheStore

    func run() async throws {
        try? await gracefulShutdown()
        cache.stopScans()
    }
}

/// Every 30 s: deletes expired and old-version entries, logs out `per_client` instances idle
/// longer than `per_client.idle` (storing when the loaded ones were last used, as it does
/// once more on a graceful stop), updates gauges and `STATUS=`.
struct SweeperService: Service {
    let daemon: ConciergeDaemon

    func run() async throws {
        let removed = await daemon.cache.sweep(currentVersions: daemon.runtime.current.cacheVersions)
        if removed > 0 { daemon.logger.info("sweeper removed stale entries", metadata: ["removed": "\(removed)"]) }
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(30))
                let removed = await daemon.cache.sweep(currentVersions: daemon.runtime.current.cacheVersions)
                if removed > 0 { daemon.logger.info("sweeper removed stale entries", metadata: ["removed": "\(removed)"]) }
                await daemon.sessions.sweepIdle(now: daemon.lifecycle.clock.date)
                daemon.refreshCacheGauges()
                daemon.notifier.notify("STATUS=\(daemon.statusLine())")
            }
        }
        // The instances used since the last sweep: their use outlives the daemon.
        await daemon.sessions.storeLastUses()
    }
}

/// While storage is degraded, every 5 s: saves the sessions and instances whose last save failed and
/// tries a small write, so storage is marked healthy once the disk takes writes again.
struct StorageRecoveryService: Service {
    let daemon: ConciergeDaemon

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            // A large file is checked once the daemon serves (StorageDatabase.checkIntegrity), after
            // the key index loaded: both read every page, and together they take twice as long
            // on a small machine. Bounded: a loader stuck on a damaged page must not hold it off.
            _ = try? await Deadline.run(.seconds(120)) { await daemon.cache.indexLoaded() }
            await daemon.cache.database.checkIntegrity(logger: daemon.logger)
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(5))
                guard daemon.storageDegraded else { continue }
                if await daemon.cache.probe() { for unit in daemon.sessions.loadedUnits { await unit.state.persistPending() } }
                daemon.refreshCacheGauges()
            }
        }
    }
}

/// `READY=1` once storage is open and both listeners are bound, `WATCHDOG=1` at half of
/// `WATCHDOG_USEC`, `STOPPING=1` on shutdown.
struct NotifierService: Service {
    let daemon: ConciergeDaemon
    let readiness: Readiness

    func run() async throws {
        let ports = await readiness.wait()
        daemon.notifier.notify("READY=1\nSTATUS=\(daemon.statusLine())\nMAINPID=\(getpid())")
        daemon.logger.info("ready", metadata: ["proxy_port": "\(ports.proxy)", "admin_port": "\(ports.admin.map(String.init) ?? "-")"])
        await withGracefulShutdownHandler {
            guard let interval = daemon.notifier.watchdogInterval else {
                try? await gracefulShutdown()
                return
            }
            try? await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    daemon.notifier.notify("WATCHDOG=1")
                    try await Task.sleep(for: interval)
                }
            }
        } onGracefulShutdown: {
            daemon.notifier.notify("STOPPING=1\nSTATUS=stopping")
        }
    }
}

/// SIGHUP → reload the configuration file.
struct ReloadSignalService: Service {
    let daemon: ConciergeDaemon

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            for await _ in signals {
                _ = await daemon.reload()
            }
        }
    }
}

/// ``ConciergeDaemon/shutdown()`` asked from outside the group: this service ends at the first
/// request, and the group (told to shut down when one of its services ends) stops gracefully,
/// as on SIGTERM.
struct ShutdownRequestService: Service {
    let requests: AsyncStream<Void>

    func run() async {
        await cancelWhenGracefulShutdown {
            for await _ in requests { return }
        }
    }
}
