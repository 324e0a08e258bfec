import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import Synchronization

/// The live session: the tokens in memory (read without suspension on every request),
/// persisted through ``SessionStore``.
///
/// - Important: a change takes effect in memory at once, as the client was told (login,
///   logout, `DELETE /session`), even when persisting it fails (disk full). A failed save
///   marks storage degraded (``StorageHealth``) and is retried on the next change or by
///   ``persistPending()``; the methods do not throw for it.
///
/// Every change bumps a generation number, so a refresh that started before a logout
/// cannot bring the old session back (see ``replace(ifGeneration:with:)``).
///
/// It also holds the pacing of the session's token requests (``TokenRequestPacing``), in
/// memory only: the refresher and the fleet's renewal read and update it.
public final class SessionState: Sendable {
    /// Every session's and instance's tokens as they are set or loaded: the log scrubber adds
    /// them to what it masks (``SecretScrubber``).
    static let secretFeed = SecretFeed()

    private struct State {
        var tokens: SessionTokens? {
            didSet {
                SessionState.secretFeed.append(tokens?.secrets ?? [])
                // Tokens just replaced stay masked in log lines for a while.
                for old in [oldValue?.accessToken, oldValue?.refreshToken].compactMap({ $0 })
                where old != tokens?.accessToken && old != tokens?.refreshToken {
                    retired.append(old)
                }
                if retired.count > 32 { retired.removeFirst(retired.count - 32) }
            }
        }
        var generation = 0
        /// The last save failed: the in-memory session differs from the stored one.
        var unsaved = false
        var retired: [String] = []
    }

    private let state: Mutex<State>
    private let tokenPacing = Mutex(TokenRequestPacing())
    private let store: SessionStore
    private let health: StorageHealth
    private let writeLock = AsyncSerialLock()
    let logger: Logger

    public init(store: SessionStore, logger: Logger) throws {
        self.store = store
        self.logger = logger
        self.health = store.database.health
        let tokens = try store.load()
        state = Mutex(State(tokens: tokens))
        Self.secretFeed.append(tokens?.secrets ?? [])
    }

    /// The live session over `store`, holding `tokens` already read from it
    /// (``SessionStore/loadOnReader()``).
    public init(store: SessionStore, loaded tokens: SessionTokens?, logger: Logger) {
        self.store = store
        self.logger = logger
        self.health = store.database.health
        state = Mutex(State(tokens: tokens))
        Self.secretFeed.append(tokens?.secrets ?? [])
    }

    public var current: SessionTokens? { state.withLock { $0.tokens } }
    public var generation: Int { state.withLock { $0.generation } }
    public var snapshot: (tokens: SessionTokens?, generation: Int) { state.withLock { ($0.tokens, $0.generation) } }
    /// True after a failed save, until a later save succeeds.
    public var hasUnsavedChange: Bool { state.withLock { $0.unsaved } }
    /// The tokens in use and the ones most recently replaced: literal secrets for the log scrubber.
    public var secretsForLogs: [String] {
        state.withLock { s in [s.tokens?.accessToken, s.tokens?.refreshToken].compactMap { $0 } + s.retired }
    }

    /// When the next token request may be made (after failed ones).
    public var pacing: TokenRequestPacing { tokenPacing.withLock { $0 } }

    /// Changes the pacing of token requests; returns what `change` returns.
    public func updatePacing<T: Sendable>(_ change: (inout TokenRequestPacing) -> T) -> T {
        tokenPacing.withLock { change(&$0) }
    }

    /// Sets a new session (login, admin `PUT /session`).
    public func set(_ tokens: SessionTokens) async throws {
        await writeLock.run {
            state.withLock { $0.tokens = tokens; $0.generation += 1 }
            await save()
        }
    }

    /// Drops the session; returns the tokens that were dropped.
    @discardableResult
    public func clear() async throws -> SessionTokens? {
        try await clear(ifAccessToken: nil)
    }

    /// Drops the session only if it still holds `accessToken` (so a logout reply to an old
    /// token does not drop a newer login); `nil` drops whatever session there is.
    @discardableResult
    public func clear(ifAccessToken accessToken: String?) async throws -> SessionTokens? {
        await writeLock.run {
            guard let old = current, accessToken == nil || old.accessToken == accessToken else { return nil }
            state.withLock { $0.tokens = nil; $0.generation += 1 }
            await save()
            return old
        }
    }

    /// Stores refreshed tokens (or a fetched app token, also into an empty session) unless
    /// the session changed since `generation`; in memory at once, saved when possible.
    /// - Returns: whether the tokens were taken.
    public func replace(ifGeneration generation: Int, with tokens: SessionTokens) async throws -> Bool {
        await writeLock.run {
            guard self.generation == generation, current != nil || tokens.kind == .app else { return false }
            state.withLock { $0.tokens = tokens; $0.generation += 1 }
            await save()
            return true
        }
    }

    /// Writes the in-memory session if an earlier save failed.
    /// - Returns: whether memory and SQLite agree afterwards.
    @discardableResult
    public func persistPending() async -> Bool {
        await writeLock.run {
            if hasUnsavedChange { await save() }
            return !hasUnsavedChange
        }
    }

    /// Saves what memory holds now; call under `writeLock`.
    private func save() async {
        let tokens = current
        do {
            try await store.save(tokens)
            if markUnsaved(false) { health.sessionSaveFailed(false) }
            health.recordSuccess()
        } catch {
            if markUnsaved(true) { health.sessionSaveFailed(true) }
            health.recordFailure("session", error)
        }
    }

    /// Sets ``hasUnsavedChange``; whether it changed (the storage health counts unsaved sessions).
    private func markUnsaved(_ unsaved: Bool) -> Bool {
        state.withLock { s in
            defer { s.unsaved = unsaved }
            return s.unsaved != unsaved
        }
    }

    deinit {
        // An instance forgotten or a session removed while unsaved no longer keeps storage degraded.
        if state.withLock({ $0.unsaved }) { health.sessionSaveFailed(false) }
    }
}

/// A FIFO async mutex: one writer of the session at a time, in arrival order.
final class AsyncSerialLock: Sendable {
    private struct State {
        var locked = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    func run<T: Sendable>(_ body: () async -> T) async -> T {
        await acquire()
        defer { release() }
        return await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.locked { s.waiters.append(c); return false }
                s.locked = true
                return true
            }
            if resumeNow { c.resume() }
        }
    }

    private func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty { s.locked = false; return nil }
            return s.waiters.removeFirst()
        }
        next?.resume()
    }
}

extension SessionTokens {
    /// The access and refresh tokens: literal secrets for the log scrubber.
    var secrets: [String] { [accessToken] + (refreshToken.map { [$0] } ?? []) }
}
