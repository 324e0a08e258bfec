@testable import ConciergeServer
import ConciergeTestSupport
import Testing

/// ``MissCoalescer``: the async leader (``MissCoalescer/run(key:_:)``) and the event loop's
/// (``MissCoalescer/lead(_:)``, ``MissCoalescer/hand(_:_:)``) share one table of waiters.
@Suite("Miss coalescer")
struct MissCoalescerTests {
    @Test("a lead taken on a loop makes later misses wait, and they get the result it hands over")
    func loopLeaderHandsItsResult() async throws {
        let coalescer = MissCoalescer<String>()
        #expect(coalescer.lead("k"))
        #expect(!coalescer.lead("k"), "one leader per key")
        #expect(coalescer.lead("other"), "keys are independent")
        let waiter = Task { await coalescer.run(key: "k") { "fetched by the waiter" } }
        #expect(await eventually(.seconds(60)) { coalescer.waiting(on: "k") == 1 })
        coalescer.hand("k", "fetched by the leader")
        #expect(await waiter.value == "fetched by the leader")
        #expect(coalescer.lead("k"), "the key is free again")
    }

    @Test("a lead given back without a result lets each waiter fetch on its own")
    func leadGivenBack() async throws {
        let coalescer = MissCoalescer<String>()
        #expect(coalescer.lead("k"))
        let waiter = Task { await coalescer.run(key: "k") { "fetched by the waiter" } }
        #expect(await eventually(.seconds(60)) { coalescer.waiting(on: "k") == 1 })
        coalescer.hand("k", nil)
        #expect(await waiter.value == "fetched by the waiter")
    }

    @Test("a loop cannot lead while an async leader fetches; it can once that one is done")
    func asyncLeaderBlocksLoopLead() async throws {
        let coalescer = MissCoalescer<String>()
        let (started, didStart) = AsyncStream.makeStream(of: Void.self)
        let (gate, open) = AsyncStream.makeStream(of: Void.self)
        let leader = Task {
            await coalescer.run(key: "k") {
                didStart.yield()
                for await _ in gate { break }
                return "async"
            }
        }
        for await _ in started { break }
        #expect(!coalescer.lead("k"), "the async leader holds the key")
        open.yield()
        #expect(await leader.value == "async")
        #expect(coalescer.lead("k"))
    }
}
