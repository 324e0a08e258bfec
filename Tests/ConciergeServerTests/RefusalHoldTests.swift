@testable import ConciergeServer
import Testing

/// A refusal a node got while renewing alone (`RefusalHold`), judged against the fleet's row
/// without a database: the clock is the test's.
@Suite("A refusal held during a PostgreSQL outage")
struct RefusalHoldTests {
    let start = ContinuousClock.now

    @Test("while PostgreSQL does not answer the refusal is held, however long")
    func heldWhileUnreachable() {
        var hold = RefusalHold(token: "spent")
        #expect(hold.judge(fleetToken: nil, answered: false, now: start) == .wait)
        #expect(hold.judge(fleetToken: nil, answered: false, now: start + .seconds(600)) == .wait)
        #expect(hold.answeredSince == nil)
    }

    @Test("once PostgreSQL answers with another node's token, that token is adopted")
    func adoptsTheFleetsNewerToken() {
        var hold = RefusalHold(token: "spent")
        #expect(hold.judge(fleetToken: "spent", answered: true, now: start) == .wait)
        #expect(hold.judge(fleetToken: "renewed-elsewhere", answered: true, now: start + .seconds(2)) == .adopt)
    }

    @Test("the fleet still holding the refused token is waited out for the settle time after PostgreSQL answers, then the refusal stands")
    func refusedTokenStillTheFleetsIsReleasedAfterTheSettleTime() {
        var hold = RefusalHold(token: "spent")
        #expect(hold.judge(fleetToken: nil, answered: false, now: start) == .wait)
        let answered = start + .seconds(30)
        #expect(hold.judge(fleetToken: "spent", answered: true, now: answered) == .wait)
        #expect(hold.judge(fleetToken: "spent", answered: true, now: answered + RefusalHold.settle - .milliseconds(1)) == .wait)
        #expect(hold.judge(fleetToken: "spent", answered: true, now: answered + RefusalHold.settle) == .release)
    }

    @Test("PostgreSQL lost again during the settle time starts it over")
    func outageAgainRestartsTheSettleTime() {
        var hold = RefusalHold(token: "spent")
        #expect(hold.judge(fleetToken: "spent", answered: true, now: start) == .wait)
        #expect(hold.judge(fleetToken: nil, answered: false, now: start + .seconds(5)) == .wait)
        #expect(hold.judge(fleetToken: "spent", answered: true, now: start + .seconds(12)) == .wait)
        #expect(hold.judge(fleetToken: "spent", answered: true, now: start + .seconds(12) + RefusalHold.settle) == .release)
    }

    @Test("a fleet that has no session once PostgreSQL answers: the refusal stands at once (renewed under the lock, where it is the fleet's)")
    func loggedOutFleetReleases() {
        var hold = RefusalHold(token: "spent")
        #expect(hold.judge(fleetToken: nil, answered: true, now: start) == .release)
    }
}
