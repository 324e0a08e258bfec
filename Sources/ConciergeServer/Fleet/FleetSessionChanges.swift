import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import Synchronization

// The fleet's session across an outage and a lost renewal (docs/fleet.md): local changes kept
// pending while PostgreSQL does not answer and reconciled when it does; a refusal seen while
// renewing alone held instead of logging anyone out; a logout reaching the fleet only for the
// token version it ended; and the logout reason `refresh_lost` when a refresh token was lost
// with a node that died mid-request.
extension FleetSession {
    // MARK: Local changes

    /// Stores a local change (`nil`: logged out) as the fleet's session; kept pending when
    /// PostgreSQL does not answer within `fleet.timeout`.
    func publish(_ tokens: SessionTokens?) async {
        // Under the row's lock the renewal's transaction stores the result itself.
        if Self.renewing { return }
        let text = sealed(tokens)
        do {
            let version = try await Deadline.run(config.timeout) { try await self.database.writeSession(self.key, text) }
            applied.withLock { $0 = max($0, version) }
            pending.withLock { $0 = false }
            markReachable()
        } catch {
            pending.withLock { $0 = true }
            markUnreachable("a session change could not reach the fleet; it is sent once PostgreSQL answers", error)
        }
    }

    /// Stores a logout of this node's session as the fleet's. A logout of a known token (`ended`:
    /// a logout code, a refused refresh) reaches the fleet only while the fleet still holds the
    /// token version this node last stored or adopted: a fleet that moved on (another node
    /// renewed or logged in) keeps its session, which this node adopts at its next read. A
    /// logout of whatever session there is (`nil`: `DELETE /session`) always reaches it.
    func publishLogout(ended accessToken: String?) async {
        if Self.renewing { return }
        guard accessToken != nil else { return await publish(nil) }
        do {
            try await writeLogout()
        } catch {
            pending.withLock { $0 = true }
            markUnreachable("a logout could not reach the fleet; it is sent once PostgreSQL answers (if the fleet still holds that token)", error)
        }
    }

    /// The conditional logout write (``FleetDatabase/writeLogout(ifVersion:lockWait:)``) at the
    /// version this node holds.
    private func writeLogout() async throws {
        let base = appliedVersion
        let written = try await Deadline.run(config.timeout) {
            try await self.database.writeLogout(self.key, ifVersion: base, lockWait: self.config.timeout)
        }
        pending.withLock { $0 = false }
        markReachable()
        if let written {
            applied.withLock { $0 = max($0, written) }
        } else {
            logger.info("fleet: this node's logout ended a token the fleet has since replaced; the fleet keeps its session",
                        metadata: ["version": "\(base)"])
        }
    }

    /// A change made here while PostgreSQL did not answer (a renewal made alone): written by
    /// the next reconnection or heartbeat, unless the fleet has a newer session by then.
    func markPending() {
        pending.withLock { $0 = true }
    }

    // MARK: Changes from other nodes

    /// What an announced (or, after a reconnection, possible) change means for this node.
    enum Change: Sendable, Equatable {
        case none
        case adopt(SessionTokens)
        case logout
    }

    /// Reads the row after an announcement (`version`), or after a reconnection (`nil`). A
    /// pending local change is reconciled with the row first (``reconcile(_:)``), whatever
    /// announced it: a node holding a token it renewed alone is never logged out by an
    /// announcement it has not answered with that token.
    func change(announced version: Int64?) async -> Change {
        if let version, version <= appliedVersion { return .none }
        do {
            let row = try await Deadline.run(config.timeout * 5) { try await self.database.readSession(self.key) }
            markReachable()
            if pending.withLock({ $0 }) { return await reconcile(row) }
            guard row.version > appliedVersion else { return .none }
            applied.withLock { $0 = max($0, row.version) }
            let tokens = opened(row.tokens)
            if let tokens {
                return tokens == session.current ? .none : .adopt(tokens)
            }
            return row.version > 0 && session.current != nil ? .logout : .none
        } catch {
            markUnreachable("the fleet's session could not be read", error)
            return .none
        }
    }

    /// A pending local change against the fleet's row: the newer of this node's session and the
    /// fleet's wins (a fleet logout is never newer than a token this node holds); a pending
    /// logout reaches the fleet only while the fleet holds the version it ended, else this node
    /// adopts the fleet's newer session.
    private func reconcile(_ row: FleetDatabase.SessionRow) async -> Change {
        let fleetTokens = opened(row.tokens)
        guard let local = session.current else {
            if let fleetTokens, row.version > appliedVersion {
                pending.withLock { $0 = false }
                applied.withLock { $0 = max($0, row.version) }
                logger.info("fleet: this node's logout ended a token the fleet has since replaced; adopting the fleet's session",
                            metadata: ["version": "\(row.version)"])
                return .adopt(fleetTokens)
            }
            do { try await writeLogout() } catch { markUnreachable("a logout could not reach the fleet", error) }
            return .none
        }
        if let fleetTokens, fleetTokens.setAt > local.setAt {
            pending.withLock { $0 = false }
            applied.withLock { $0 = max($0, row.version) }
            return .adopt(fleetTokens)
        }
        await publish(local)
        return .none
    }

    // MARK: A refusal seen while renewing alone

    /// Set while this node renews alone (PostgreSQL did not answer): a refusal it gets then may
    /// be of a rotating refresh token another node spent first, so it is held, not a logout.
    @TaskLocal static var renewingAlone = false

    /// Runs `perform` (this node's own token request) as a renewal made alone: a token it gets is
    /// handed to the fleet later; a refusal it gets is held (``holdsRefusal(of:reason:)``) and
    /// answered `unavailable` with `Retry-After`, never `not_logged_in`.
    func renewAlone(_ perform: @Sendable () async -> TokenRefresher.Outcome) async -> TokenRefresher.Outcome {
        let outcome = await Self.$renewingAlone.withValue(true) { await perform() }
        switch outcome {
        case .refreshed:
            markPending()
        case .loggedOut:
            if let hold = heldRefusal.withLock({ $0 }), session.current?.accessToken == hold.token {
                return .unavailable(retryAfter: RefusalHold.retryAfter)
            }
        case .unavailable, .throttled:
            break
        }
        return outcome
    }

    /// Whether a logout for `reason` of `accessToken` is held instead (the session kept): a
    /// refused refresh of a token this node renewed alone. Logged once per refused token.
    func holdsRefusal(of accessToken: String?, reason: JSONValue) -> Bool {
        guard Self.renewingAlone, let accessToken, reason == .string(SessionLifecycle.refreshFailed) else { return false }
        let first = heldRefusal.withLock { hold in
            guard hold?.token != accessToken else { return false }
            hold = RefusalHold(token: accessToken)
            return true
        }
        if first {
            logger.warning("fleet: a renewal made alone (PostgreSQL unreachable) was refused; not a logout: kept until the fleet's token is known",
                           metadata: ["access_token": "\(TokenMask.mask(accessToken))"])
        }
        return true
    }

    /// What a request that needs a new token gets while a refusal is held: the fleet's token once
    /// PostgreSQL answers with one this node did not have (adopted, no token request);
    /// `unavailable` meanwhile; `nil` (renew as usual, under the fleet's lock) once no refusal is
    /// held, or once the fleet has kept the refused token for ``RefusalHold/settle`` after
    /// PostgreSQL answered again (no node had a newer one: the refusal stands for the fleet).
    func refusalOutcome() async -> TokenRefresher.Outcome? {
        guard let hold = heldRefusal.withLock({ $0 }) else { return nil }
        guard session.current?.accessToken == hold.token else {
            heldRefusal.withLock { $0 = nil }
            return nil
        }
        var row: FleetDatabase.SessionRow?
        if isReachable {
            row = try? await Deadline.run(config.timeout) { try await self.database.readSession(self.key) }
        }
        let fleetTokens = row.flatMap { opened($0.tokens) }
        let verdict = heldRefusal.withLock { hold in
            hold?.judge(fleetToken: fleetTokens?.accessToken, answered: row != nil, now: .now) ?? .release
        }
        switch verdict {
        case .adopt:
            guard let row, let fleetTokens else { return nil }
            heldRefusal.withLock { $0 = nil }
            do { try await adopt(fleetTokens, version: row.version) } catch { return .unavailable(retryAfter: RefusalHold.retryAfter) }
            adopted(fleetTokens)
            return .refreshed(fleetTokens.accessToken)
        case .wait:
            return .unavailable(retryAfter: RefusalHold.retryAfter)
        case .release:
            heldRefusal.withLock { $0 = nil }
            logger.info("fleet: no node had a newer token than the one refused while PostgreSQL was unreachable; renewing under the fleet's lock")
            return nil
        }
    }

    // MARK: A renewal lost with its node

    /// Set while this node's token request takes over from a node that died (or lost PostgreSQL)
    /// mid-request: a refusal then is `refresh_lost`, not `refresh_failed`.
    @TaskLocal static var takingOver = false

    /// The logout reason for a refused refresh: `refresh_lost` when this node took over a renewal
    /// whose node died mid-request (the provider rotated the refresh token and the new one died
    /// with that node), else `reason` unchanged.
    static func logoutReason(_ reason: JSONValue) -> JSONValue {
        guard takingOver, reason == .string(SessionLifecycle.refreshFailed) else { return reason }
        return .string(SessionLifecycle.refreshLost)
    }

    /// Records the fleet's token request this node is about to make (best effort, within
    /// `fleet.timeout`): whether one renewing the same version was left unfinished.
    func beginTokenAttempt(version: Int64) async -> Bool {
        let unfinished = (try? await Deadline.run(config.timeout) { try await self.database.beginTokenAttempt(self.key, version: version) }) ?? false
        if unfinished {
            logger.warning("fleet: taking over a token request whose node died or lost PostgreSQL mid-request",
                           metadata: ["version": "\(version)"])
        }
        return unfinished
    }

    func endTokenAttempt(version: Int64) async {
        _ = try? await Deadline.run(config.timeout) { try await self.database.endTokenAttempt(self.key, version: version) }
    }
}

/// A refused renewal of `token` that this node made alone while PostgreSQL did not answer: held
/// (the session kept, requests answered `unavailable`) until the fleet's row says what became of
/// that token. Pure: the caller reads the row and the clock.
struct RefusalHold: Sendable, Equatable {
    /// How long the fleet's row may keep the refused token after PostgreSQL answers again before
    /// the refusal stands (the nodes hand over tokens renewed alone within a heartbeat or two;
    /// their listeners reconnect within 10 s).
    static let settle: Duration = .seconds(10)
    /// The `Retry-After` of the `unavailable` replies meanwhile.
    static let retryAfter = 1

    enum Verdict: Sendable, Equatable {
        /// The fleet holds another token (a node renewed it): adopt it.
        case adopt
        /// Answer `unavailable`: PostgreSQL is still unreachable, or the settle time runs.
        case wait
        /// Renew as usual, under the fleet's lock.
        case release
    }

    /// The access token whose renewal was refused.
    let token: String
    /// Since when PostgreSQL has answered with the refused token still the fleet's.
    private(set) var answeredSince: ContinuousClock.Instant?

    init(token: String) { self.token = token }

    /// - Parameters:
    ///   - fleetToken: the access token in the fleet's row (`nil`: none, or not read).
    ///   - answered: whether PostgreSQL answered the read.
    mutating func judge(fleetToken: String?, answered: Bool, now: ContinuousClock.Instant) -> Verdict {
        guard answered else {
            answeredSince = nil
            return .wait
        }
        if let fleetToken, fleetToken != token { return .adopt }
        // The fleet has no session (logged out), or still the refused token.
        let since = answeredSince ?? now
        answeredSince = since
        return fleetToken == nil || now - since >= Self.settle ? .release : .wait
    }
}
