@testable import ConciergeServer
import Synchronization
import Testing

/// One try for the fleet row's lock (`FleetSession.LockAttempt`), without a database: a try
/// that never answers is given up on without waiting for it, one holding the lock runs to its
/// end, and an abandoned try that gets the lock later gives it back.
@Suite("Fleet lock tries")
struct LockAttemptTests {
    /// Resumed by the test, never by the clock: what a call the database client never answers looks like.
    final class Gate: Sendable {
        private let waiting = Mutex<[CheckedContinuation<Void, Never>]>([])
        private let opened = Mutex(false)
        func wait() async {
            await withCheckedContinuation { continuation in
                let now = opened.withLock { open -> Bool in
                    if !open { waiting.withLock { $0.append(continuation) } }
                    return open
                }
                if now { continuation.resume() }
            }
        }
        func open() {
            opened.withLock { $0 = true }
            for continuation in waiting.withLock({ list in defer { list.removeAll() }; return list }) { continuation.resume() }
        }
    }

    @Test("a try that neither gets the lock nor fails is given up on after its slice; if it gets the lock later, it decides nothing")
    func unansweredTryIsAbandoned() async throws {
        let attempt = FleetSession.LockAttempt()
        let gate = Gate()
        let decided = Mutex(false)
        let body: @Sendable () async throws -> Int? = {
            await gate.wait()  // the call for the lock, unanswered until the gate opens
            guard attempt.claim() else { return nil }
            decided.withLock { $0 = true }
            return 1
        }
        await #expect(throws: FleetSession.LockAttempt.Unanswered.self) {
            _ = try await attempt.run(unanswered: .milliseconds(50), total: .seconds(60), body)
        }
        gate.open()
        #expect(!attempt.claim(), "abandoned: the lock, once got, is given back")
        #expect(!decided.withLock { $0 })
    }

    @Test("a try holding the lock runs past its slice to its end (this node's token request)")
    func lockedTryRunsToItsEnd() async throws {
        let attempt = FleetSession.LockAttempt()
        let value = try await attempt.run(unanswered: .milliseconds(10), total: .seconds(60)) { () async throws -> Int? in
            guard attempt.claim() else { return nil }
            try await Task.sleep(for: .milliseconds(300))  // the token request, 30 slices long
            return 7
        }
        #expect(value == 7)
        #expect(!attempt.abandon(), "a try that got the lock is never abandoned")
    }

    @Test("a try that fails at once fails with its own error")
    func failingTry() async throws {
        struct LockTimeout: Error {}
        let attempt = FleetSession.LockAttempt()
        await #expect(throws: LockTimeout.self) {
            _ = try await attempt.run(unanswered: .seconds(30), total: .seconds(60)) { () async throws -> Int? in throw LockTimeout() }
        }
    }
}
