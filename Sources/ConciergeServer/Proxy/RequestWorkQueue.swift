/// One request's asynchronous work: the pipeline call and the writing of the whole reply,
/// streamed bodies included, and the executor it prefers (its connection's event loop).
struct RequestWork: Sendable {
    let executor: (any TaskExecutor)?
    let run: @Sendable () async -> Void
}

/// Hands request work from the connections (on their event loops) to the task group of
/// ``ProxyListener/run()``, so every request runs as a child task of the listener and a
/// graceful shutdown waits for whole replies without counting them.
struct RequestWorkQueue: Sendable {
    private let stream: AsyncStream<RequestWork>
    private let continuation: AsyncStream<RequestWork>.Continuation

    init() {
        (stream, continuation) = AsyncStream.makeStream(of: RequestWork.self)
    }

    /// Queues `work`; `false` once the queue is finished (the listener is shutting down).
    func submit(_ work: RequestWork) -> Bool {
        if case .enqueued = continuation.yield(work) { return true }
        return false
    }

    /// Takes no more work; ``run()`` still runs what was queued.
    func finish() {
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
    }
}
