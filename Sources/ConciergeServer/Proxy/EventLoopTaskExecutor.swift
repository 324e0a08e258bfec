import NIOCore

/// A `TaskExecutor` (SE-0417) that runs jobs on one event loop: a request's work prefers its
/// connection's loop, so the pipeline, the pooled upstream exchange (whose client channel then
/// lives on the same loop) and the writing of the reply run on one thread, with no hop to the
/// global concurrent executor and back per step.
///
/// Only nonisolated async code follows the preference; actors keep their own executors. Work
/// that blocks (none on the request path: storage reads are GRDB's async calls on its own
/// queues) would hold up the loop's other connections.
final class EventLoopTaskExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
