@testable import ConciergeStorage
import Synchronization
import Testing

/// A call with a deadline that cannot be cancelled underneath its caller (`Deadline`), on a
/// clock the test moves: the deadline hit, the work first, work that ignores its cancellation,
/// an early answer, a cancelled caller, and the race for work that ends when cancelled.
@Suite("Deadline", .timeLimit(.minutes(1)))
struct DeadlineTests {
    /// Opened by the test, never by cancellation: what a call the database client never answers looks like.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))
        func wait() async {
            await withCheckedContinuation { continuation in
                let open = state.withLock { s in
                    if !s.open { s.waiting.append(continuation) }
                    return s.open
                }
                if open { continuation.resume() }
            }
        }
        func open() {
            for continuation in state.withLock({ s in defer { s = (true, []) }; return s.waiting }) { continuation.resume() }
        }
    }

    /// What the work saw: that it started, and whether it was cancelled when it went on.
    final class Work: Sendable {
        let started = Gate()
        let ended = Gate()
        let cancelled = Mutex<Bool?>(nil)
        /// Opened when the work is cancelled.
        let cancelling = Gate()
        /// Starts, waits on `gate` (heedless of cancellation), records whether it was cancelled.
        func hang(on gate: Gate) async -> Int {
            await withTaskCancellationHandler {
                started.open()
                await gate.wait()
                cancelled.withLock { $0 = Task.isCancelled }
                ended.open()
                return 1
            } onCancel: {
                cancelling.open()
            }
        }
    }

    @Test("the deadline hit: the caller gets Exceeded at the limit on the clock, the work is cancelled and left behind")
    func deadlineHit() async throws {
        let clock = TestClock()
        let (gate, work) = (Gate(), Work())
        let caller = Task { try await Deadline.run(.seconds(10), clock: clock) { (answer: Deadline.Answer<Int>) in answer.send(.success(await work.hang(on: gate))) } }
        await clock.sleepers(1)
        clock.advance(by: .seconds(9))
        await work.started.wait()
        #expect(work.cancelled.withLock { $0 } == nil)
        clock.advance(by: .seconds(1))
        await #expect(throws: Deadline.Exceeded.self) { try await caller.value }
        await work.cancelling.wait()
        gate.open()
        await work.ended.wait()
        #expect(work.cancelled.withLock { $0 } == true, "the work is cancelled at the deadline")
    }

    @Test("the work answers first: its value, or its error; the timer is stopped")
    func workFinishesFirst() async throws {
        let clock = TestClock()
        #expect(try await Deadline.run(.seconds(10), clock: clock) { (answer: Deadline.Answer<Int>) in answer.send(.success(7)) } == 7)
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await Deadline.run(.seconds(10), clock: clock) { (answer: Deadline.Answer<Int>) in answer.send(.failure(Refused())) }
        }
        await clock.sleepers(0)
        #expect(try await Deadline.run(.seconds(10)) { 8 } == 8)
    }

    @Test("work that ignores its cancellation: an early answer reaches the caller at once, while the work runs on")
    func earlyAnswer() async throws {
        let clock = TestClock()
        let (gate, work) = (Gate(), Work())
        let value = try await Deadline.run(.seconds(10), clock: clock) { (answer: Deadline.Answer<Int>) in
            answer.send(.success(3))
            #expect(!answer.send(.success(4)), "one answer only")
            _ = await work.hang(on: gate)
        }
        #expect(value == 3)
        await clock.sleepers(1)
        clock.advance(by: .seconds(10))
        await work.cancelling.wait()
        gate.open()
        await work.ended.wait()
        #expect(work.cancelled.withLock { $0 } == true, "the work left running is cancelled at the deadline")
    }

    @Test("work that ends without answering: the caller is answered at the limit")
    func workWithoutAnswer() async throws {
        let clock = TestClock()
        let caller = Task { try await Deadline.run(.seconds(5), clock: clock) { (_: Deadline.Answer<Int>) in } }
        await clock.sleepers(1)
        clock.advance(by: .seconds(5))
        await #expect(throws: Deadline.Exceeded.self) { try await caller.value }
    }

    @Test("a cancelled caller is answered at once; its work goes on (not cancelled), still within the limit")
    func callerCancelled() async throws {
        let clock = TestClock()
        let (gate, work) = (Gate(), Work())
        let delivered = Mutex<Bool?>(nil)
        let caller = Task {
            try await Deadline.run(.seconds(10), clock: clock) { (answer: Deadline.Answer<Int>) in
                let value = await work.hang(on: gate)
                delivered.withLock { $0 = answer.send(.success(value)) }
            }
        }
        await work.started.wait()
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        gate.open()
        await work.ended.wait()
        #expect(work.cancelled.withLock { $0 } == false, "the caller's cancellation is not the work's")
        #expect(await eventually { delivered.withLock { $0 } == false }, "an answer after the caller left is not taken")
        await clock.sleepers(0)
    }

    @Test("race: work that ends when cancelled is cancelled at the limit and awaited; work first gives its value")
    func race() async throws {
        struct Late: Error {}
        let clock = TestClock()
        let ended = Mutex(false)
        let racing = Task {
            try await Deadline.race(.seconds(2), clock: clock, exceeded: { Late() }) { () async throws -> Int in
                defer { ended.withLock { $0 = true } }
                try await Task.sleep(for: .seconds(3600))
                return 1
            }
        }
        await clock.sleepers(1)
        clock.advance(by: .seconds(2))
        await #expect(throws: Late.self) { try await racing.value }
        #expect(ended.withLock { $0 }, "the work ended before the race returned")
        #expect(try await Deadline.race(.seconds(2), clock: clock, exceeded: { Late() }) { 5 } == 5)
    }

    /// Polls `condition` (bounded: 5 s), for what ends in a task the test does not hold.
    func eventually(_ condition: @Sendable () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while !condition() {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return true
    }
}

/// A clock that moves only when told to; `sleepers(_:)` waits until that many sleep on it.
final class TestClock: Clock, Sendable {
    struct Instant: InstantProtocol {
        var offset: Duration
        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
    }

    private struct Sleeper {
        var until: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var next = 0
        var sleepers: [Int: Sleeper] = [:]
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

        /// The watchers whose count the sleepers now match.
        mutating func matched() -> [CheckedContinuation<Void, Never>] {
            let count = sleepers.count
            defer { watchers.removeAll { $0.count == count } }
            return watchers.filter { $0.count == count }.map(\.continuation)
        }
    }

    private let state = Mutex(State())
    var now: Instant { state.withLock { $0.now } }
    var minimumResolution: Duration { .zero }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        let id = state.withLock { s in defer { s.next += 1 }; return s.next }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (now, watchers) = state.withLock { s -> (Result<Void, any Error>?, [CheckedContinuation<Void, Never>]) in
                    if Task.isCancelled { return (.failure(CancellationError()), []) }
                    if deadline <= s.now { return (.success(()), []) }
                    s.sleepers[id] = Sleeper(until: deadline, continuation: continuation)
                    return (nil, s.matched())
                }
                if let now { continuation.resume(with: now) }
                for watcher in watchers { watcher.resume() }
            }
        } onCancel: {
            let (sleeper, watchers) = state.withLock { s in (s.sleepers.removeValue(forKey: id), s.matched()) }
            sleeper?.continuation.resume(throwing: CancellationError())
            for watcher in watchers { watcher.resume() }
        }
    }

    func advance(by duration: Duration) {
        let (due, watchers) = state.withLock { s -> ([Sleeper], [CheckedContinuation<Void, Never>]) in
            s.now = s.now.advanced(by: duration)
            let due = s.sleepers.filter { $0.value.until <= s.now }
            for id in due.keys { s.sleepers.removeValue(forKey: id) }
            return (Array(due.values), s.matched())
        }
        for sleeper in due { sleeper.continuation.resume() }
        for watcher in watchers { watcher.resume() }
    }

    /// Returns once exactly `count` sleep on this clock.
    func sleepers(_ count: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { s in
                if s.sleepers.count == count { return true }
                s.watchers.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }
}
