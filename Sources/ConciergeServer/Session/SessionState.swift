import ConciergeCore
import ConciergeStorage
import Foundation
import Logging
import Synchronization

/// The live session: the tokens in memory (read without suspension on every request),
/// persisted through ``SessionStore`` before a change is visible.
///
/// Every change bumps a generation number, so a refresh that started before a logout
/// cannot bring the old session back (see ``replace(ifGeneration:with:)``).
public final class SessionState: Sendable {
    private struct State {
        var tokens: SessionTokens? {
            didSet {
                // Tokens just replaced stay masked in log lines for a while.
                for old in [oldValue?.accessToken, oldValue?.refreshToken].compactMap({ $0 })
                where old != tokens?.accessToken && old != tokens?.refreshToken {
                    retired.append(old)
                }
                if retired.count > 32 { retired.removeFirst(retired.count - 32) }
            }
        }
        var generation = 0
        var retired: [String] = []
    }

    private let state: Mutex<State>
    private let store: SessionStore
    private let writeLock = AsyncSerialLock()
    let logger: Logger

    public init(store: SessionStore, logger: Logger) throws {
        self.store = store
        self.logger = logger
        state = Mutex(State(tokens: try store.load()))
    }

    public var current: SessionTokens? { state.withLock { $0.tokens } }
    public var generation: Int { state.withLock { $0.generation } }
    public var snapshot: (tokens: SessionTokens?, generation: Int) { state.withLock { ($0.tokens, $0.generation) } }
    /// The tokens in use and the ones most recently replaced: literal secrets for the log scrubber.
    public var secretsForLogs: [String] {
        state.withLock { s in [s.tokens?.accessToken, s.tokens?.refreshToken].compactMap { $0 } + s.retired }
    }

    /// Sets a new session (login, admin `PUT /session`).
    public func set(_ tokens: SessionTokens) async throws {
        try await writeLock.run {
            try await store.save(tokens)
            state.withLock { $0.tokens = tokens; $0.generation += 1 }
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
        try await writeLock.run {
            guard let old = current, accessToken == nil || old.accessToken == accessToken else { return nil }
            try await store.save(nil)
            state.withLock { $0.tokens = nil; $0.generation += 1 }
            return old
        }
    }

    /// Stores refreshed tokens (or a fetched app token, also into an empty session) unless
    /// the session changed since `generation`.
    /// - Returns: whether the tokens were stored.
    public func replace(ifGeneration generation: Int, with tokens: SessionTokens) async throws -> Bool {
        try await writeLock.run {
            guard self.generation == generation, current != nil || tokens.kind == .app else { return false }
            try await store.save(tokens)
            state.withLock { $0.tokens = tokens; $0.generation += 1 }
            return true
        }
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
