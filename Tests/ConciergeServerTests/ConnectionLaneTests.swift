@testable import ConciergeServer
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

/// ``ConnectionLane`` through ``RequestWorkQueue``, with the listener's work loop on a
/// ``ManualTaskExecutor`` drained on the test's thread: no socket, no timing.
@Suite("Connection lane")
struct ConnectionLaneTests {
    /// The listener's side: the queue's work loop running as a task on `executor`.
    final class Listener {
        let executor = ManualTaskExecutor()
        let queue = RequestWorkQueue()
        let ran = Record<[Int]>([])
        let loopReturned = Record(false)
        let loop: Task<Void, Never>

        init() {
            let (queue, loopReturned) = (self.queue, self.loopReturned)
            loop = Task(executorPreference: executor) {
                await queue.run()
                loopReturned.value.withLock { $0 = true }
            }
            drain()
        }

        func drain() { _ = executor.runQueuedJobs() }

        func work(_ number: Int) -> ConnectionLane.Work {
            let ran = self.ran
            return { ran.value.withLock { $0.append(number) } }
        }
    }

    final class Record<Value: Sendable>: Sendable {
        let value: Mutex<Value>
        init(_ value: Value) { self.value = Mutex(value) }
        func withLock<R>(_ body: (inout Value) -> R) -> R { value.withLock { body(&$0) } }
    }

    @Test("work submitted to a lane runs in order, and the lane's task ends when the lane is finished")
    func runsInOrderThenEnds() throws {
        let listener = Listener()
        let lane = try #require(listener.queue.openLane(executor: listener.executor))
        listener.drain()
        #expect(listener.queue.openLanes == 1)

        #expect(lane.submit(listener.work(1)))
        listener.drain()
        #expect(lane.submit(listener.work(2)))
        #expect(lane.submit(listener.work(3)))
        listener.drain()
        #expect(listener.ran.withLock { $0 } == [1, 2, 3])
        #expect(listener.queue.openLanes == 1, "an idle lane waits for the connection's next request")

        lane.finish()
        listener.drain()
        #expect(listener.queue.openLanes == 0)
        listener.queue.finish()
        listener.drain()
        #expect(listener.loopReturned.withLock { $0 })
    }

    @Test("work queued before the lane is finished still runs; work after is refused")
    func queuedWorkOutlivesFinish() throws {
        let listener = Listener()
        let lane = try #require(listener.queue.openLane(executor: listener.executor))
        #expect(lane.submit(listener.work(1)))
        lane.finish()
        #expect(!lane.submit(listener.work(2)))
        listener.drain()
        #expect(listener.ran.withLock { $0 } == [1])
        #expect(listener.queue.openLanes == 0)
    }

    @Test("finishing the queue finishes its idle lanes, and no lane opens after")
    func queueFinishEndsLanes() throws {
        let listener = Listener()
        _ = try #require(listener.queue.openLane(executor: listener.executor))
        _ = try #require(listener.queue.openLane(executor: listener.executor))
        listener.drain()
        #expect(listener.queue.openLanes == 2)

        listener.queue.finish()
        listener.drain()
        #expect(listener.queue.openLanes == 0)
        #expect(listener.loopReturned.withLock { $0 })
        #expect(listener.queue.openLane(executor: listener.executor) == nil)
    }

    @Test("cancelling the listener's work loop ends an idle lane's task")
    func cancellationEndsIdleLane() throws {
        let listener = Listener()
        let lane = try #require(listener.queue.openLane(executor: listener.executor))
        listener.drain()
        #expect(listener.queue.openLanes == 1)

        listener.loop.cancel()
        listener.drain()
        #expect(listener.queue.openLanes == 0)
        #expect(!lane.submit(listener.work(1)), "a cancelled lane takes no more work")
        listener.queue.finish()
        listener.drain()
        #expect(listener.loopReturned.withLock { $0 })
    }

    @Test("the work loop returns only once every request answered on a loop has ended; none begins after finish")
    func waitsForRequestsOnLoop() throws {
        let listener = Listener()
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let first = try #require(listener.queue.beginOnLoop(channel))
        let second = try #require(listener.queue.beginOnLoop(channel))
        listener.queue.finish()
        listener.drain()
        #expect(listener.queue.beginOnLoop(channel) == nil, "no request begins on a loop once the queue is finished")
        #expect(!listener.loopReturned.withLock { $0 }, "two requests on a loop are still running")
        listener.queue.end(first)
        listener.drain()
        #expect(!listener.loopReturned.withLock { $0 }, "one is still running")
        listener.queue.end(second)
        listener.drain()
        #expect(listener.loopReturned.withLock { $0 })
        #expect(channel.isActive, "an ended request's connection stays open")
    }

    @Test("cancelled (grace period over), the work loop closes the connections of requests still running on a loop and returns")
    func cancellationClosesRequestsOnLoop() throws {
        let listener = Listener()
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let running = try #require(listener.queue.beginOnLoop(channel))
        listener.queue.finish()
        listener.drain()
        #expect(!listener.loopReturned.withLock { $0 })
        listener.loop.cancel()
        listener.drain()
        #expect(listener.loopReturned.withLock { $0 })
        #expect(!channel.isActive, "its connection was closed")
        listener.queue.end(running)  // the reply that comes later changes nothing
    }
}
