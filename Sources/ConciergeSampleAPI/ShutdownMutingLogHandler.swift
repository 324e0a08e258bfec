import Logging
import Synchronization

/// Forwards to another log handler until `SampleAPI` shutdown begins, then drops everything.
///
/// `RunningSampleAPI.shutdown()` stops the server by cancelling it, and Hummingbird reports
/// that cancellation at error level ("Waiting on child channel: CancellationError()"); this
/// keeps test output free of those expected lines.
struct ShutdownMutingLogHandler: LogHandler {
    /// Set once when shutdown begins; shared by every copy of the handler.
    final class Switch: Sendable {
        private let muted = Atomic(false)

        var isMuted: Bool { muted.load(ordering: .relaxed) }

        func mute() { muted.store(true, ordering: .relaxed) }
    }

    private var wrapped: any LogHandler
    let muteSwitch: Switch

    /// A logger with `logger`'s label and handler, muted by `muteSwitch`.
    static func logger(wrapping logger: Logger, muteSwitch: Switch) -> Logger {
        let handler = ShutdownMutingLogHandler(wrapped: logger.handler, muteSwitch: muteSwitch)
        return Logger(label: logger.label) { _ in handler }
    }

    func log(event: LogEvent) {
        guard !muteSwitch.isMuted else { return }
        wrapped.log(event: event)
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { wrapped.metadataProvider }
        set { wrapped.metadataProvider = newValue }
    }

    var metadata: Logger.Metadata {
        get { wrapped.metadata }
        set { wrapped.metadata = newValue }
    }

    var logLevel: Logger.Level {
        get { wrapped.logLevel }
        set { wrapped.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { wrapped[metadataKey: key] }
        set { wrapped[metadataKey: key] = newValue }
    }
}
