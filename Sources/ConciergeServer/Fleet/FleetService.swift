import ConciergeStorage
import Foundation
import Logging
import ServiceLifecycle

/// Runs the fleet's pool and its listener: creates the schema, then adopts every session change
/// other nodes announce and applies the invalidation log in order (reading both after each
/// reconnection, when announcements may have been lost, and first delivering the outbox), and
/// collects the log's garbage once a minute.
struct FleetService: Service {
    let fleet: FleetSession
    let invalidations: FleetInvalidations
    let lifecycle: SessionLifecycle

    func run() async throws {
        let tasks = [
            Task { await fleet.database.run() },
            Task {
                await migrate()
                await fleet.database.listen { announcement in await heard(announcement) }
            },
            Task { await collectGarbage() },
            Task { await heartbeat() },
        ]
        try? await gracefulShutdown()
        for task in tasks { task.cancel() }
        // Not a task group: a call the cancelled pool never answers (a lease asked for as it
        // stops is neither granted nor failed) must not hold the daemon's shutdown. 2 s at most.
        _ = try? await Deadline.run(.seconds(2)) { for task in tasks { await task.value } }
    }

    private func heard(_ announcement: FleetDatabase.Announcement) async {
        switch announcement {
        case .connected:
            await apply(fleet.change(announced: nil))
            await invalidations.deliverOutbox()
            await invalidations.catchUp()
        case .session(let version):
            await apply(fleet.change(announced: version))
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

    private func apply(_ change: FleetSession.Change) async {
        switch change {
        case .none:
            break
        case .adopt(let tokens):
            do {
                try await fleet.session.set(tokens)
                fleet.adopted(tokens)
                fleet.logger.info("fleet: session adopted", metadata: ["user": "\(tokens.userID ?? "-")", "kind": "\(tokens.kind.rawValue)"])
            } catch {
                fleet.logger.error("fleet: could not store the adopted session", metadata: ["error": "\(FleetDatabase.describe(error))"])
            }
        case .logout:
            await lifecycle.logout(ifAccessToken: nil, reason: .string("fleet"), publishToFleet: false)
        }
    }
}
