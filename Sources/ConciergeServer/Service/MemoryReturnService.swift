import ConciergeStorage
import ServiceLifecycle
import Synchronization

/// The proxy's open client connections, and the most there were since the last look: a burst
/// of connections that closed leaves their buffers free in glibc's arenas, in the process's
/// RSS, until something returns them (``MemoryReturnService``).
final class OpenConnections: Sendable {
    private let state = Mutex<(open: Int, peak: Int)>((0, 0))

    func opened() {
        state.withLock { state in
            state.open += 1
            state.peak = max(state.peak, state.open)
        }
    }

    func closed() {
        state.withLock { $0.open -= 1 }
    }

    var open: Int { state.withLock { $0.open } }

    /// How many fewer connections are open than at the peak since the last call; the peak
    /// starts again from the connections open now.
    func takeDrop() -> Int {
        state.withLock { state in
            defer { state.peak = state.open }
            return state.peak - state.open
        }
    }
}

/// Every 10 s: once at least ``closedBurst`` client connections closed since the last look
/// (5,000 connections closing left 180 MB where 45 MB were used before), returns the freed
/// heap to the system (`malloc_trim`, off the event loops).
struct MemoryReturnService: Service {
    static let closedBurst = 500
    let connections: OpenConnections
    var interval: Duration = .seconds(10)

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: interval)
                if connections.takeDrop() >= Self.closedBurst { MemoryTrim.returnFreedMemory() }
            }
        }
    }
}
