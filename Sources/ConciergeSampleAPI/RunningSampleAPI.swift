/// A sample API started with `SampleAPI.start`: where it listens, what it saw, how to stop it.
public struct RunningSampleAPI: Sendable {
    /// The bound TCP port.
    public let port: Int
    /// Counters, last requests and tokens of this instance.
    public let state: SampleAPIState

    let serverTask: Task<Void, any Error>
    let logMuteSwitch: ShutdownMutingLogHandler.Switch

    /// Stops the server; returns once it no longer runs.
    public func shutdown() async {
        logMuteSwitch.mute()
        serverTask.cancel()
        _ = await serverTask.result
    }
}
