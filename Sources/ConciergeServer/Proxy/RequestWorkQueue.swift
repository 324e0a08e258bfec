import NIOCore
import Synchronization

/// One request's asynchronous work: the pipeline call and the writing of the whole reply,
/// streamed bodies included, and the executor it prefers (its connection's event loop).
struct RequestWork: Sendable {
    let executor: (any TaskExecutor)?
    let run: nonisolated(nonsending) @Sendable () async -> Void
}

/// Hands request work from the connections (on their event loops) to the task group of
/// ``ProxyListener/run()``, so every request runs inside a child task of the listener and a
/// graceful shutdown waits for whole replies; a request answered by callbacks on its loop
/// instead is registered here (``beginOnLoop(_:)``) and waited for too.
///
/// A connection's requests go through its ``ConnectionLane``: one child task per connection
/// (started with its first asynchronous request, on the connection's loop) runs them in turn.
/// The next request then reaches its task on that same loop, without a hop through this
/// queue's consumer on another thread and a new task each time.
struct RequestWorkQueue: Sendable {
    private let stream: AsyncStream<RequestWork>
    private let continuation: AsyncStream<RequestWork>.Continuation
    private let lanes: Registry

    /// The open lanes, finished together at shutdown, and the requests answered on their
    /// connections' loops (``beginOnLoop(_:)``).
    private final class Registry: Sendable {
        struct State {
            var finished = false
            var open: [ObjectIdentifier: ConnectionLane] = [:]
            var onLoop: [UInt64: any Channel] = [:]
            var nextOnLoop: UInt64 = 0
            /// ``run()`` waiting for the last request on a loop; set `cancelled` closes them.
            var drained: CheckedContinuation<Void, Never>?
            var cancelled = false
        }
        let state = Mutex(State())
    }

    /// A request answered by callbacks on its connection's event loop, not as work here.
    struct OnLoopRequest: Sendable {
        fileprivate let id: UInt64
    }

    init() {
        (stream, continuation) = AsyncStream.makeStream(of: RequestWork.self)
        lanes = Registry()
    }

    /// Queues `work`; `false` once the queue is finished (the listener is shutting down).
    func submit(_ work: RequestWork) -> Bool {
        if case .enqueued = continuation.yield(work) { return true }
        return false
    }

    /// A lane for one connection's requests, running as a child task that prefers `executor`;
    /// `nil` once the queue is finished.
    func openLane(executor: (any TaskExecutor)?) -> ConnectionLane? {
        let lane = ConnectionLane()
        let id = ObjectIdentifier(lane)
        let registered = lanes.state.withLock { state in
            guard !state.finished else { return false }
            state.open[id] = lane
            return true
        }
        guard registered else { return nil }
        let lanes = self.lanes
        let started = submit(RequestWork(executor: executor) {
            await lane.run()
            _ = lanes.state.withLock { $0.open.removeValue(forKey: id) }
        })
        guard started else {
            _ = lanes.state.withLock { $0.open.removeValue(forKey: id) }
            return nil
        }
        return lane
    }

    /// Registers a request answered by callbacks on `channel`'s event loop, so that ``run()``
    /// waits for its reply as for the work of a lane (and closes `channel` when the grace
    /// period is over); `nil` once the queue is finished. End it with ``end(_:)``.
    func beginOnLoop(_ channel: any Channel) -> OnLoopRequest? {
        lanes.state.withLock { state in
            guard !state.finished else { return nil }
            state.nextOnLoop &+= 1
            state.onLoop[state.nextOnLoop] = channel
            return OnLoopRequest(id: state.nextOnLoop)
        }
    }

    /// The request's reply is written.
    func end(_ request: OnLoopRequest) {
        let drained = lanes.state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.onLoop.removeValue(forKey: request.id)
            guard state.onLoop.isEmpty else { return nil }
            defer { state.drained = nil }
            return state.drained
        }
        drained?.resume()
    }

    /// Lanes whose task has not ended yet.
    var openLanes: Int { lanes.state.withLock { $0.open.count } }

    /// Takes no more work; ``run()`` still runs what was queued, and each lane what it was given.
    func finish() {
        let open = lanes.state.withLock { state in
            state.finished = true
            return Array(state.open.values)
        }
        for lane in open { lane.finish() }
        continuation.finish()
    }

    /// Runs each queued item as a child task on its preferred executor; returns once the queue is finished and every
    /// item has returned. Cancelling the calling task cancels the items.
    ///
    /// - Important: call it once (the queue has one consumer).
    func run() async {
        await withDiscardingTaskGroup { group in
            for await work in stream {
                group.addTask(executorPreference: work.executor) { await work.run() }
            }
        }
        await requestsOnLoopEnded()
    }

    /// Once the queue is finished: until no request on a loop is left; cancelled, closes their
    /// connections (as cancelled work closes its own) and returns.
    private func requestsOnLoopEnded() async {
        let lanes = self.lanes
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waits = lanes.state.withLock { state -> Bool in
                    guard !state.cancelled, !state.onLoop.isEmpty else { return false }
                    state.drained = continuation
                    return true
                }
                if !waits { continuation.resume() }
            }
        } onCancel: {
            let (channels, drained) = lanes.state.withLock { state -> ([any Channel], CheckedContinuation<Void, Never>?) in
                state.cancelled = true
                defer { state.drained = nil }
                return (Array(state.onLoop.values), state.drained)
            }
            for channel in channels { channel.close(promise: nil) }
            drained?.resume()
        }
    }
}

/// One connection's request work, run in order by one task. The connection submits a request
/// once the previous reply is out (replies go out one at a time), and finishes the lane when it
/// closes; the queue finishes every lane at shutdown.
///
/// A lock and one continuation rather than an `AsyncStream`: the lane holds at most one request
/// at a time, and this is on every request's path (the stream's generic storage cost a miss
/// about 8,000 instructions in metadata lookups and locking).
final class ConnectionLane: Sendable {
    typealias Work = nonisolated(nonsending) @Sendable () async -> Void

    private struct State {
        var queued: [Work] = []  // one request at a time; more only in a race with a close
        var waiter: UnsafeContinuation<Work?, Never>?
        var finished = false
    }
    private let state = Mutex(State())

    /// Queues one request's work; `false` once the lane is finished.
    func submit(_ work: @escaping Work) -> Bool {
        enum Outcome { case refused, queued, handed(UnsafeContinuation<Work?, Never>) }
        let outcome: Outcome = state.withLock { state in
            guard !state.finished else { return .refused }
            if let waiter = state.waiter {
                state.waiter = nil
                return .handed(waiter)
            }
            state.queued.append(work)
            return .queued
        }
        switch outcome {
        case .refused: return false
        case .queued: return true
        case .handed(let waiter):
            waiter.resume(returning: work)
            return true
        }
    }

    /// Takes no more work; what was queued still runs.
    func finish() {
        let waiter = state.withLock { state -> UnsafeContinuation<Work?, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Runs the queued work in order until the lane is finished and empty, or the task is
    /// cancelled (which finishes the lane).
    fileprivate func run() async {
        while let work = await next() { await work() }
    }

    /// The next queued work, waiting for it; `nil` once the lane is finished and empty.
    private func next() async -> Work? {
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Work?, Never>) in
                let ready: Work?? = state.withLock { state in
                    if !state.queued.isEmpty { return .some(state.queued.removeFirst()) }
                    if state.finished { return .some(nil) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }
}
