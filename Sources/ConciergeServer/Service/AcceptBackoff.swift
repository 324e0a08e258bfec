import Glibc
import Logging
import NIOCore
import Synchronization

/// Accept failures for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) on a
/// listener: accepting stops for a second instead of spinning a core, and the failure is
/// logged at most once a minute. One per listener (proxy and admin), shared by its handlers.
final class AcceptFailureLog: Sendable {
    /// How long accepting rests after such a failure.
    static let pause = TimeAmount.seconds(1)

    private let logger: Logger
    private let listener: String
    private let lastLogged = Mutex<ContinuousClock.Instant?>(nil)
    private let now: @Sendable () -> ContinuousClock.Instant

    init(logger: Logger, listener: String = "proxy", now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        (self.logger, self.listener, self.now) = (logger, listener, now)
    }

    /// The handler to put first in a listener's server channel pipeline.
    func backoffHandler(pause: TimeAmount = AcceptFailureLog.pause) -> AcceptPauseHandler {
        AcceptPauseHandler(log: self, pause: pause)
    }

    /// Whether `error` is an accept failure for lack of descriptors or memory, which waiting cures.
    static func isResourceShortage(_ error: any Error) -> Bool {
        guard let error = error as? IOError else { return false }
        switch error.errnoCode {
        case EMFILE, ENFILE, ENOBUFS, ENOMEM: return true
        default: return false
        }
    }

    /// Logs `error` unless it was logged less than a minute ago; whether it logged.
    @discardableResult
    func record(_ error: IOError) -> Bool {
        let at = now()
        let due = lastLogged.withLock { last -> Bool in
            guard last.map({ at - $0 >= .seconds(60) }) ?? true else { return false }
            last = at
            return true
        }
        if due {
            logger.error("cannot accept connections: out of file descriptors or memory; retrying every second",
                         metadata: ["listener": "\(listener)", "error": "\(error)"])
        }
        return due
    }
}

/// Stops a server channel's accept loop for ``AcceptFailureLog/pause`` after a failure for
/// lack of descriptors or memory, then accepts again (and again pauses if it fails again).
///
/// Why not NIO's `AcceptBackoffHandler` alone: it holds back the pipeline's `read()`, but after
/// a failed `accept` NIO's server socket channel keeps its read pending and stays registered
/// for readability, and never asks the pipeline to read: the selector reports the waiting
/// connection again at once and `accept4` fails again, thousands of times a second, while the
/// handler never sees a `read()` to hold. Turning `autoRead` off deregisters the socket from
/// the selector; turning it on again re-registers it. A `read()` asked for meanwhile is held and
/// passed on when accepting resumes.
///
/// - Important: Put it first in the server channel's pipeline (next to the head), so it sees
///   the error before any handler that might swallow it. Event-loop bound, like every handler.
final class AcceptPauseHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = any Channel
    typealias OutboundIn = any Channel

    private let log: AcceptFailureLog
    private let pause: TimeAmount
    private var resume: Scheduled<Void>?
    private var heldRead = false

    init(log: AcceptFailureLog, pause: TimeAmount) {
        (self.log, self.pause) = (log, pause)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if AcceptFailureLog.isResourceShortage(error), let ioError = error as? IOError {
            log.record(ioError)
            if resume == nil {
                try? context.channel.syncOptions?.setOption(.autoRead, value: false)
                // NIO's deadlines, as NIO's own back-off: an embedded loop in tests is moved to them.
                resume = context.eventLoop.assumeIsolated().scheduleTask(deadline: .now() + pause) {
                    self.acceptAgain(context)
                }
            }
        }
        context.fireErrorCaught(error)
    }

    func read(context: ChannelHandlerContext) {
        if resume != nil {
            heldRead = true
        } else {
            context.read()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        resume?.cancel()
        (resume, heldRead) = (nil, false)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        if resume != nil {
            resume?.cancel()
            acceptAgain(context)
        }
    }

    private func acceptAgain(_ context: ChannelHandlerContext) {
        resume = nil
        try? context.channel.syncOptions?.setOption(.autoRead, value: true)
        if heldRead {
            heldRead = false
            context.read()
        }
    }
}
