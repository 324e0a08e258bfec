@testable import ConciergeCore
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import Logging
import Synchronization
import Testing

/// A ping to PostgreSQL asked again rather than waited on (`HedgedCall`): what the fleet asks
/// before it tries for the row's lock, and again after a try lost its connection. Without a
/// database (each call scripted), then against a real one whose backends are terminated.
@Suite("Hedged calls to PostgreSQL")
struct HedgedCallTests {
    struct Lost: Error {}
    struct Refused: Error {}
    static let lost: @Sendable (any Error) -> Bool = { $0 is Lost }

    /// Each call takes its script's next step: answer, fail, or wait on the gate (never answered).
    final class Script: Sendable {
        enum Step: Sendable { case answer, lose, refuse, hang }
        private let steps: Mutex<[Step]>
        let calls = Mutex(0)
        let gate = LockAttemptTests.Gate()
        init(_ steps: [Step]) { self.steps = Mutex(steps) }
        func call() async throws {
            calls.withLock { $0 += 1 }
            switch steps.withLock({ $0.isEmpty ? .hang : $0.removeFirst() }) {
            case .answer: return
            case .lose: throw Lost()
            case .refuse: throw Refused()
            case .hang: await gate.wait()
            }
        }
    }

    @Test("a call never answered: the second, made beside it after askAgainAfter, answers")
    func unansweredCallIsAskedAgain() async throws {
        let script = Script([.hang, .answer])
        try await HedgedCall.run(within: .seconds(3600), askAgainAfter: .milliseconds(50), retryable: Self.lost) { try await script.call() }
        #expect(script.calls.withLock { $0 } == 2)
        script.gate.open()
    }

    @Test("a call whose connection was lost is made again at once, not after askAgainAfter")
    func lostCallIsMadeAgainAtOnce() async throws {
        let script = Script([.lose, .lose, .answer])
        // An hour's wait for the hedge: only the immediate retries can answer in time.
        try await HedgedCall.run(within: .seconds(3600), askAgainAfter: .seconds(3600), retryable: Self.lost) { try await script.call() }
        #expect(script.calls.withLock { $0 } == 3)
    }

    @Test("a failure that is not a lost connection is the answer at once; so is the last lost one when no tries are left")
    func finalFailures() async throws {
        let refused = Script([.refuse, .answer])
        await #expect(throws: Refused.self) {
            try await HedgedCall.run(within: .seconds(3600), askAgainAfter: .seconds(3600), retryable: Self.lost) { try await refused.call() }
        }
        #expect(refused.calls.withLock { $0 } == 1)
        let lostThrice = Script([.lose, .lose, .lose, .answer])
        await #expect(throws: Lost.self) {
            try await HedgedCall.run(within: .seconds(3600), askAgainAfter: .seconds(3600), tries: 3, retryable: Self.lost) { try await lostThrice.call() }
        }
        #expect(lostThrice.calls.withLock { $0 } == 3)
    }

    @Test("no call answered: the caller is answered at the limit (Deadline.Exceeded), the calls left behind")
    func nothingAnswers() async throws {
        let script = Script([])
        await #expect(throws: Deadline.Exceeded.self) {
            try await HedgedCall.run(within: .milliseconds(300), askAgainAfter: .milliseconds(100), retryable: Self.lost) { try await script.call() }
        }
        // The hedge may or may not have been made by then on a loaded machine; never more.
        #expect(script.calls.withLock { $0 } <= 2)
        script.gate.open()
    }

    @Test("against PostgreSQL: right after every backend of the pool is terminated, a hedged ping answers (20 rounds); errors are described by SQLSTATE and message, never a quoted value")
    func pingAfterBackendsTerminated() async throws {
        try await FleetDatabaseFixture.with(node: "hedged") { database, cluster in
            try await database.migrate()
            for round in 0..<20 {
                // Several connections in the pool, then all of them cut.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<4 { group.addTask { try await database.client.query("SELECT pg_sleep(0.02)") } }
                    try await group.waitForAll()
                }
                _ = try await cluster.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'concierge' AND pid <> pg_backend_pid()")
                // A plain ping failed in 1-3 of 20 rounds here. Five tries, not the fleet's three:
                // in about one round of 300 the pool's new connections were cut too for a second.
                do {
                    try await HedgedCall.run(within: .seconds(10), askAgainAfter: .milliseconds(500), tries: 5) { try await database.ping() }
                } catch {
                    Issue.record("round \(round): \(FleetDatabase.describe(error))")
                }
            }
            // How such errors are logged: the SQLSTATE and message, never a quoted value.
            do {
                try await database.client.query("SELECT 'a-secret-value'::int")
                Issue.record("the bad cast was accepted")
            } catch {
                #expect(FleetDatabase.describe(error) == "server error 22P02", "\(FleetDatabase.describe(error))")
            }
            do {
                try await database.client.query("SELECT * FROM no_such_table")
                Issue.record("the missing table was found")
            } catch {
                #expect(FleetDatabase.describe(error) == "server error 42P01: relation \"no_such_table\" does not exist")
            }
        }
    }
}
