import ConciergeCore
import Hummingbird

/// `/_sample/*`: counters for tests and benchmarks.
extension SampleAPIRoutes {
    func stats() -> Response {
        SampleReply.json([
            "total": .int(Int64(state.totalCalls)),
            "refreshCalls": .int(Int64(state.refreshCalls)),
            "paths": .object(state.callsByPath.mapValues { .int(Int64($0)) }),
        ])
    }
}
