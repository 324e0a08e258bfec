import Hummingbird

/// `/_sample/*`: counters for tests and benchmarks.
extension SampleAPIRoutes {
    func stats() -> Response {
        SampleReply.json([
            "total": .int(state.totalCalls),
            "refreshCalls": .int(state.refreshCalls),
            "paths": .object(state.callsByPath.mapValues { .int($0) }),
        ])
    }
}
