import ConciergeStorage
import Foundation
import Logging
import ServiceLifecycle

/// The fleet's background work, one task group: creates the schema, then adopts every session
/// change other nodes announce (of any session or `per_client` instance, each in its own row)
/// and applies the invalidation log in order (reading both after
/// each reconnection, when announcements may have been lost, and first delivering the outbox);
/// a heartbeat; the log's garbage collected once a minute; and the shared cache's fills written.
/// The fleet's `PostgresClient` is a service of the daemon's group of its own, started before
/// this one and stopped after it.
///
/// Stopped, the group is cancelled: every call to PostgreSQL answers its cancelled caller at
/// once (``Deadline``), so a database that never answers does not hold the daemon's shutdown.
struct FleetService: Service {
    let fleet: FleetSession
    let invalidations: FleetInvalidations
    /// Every session and instance of this node, by its row's key.
    let sessions: SessionRegistry
    /// With `fleet.shared_cache`: the fills to write.
    var sharedCache: FleetSharedCache? = nil

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    await migrate()
                    await fleet.database.listen { announcement in await heard(announcement) }
                }
                group.addTask { await collectGarbage() }
                group.addTask { await heartbeat() }
                if let sharedCache { group.addTask { await sharedCache.writeFills() } }
            }
        }
    }

    private func heard(_ announcement: FleetDatabase.Announcement) async {
        switch announcement {
        case .connected:
            await catchUpSessions()
            await invalidations.deliverOutbox()
            await invalidations.catchUp()
        case .session(let key, let version):
            // An instance this node has not loaded yet is loaded to adopt it: its next request here finds it.
            guard let unit = await sessions.unit(forFleetKey: key), let fleet = unit.lifecycle.fleet else { return }
            await apply(fleet.change(announced: version), to: unit)
        case .invalidation:
            await invalidations.catchUp()
        }
    }

    /// Creates the schema, retrying with a backoff while PostgreSQL is unreachable.
    private func migrate() async {
        var backoff = Duration.milliseconds(200)
        var reported = false
        while !Task.isCancelled {
            do {
                try await Deadline.run(.seconds(10)) { try await fleet.database.probe() }
                try await Deadline.run(.seconds(30)) { try await fleet.database.migrate() }
                return
            } catch {
                let detail: Logger.Metadata = ["error": "\(String(reflecting: error).prefix(200))"]
                if let refusal = FleetDatabase.refusal(error) {
                    // Not an outage: nothing will change until the configuration does. Said once.
                    if !reported { fleet.logger.error("fleet: \(refusal); serving on alone, retrying", metadata: detail) }
                } else if !reported {
                    fleet.logger.warning("fleet: PostgreSQL unreachable, schema not ready; serving on alone, retrying", metadata: detail)
                }
                reported = true
                try? await Task.sleep(for: backoff)
                backoff = min(backoff * 2, .seconds(10))
            }
        }
    }

    /// Once a second: whether PostgreSQL answers (a frozen database keeps the listener's
    /// connection open but silent, and a silently dead connection hears nothing), and, when it
    /// does, what the listener may have missed: the session, the outbox, the log.
    private func heartbeat() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            do {
                try await fleet.answers(within: fleet.config.timeout * 5)
                await heard(.connected)
                await invalidations.report()
            } catch {
                if !Task.isCancelled { fleet.markUnreachable("PostgreSQL does not answer", error) }
            }
        }
    }

    /// Deletes log rows older than `fleet.retention`, once a minute (one node at a time).
    private func collectGarbage() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(60))
            _ = try? await Deadline.run(.seconds(10)) { try await fleet.database.collectGarbage(retention: fleet.config.retention) }
        }
    }

    /// After a (re)connection and at each heartbeat: the sessions whose row changed since this
    /// node last applied it (one query for all of them), the ones with a change of their own
    /// pending, and the instances holding tokens that this node has not loaded yet.
    private func catchUpSessions() async {
        let versions: [String: (version: Int64, hasTokens: Bool)]
        do {
            versions = try await Deadline.run(fleet.config.timeout * 5) { try await fleet.database.sessionVersions() }
        } catch {
            fleet.markUnreachable("the fleet's sessions could not be read", error)
            return
        }
        fleet.markReachable()
        var seen = Set<String>()
        for unit in sessions.loadedUnits {
            guard let session = unit.lifecycle.fleet, seen.insert(session.key).inserted else { continue }
            if session.isPending || (versions[session.key]?.version ?? 0) > session.appliedVersion {
                await apply(session.change(announced: nil), to: unit)
            }
        }
        for (key, row) in versions where row.hasTokens && !seen.contains(key) {
            guard let unit = await sessions.unit(forFleetKey: key), let session = unit.lifecycle.fleet else { continue }
            await apply(session.change(announced: nil), to: unit)
        }
    }

    private func apply(_ change: FleetSession.Change, to unit: SessionUnit) async {
        guard let fleet = unit.lifecycle.fleet else { return }
        switch change {
        case .none:
            break
        case .adopt(let tokens):
            do {
                let replaced = fleet.session.current
                try await fleet.session.set(tokens)
                if replaced == nil { unit.lifecycle.instances?.started() }
                // A login or renewal elsewhere is a use: an instance busy on another node is not idle here.
                unit.touch(unit.lifecycle.clock.date)
                fleet.adopted(tokens)
                fleet.logger.info("fleet: session adopted", metadata: ["user": "\(tokens.userID ?? "-")", "kind": "\(tokens.kind.rawValue)"])
            } catch {
                fleet.logger.error("fleet: could not store the adopted session", metadata: ["error": "\(FleetDatabase.describe(error))"])
            }
        case .logout:
            await unit.lifecycle.logout(ifAccessToken: nil, reason: .string("fleet"), publishToFleet: false)
        }
    }
}
